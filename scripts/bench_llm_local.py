"""The embedded model's cost per role call: CPU kernels (fast vs portable), prompt layout (shared task prefix first vs
instruction first) and threads (1 vs every core), side by side in one run.

    python scripts/bench_llm_local.py [--model qwen2.5-coder-1.5b-instruct] [--tasks 2] [--max-tokens 96]
    python scripts/bench_llm_local.py --kernels-only     # just the kernel table (seconds)

First, each CPU kernel path (``harness.llm.cpu_kernels``: llama.cpp's fast extra buffer types, or its portable
kernels) runs in a child process: prompt and generation tokens per second, or how the child died (a CPU whose fast
kernels crash shows "killed by SIGILL" there), with the path ``llm.cpu_kernels=auto`` takes on this machine.

For each task it makes the calls of the default workflow (planner, diagnoser, repairer) twice: once with our
layout (system = the task frame shared by every role call, user = instruction + context), once with the
instruction as the system message and the frame after it. llama.cpp reuses the evaluated prefix of the previous
prompt, so with the shared layout the calls after the first pay only for their own part. Prints seconds and
prompt tokens per call, and tokens/s of generation with 1 thread and with every core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import benchmarks
from harness.llm.factory import make_llm
from workflows.prompting import build_messages
from workflows.roles import default_prompts, response_format

EVIDENCE = {
    "diagnoser": "Best equation: c0*x + c1*v [valid NMSE 0.02]\nResiduals: mean 0, std 0.1\n- vs x: spearman -0.61, "
                 "eta2 0.4 (flagged)\n- vs t: spearman 0.05, eta2 0.01",
    "repairer": "Diagnosis: issues: residuals fall with x | missing terms: c0*x**3\nBest equation: 1.2*x - 0.1*v",
}


def instruction_first(messages: list[dict[str, str]], instruction: str) -> list[dict[str, str]]:
    """The old layout: the instruction is the system message, the task frame opens the user message."""
    frame, user = messages[0]["content"], messages[1]["content"]
    header, _, rest = user.partition("\n")
    rest = rest.replace(instruction.strip(), "", 1).lstrip("\n")
    return [{"role": "system", "content": instruction}, {"role": "user", "content": f"{header}\n{frame}\n\n{rest}"}]


def kernel_table(model: str | None) -> None:
    """Each kernel path in a child process (a crash is a row, not the end of this script), every core."""
    from harness.core.resources import usable_cpus
    from harness.llm import cpu_kernels
    from harness.llm.models import embedded_model_path

    path = embedded_model_path(model)
    threads = max(1, min(8, usable_cpus()))
    cpu = cpu_kernels.cpu_description()
    print(f"CPU {cpu['model']}; flags {', '.join(cpu_kernels.notable_flags(cpu))}; "
          f"llama-cpp-python {cpu_kernels.build_description()['version']}; {threads} threads")
    print("\n| kernels | outcome | prompt tokens | prompt tok/s | generation tok/s |\n|---|---|---|---|---|")
    for kernels in cpu_kernels.KERNEL_PATHS:
        r = cpu_kernels.probe(path, kernels, threads, new_tokens=64)
        rates = (f"{r.prompt_tokens} | {r.prompt_tok_s:.1f} | {r.generation_tok_s:.1f}" if r.ok else "- | - | -")
        print(f"| {kernels} | {r.outcome} | {rates} |", flush=True)
    chosen = cpu_kernels.load_or_probe(path, threads)["chosen"]
    print(f"\nllm.cpu_kernels=auto takes: {chosen}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--cpu-kernels", default="auto", choices=["auto", "fast", "portable"],
                        help="the kernels of the role-call measurements (llm.cpu_kernels)")
    parser.add_argument("--kernels-only", action="store_true", help="print the kernel table and stop")
    args = parser.parse_args(argv)
    kernel_table(args.model)
    if args.kernels_only:
        return 0
    prompts = default_prompts()
    tasks = benchmarks.load_suite("synthetic", n_per_domain=1, split="train")[: args.tasks]
    llm = make_llm({"provider": "local", "model": args.model, "temperature": 0.0, "max_tokens": args.max_tokens,
                    "cpu_kernels": args.cpu_kernels})
    t0 = time.perf_counter()
    llm.complete([{"role": "user", "content": "hi"}], max_tokens=1)
    print(f"model load + first call: {time.perf_counter() - t0:.1f}s", flush=True)
    rows: dict[str, list[tuple[float, int]]] = {"shared prefix (ours)": [], "instruction first": []}
    for task in tasks:
        for layout in rows:
            for role in ("planner", "diagnoser", "repairer"):
                msgs = build_messages(role, prompts[role], task, evidence=EVIDENCE.get(role, ""))
                if layout == "instruction first":
                    msgs = instruction_first(msgs, prompts[role])
                t = time.perf_counter()
                r = llm.complete(msgs, response_format=response_format(role), seed=0)[0]
                rows[layout].append((time.perf_counter() - t, r.prompt_tokens))
                print(f"{task.name:20s} {layout:22s} {role:10s} {rows[layout][-1][0]:6.1f}s "
                      f"prompt {r.prompt_tokens} completion {r.completion_tokens}", flush=True)
    print("\n| layout | calls | mean s/call | mean s/call after the first of a task | prompt tokens |")
    print("|---|---|---|---|---|")
    for layout, vals in rows.items():
        later = [v[0] for i, v in enumerate(vals) if i % 3]
        print(f"| {layout} | {len(vals)} | {statistics.mean(v[0] for v in vals):.1f} | {statistics.mean(later):.1f} "
              f"| {statistics.mean(v[1] for v in vals):.0f} |")

    # generation speed by threads (a fixed 128-token answer, prompt already cached); one loaded model
    msgs = [{"role": "user", "content": "Write the numbers from 1 to 200, separated by spaces."}]
    print("\n| threads | generation tok/s |\n|---|---|")
    for threads in sorted({1, llm.max_threads()}):
        llm.config = llm.config.model_copy(update={"n_threads": threads})
        llm.complete(msgs, max_tokens=4, temperature=0.0)  # warm the prompt
        t = time.perf_counter()
        r = llm.complete(msgs, max_tokens=128, temperature=0.0)[0]
        print(f"| {threads} | {r.completion_tokens / (time.perf_counter() - t):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
