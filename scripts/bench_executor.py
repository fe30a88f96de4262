"""What does a solve cost on Ray beyond the solve itself? The same small benchmark, ``executor=local`` vs ``ray``.

    python scripts/bench_executor.py [--suite lsr_like] [--tasks 4] [--time-budget 5] [--nodes 2] [--llm tiny]
                                     [--address HOST:PORT] [--out runs/bench_executor]

Arms, each in a fresh output folder (nothing cached): ``local`` (one solve at a time in this process: what
``python -m benchmarks run`` does by default), then ``ray`` on ``--nodes`` nodes of one CPU each (a private
``ray.cluster_utils.Cluster`` on this machine unless ``--address`` names a running cluster), twice: ``cold``
(fresh worker processes, which import the package and start their SR worker children) and ``warm`` (the same
workers again). Prints wall seconds, the summed in-solve seconds (each record's ``seconds``), the solves in flight
and the overhead per solve = (wall x slots - summed solve seconds) / solves: slot time not spent inside a solve
(dispatch, pickling, shipping folders back, idle slots in the last wave).

The model is the embedded SmolLM2-135M (``--llm tiny``, seconds per call) by default, so the figures are mostly
the executor's and the SR engine's; ``--llm local`` uses the shipped 1.5B model, and ``--llm scripted`` the
tests' scripted double (``tests/doubles.py``: instant valid answers, no model time at all).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.doubles (the scripted model) for this process and, via Ray, its workers

from benchmarks import load_suite  # noqa: E402
from benchmarks.runner import load_records, run_benchmark  # noqa: E402
from harness.app.artifact import FrozenHarness  # noqa: E402
from harness.app.executor import ExecutorConfig, LocalExecutor, SolveExecutor  # noqa: E402
from harness.app.executor_factory import make_executor  # noqa: E402

LLMS = {
    "scripted": {"provider": "tests.doubles.ScriptedLLM"},  # scripted_role_output: valid JSON for every role
    "tiny": {"provider": "local", "model": "smollm2-135m-instruct"},
    "local": {"provider": "local"},
}


def arm(name: str, executor: SolveExecutor, harness: FrozenHarness, tasks: list[Any], llm: dict[str, Any],
        sr: dict[str, Any], out: Path) -> dict[str, Any]:
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    run_benchmark(harness, tasks, folder, seed=0, llm=llm, sr_settings=sr, executor=executor)
    wall = time.perf_counter() - t0
    records = load_records(folder / "results.jsonl")
    inside = sum(float(r.get("seconds") or 0.0) for r in records)
    slots = min(executor.slots, len(tasks))
    hosts = {(r.get("worker") or {}).get("node_id") or (r.get("worker") or {}).get("pid") for r in records}
    return {"arm": name, "solves": len(records), "slots": slots, "wall s": round(wall, 1),
            "sum solve s": round(inside, 1), "ideal wall s": round(inside / slots, 1),
            "overhead s / solve": round((wall * slots - inside) / max(1, len(records)), 2),
            "nodes/procs used": len(hosts), "errors": sum(r.get("status") == "error" for r in records)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="lsr_like")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--time-budget", type=float, default=5.0, help="seconds per SR run")
    parser.add_argument("--nodes", type=int, default=2, help="nodes of the private cluster (one CPU each)")
    parser.add_argument("--address", default=None, help="a running Ray cluster instead of a private one")
    parser.add_argument("--llm", choices=sorted(LLMS), default="tiny")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_executor"))
    args = parser.parse_args(argv)

    tasks = load_suite(args.suite, n_per_domain=math.ceil(args.tasks / 4))[: args.tasks]
    harness = FrozenHarness.default()
    llm = LLMS[args.llm]
    sr = {"time_budget": args.time_budget}
    rows = [arm("local", LocalExecutor(1), harness, tasks, llm, sr, args.out)]
    print(rows[-1], flush=True)

    cluster = None
    address = args.address
    if address is None:
        from ray.cluster_utils import Cluster

        t0 = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 100 * 2**20,
                                                                "include_dashboard": False})
        for _ in range(args.nodes - 1):
            cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20)
        cluster.wait_for_nodes()
        address = cluster.address
        print(f"private cluster of {args.nodes} nodes up in {time.perf_counter() - t0:.1f} s", flush=True)
    try:
        t0 = time.perf_counter()
        executor = make_executor(ExecutorConfig(name="ray", address=address, num_cpus=1))
        print(f"driver connected in {time.perf_counter() - t0:.1f} s; {executor.slots} solves in flight", flush=True)
        try:
            for name in ("ray cold", "ray warm"):
                rows.append(arm(name.replace(" ", "_"), executor, harness, tasks, llm, sr, args.out))
                rows[-1]["arm"] = name
                print(rows[-1], flush=True)
        finally:
            executor.close()
    finally:
        if cluster is not None:
            cluster.shutdown()

    keys = list(rows[0])
    print()
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
