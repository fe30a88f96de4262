"""Command line: ``python -m benchmarks list | show <suite> | export <suite> <out_dir> | run <suite> <out_dir>``.

Suite options are given as ``key=value`` (lists comma-separated), e.g.
``python -m benchmarks show synthetic n_per_domain=1 domains=physics,materials``. ``run`` also takes the
``executor`` config group the same way (``executor=ray executor.address=auto executor.num_cpus=2``; docs/scale.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from benchmarks import ALIASES, SUITES, _suite, list_suites, load_suite
from harness.core.task import Task, TaskError


def _parse_options(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TaskError(f"options are key=value, got {item!r}")
        out[key.strip()] = value
    return out


def _load(args: argparse.Namespace) -> list[Task]:
    options: dict[str, Any] = _parse_options(args.options)
    suite = _suite(args.suite)
    names = args.name or []
    if names and "names" in suite.options:
        options["names"] = names
    tasks = load_suite(suite.name, **options)
    if names and "names" not in suite.options:
        tasks = [t for t in tasks if t.name in names]
    if not tasks:
        raise TaskError("no tasks matched")
    return tasks


def cmd_list(_: argparse.Namespace) -> None:
    for suite in list_suites():
        print(f"{suite.name}: {suite.description}")
        for key, (kind, help_text) in suite.options.items():
            print(f"    {key}=<{kind}>  {help_text}")
        print("    max_rows=<int>  keep at most this many rows per split")
    print("aliases: " + ", ".join(f"{a} -> {b}" for a, b in ALIASES.items()))


def cmd_show(args: argparse.Namespace) -> None:
    for i, task in enumerate(_load(args)):
        if i:
            print()
        print(task.card(max_chars=args.max_chars))
        if task.ground_truth and not args.hide_ground_truth:
            print(f"Ground truth: {task.target_name} = {task.ground_truth}")


def cmd_export(args: argparse.Namespace) -> None:
    from benchmarks.export import export_tasks

    tasks = _load(args)
    for folder in export_tasks(tasks, args.out_dir):
        print(folder)


def _executor_options(args: argparse.Namespace) -> dict[str, str]:
    """Take ``executor=...`` / ``executor.<key>=...`` out of the suite options (the ``executor`` config group)."""
    ours = [o for o in args.options if o.partition("=")[0].strip().startswith("executor")]
    args.options = [o for o in args.options if o not in ours]
    return _parse_options(ours)


def cmd_run(args: argparse.Namespace) -> None:
    """Solve every task of a suite with a frozen harness; resumable; prints the per-task table."""
    from benchmarks.runner import domain_markdown, markdown_table, run_benchmark, summary_row
    from harness.app.artifact import FrozenHarness
    from harness.app.progress import Progress, format_seconds, print_summary
    from harness.app.executor import ExecutorError
    from harness.app.executor_factory import make_executor, split_executor_options

    try:
        _, executor_config = split_executor_options(_executor_options(args))
    except ExecutorError as exc:
        raise TaskError(str(exc)) from exc
    tasks = _load(args)
    harness = FrozenHarness.resolve(args.harness)
    llm: dict[str, Any] | None = None
    if args.llm or args.base_url or args.model:
        llm = {k: v for k, v in {"provider": args.llm, "base_url": args.base_url, "model": args.model}.items() if v}
    sr = {"time_budget": args.time_budget} if args.time_budget else None

    try:
        executor = make_executor(executor_config)
    except ExecutorError as exc:
        raise TaskError(str(exc)) from exc
    progress = Progress(f"benchmark {args.suite}")
    try:
        table = run_benchmark(harness, tasks, args.out_dir, seed=args.seed, llm=llm, sr_settings=sr,
                              executor=executor, progress=progress)
    finally:
        progress.close()
        executor.close()
    text = markdown_table(table) + "\n\nPer domain (sa: symbolic accuracy over tasks with a known ground truth, "
    text += "harness/core/symbolic.py):\n\n" + domain_markdown(table)
    table_file = Path(args.out_dir) / "table.md"
    table_file.write_text(text + "\n", encoding="utf-8")
    print(text)
    summary = summary_row(table) if len(table) else {}
    print_summary(f"{args.suite}: {len(table)} tasks, seed {args.seed}", [
        {"split": tag, "acc_0.01 (95 %)": summary.get(f"acc_0.01_{key}"),
         "acc_0.01 (every point)": summary.get(f"acc_all_0.01_{key}"),
         "acc_0.001": summary.get(f"acc_0.001_{key}"), "median NMSE": summary.get(f"median_nmse_{key}")}
        for tag, key in (("ID", "id"), ("OOD", "ood"))],
        notes=[f"symbolic accuracy {summary.get('sa', float('nan')):.3f}; {format_seconds(progress.elapsed)}; "
               f"table: {table_file}; records: {Path(args.out_dir) / 'results.jsonl'}"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="Benchmark suites as SR tasks.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the suites and their options").set_defaults(func=cmd_list)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("suite", help=f"one of {', '.join(SUITES)}")
        p.add_argument("--name", action="append", help="only this task (repeatable)")
        p.add_argument("options", nargs="*", metavar="key=value", help="suite options")

    show = sub.add_parser("show", help="print task cards")
    common(show)
    show.add_argument("--max-chars", type=int, default=1500, help="card length limit")
    show.add_argument("--hide-ground-truth", action="store_true", help="do not print ground truth formulas")
    show.set_defaults(func=cmd_show)

    export = sub.add_parser("export", help="write tasks as LLM-SR layout folders")
    export.add_argument("suite", help=f"one of {', '.join(SUITES)}")
    export.add_argument("out_dir", help="output folder (one subfolder per task)")
    export.add_argument("--name", action="append", help="only this task (repeatable)")
    export.add_argument("options", nargs="*", metavar="key=value", help="suite options")
    export.set_defaults(func=cmd_export)

    run = sub.add_parser("run", help="solve a suite with a frozen harness (resumable) and print the table")
    run.add_argument("suite", help=f"one of {', '.join(SUITES)}")
    run.add_argument("out_dir", help="output folder: results.jsonl, table.md, runs/<task>/")
    run.add_argument("--name", action="append", help="only this task (repeatable)")
    run.add_argument("--harness", default="default", help="'default' or a harness JSON file")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--llm", default=None, help="provider override: local | openai | vllm")
    run.add_argument("--base-url", default=None, help="OpenAI-compatible server URL")
    run.add_argument("--model", default=None, help="model name (server) or path (local / vllm)")
    run.add_argument("--time-budget", type=float, default=None, help="seconds per SR run (harness default otherwise)")
    run.add_argument("options", nargs="*", metavar="key=value",
                     help="suite options; executor=local|ray and executor.<key>=<value> (harness/conf/executor, "
                          "e.g. executor=ray executor.address=auto executor.num_cpus=2)")
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # parse_known_args: key=value options may come after --name (argparse stops positionals at an option)
    args, extra = parser.parse_known_args(argv)
    stray = [x for x in extra if x.startswith("-") or "=" not in x]
    if stray or (extra and not hasattr(args, "options")):
        parser.error(f"unrecognized arguments: {' '.join(stray or extra)}")
    if extra:
        args.options = list(args.options) + extra
    try:
        args.func(args)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
