"""Does the optimizer find a gain that is there? Its decisions replayed on the recorded outcome matrix.

    python scripts/power_replay.py [--matrix docs/data/outcome_matrix.jsonl] [--preset small] [--replays 2000]
        [--smac-replays 100] [--out docs/data/power_table.md] [--set stage2.race_pairs=12 ...] [--seeds 0]

Reads the outcome matrix (``scripts/outcome_matrix.py``: harness variants on lsr_like training laws x engine seeds
at the training seconds) and replays, thousands of times over resampled tasks and pair orders
(``optimize.replay``), each acceptance of the optimizer as the preset runs it now (races, ``after``) and as it ran
before racing (the paired rule on fixed minibatches, 2026-12-05's ``small``: ``before``):

1. the matrix itself: each arm's mean scores (-log10 NMSE, acc_0.01 in both readings) and its paired record against
   the initial harness over every pair: the true differences;
2. two-arm decisions (a stage-1 rewrite, a stage-3 child, the gate): the probability of accepting each arm over the
   initial harness (power for a real gain, false accepts for a worse one), and for the same harness run again on
   another seed (the null), with the executions spent;
3. stage 2 as a whole, from the initial harness over the matrix's arms: how often it ends at an arm that is better
   (power), at another arm (false accepts), under the matrix and under a null matrix (outcomes permuted among the
   arms in every pair); SMAC3's ``AlgorithmConfigurationFacade`` on the same arms, pairs and budget beside it.

Prints markdown tables (and writes them to ``--out``); the figures in docs/optimizer.md come from here.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from statistics import mean, median

from optimize.matrix import OutcomeMatrix, space_arms
from optimize.paired import PairedRecord, PairedRule
from optimize.replay import (
    PairedProtocol,
    RaceProtocol,
    Rate,
    Stage2Protocol,
    permuted,
    reseeded,
    sign_p,
    stage2_paired,
    stage2_race,
    stage2_rates,
    stage2_smac,
    two_arm_rate,
    with_other_seed,
)
from optimize.settings import load_preset

START = "initial"
# 2026-12-05's small preset (before racing): the paired rule, net wins >= 2, sign-flip p <= 0.125, 0.3 a tie; stage 1
# on a 4-task minibatch, stage 3 on a 4-task held-out slice, the gate on 4 validation tasks, one seed each; stage 2:
# 10 TPE trials on a 4-task minibatch, the best two confirmed on 4 other tasks x 2 seeds; 8 training tasks.
BEFORE_RULE = PairedRule(min_net_wins=2, alpha=0.125, margin=0.3)
BEFORE_TASKS = 8


def fmt(rate: Rate) -> str:
    lo, hi = rate.interval()
    return f"{rate.rate:.3f} [{lo:.2f}, {hi:.2f}]"


def guard_note(matrix: OutcomeMatrix) -> str:
    """How many outcomes seconds decided (a step stopped by its guard), and how many were recorded before that
    was counted: the outcomes a replay may read as the harnesses' own."""
    hits = [o.guard_hits for o in matrix.outcomes.values()]
    stopped, unknown = sum(1 for h in hits if h), sum(1 for h in hits if h is None)
    return (f" Outcomes with a step stopped by seconds: {stopped} of {len(hits)}"
            + (f" ({unknown} recorded before such steps were counted, 2026-12-07)" if unknown else "") + ".")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", default="docs/data/outcome_matrix.jsonl")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--replays", type=int, default=2000)
    parser.add_argument("--stage2-replays", type=int, default=1000)
    parser.add_argument("--smac-replays", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="replay on these engine seeds only (default: every seed of the matrix; a matrix still "
                             "being built replays on the tasks complete at every seed it is replayed on)")
    parser.add_argument("--tasks", nargs="+", default=None, metavar="TASK",
                        help="replay on these training laws only (a job's own, e.g. quick's 8: every replay then "
                             "holds the job's tasks and varies the study's draws and the pair order); whether an arm "
                             "is better is still judged over every complete pair of the matrix")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a preset key to replay with another value (dotted, as optimize.KEY=VALUE on the command "
                             "line; repeatable), e.g. --set stage2.race_pairs=12 --set tasks.n_train=8")
    parser.add_argument("--space", action="store_true",
                        help="replay stage 2 over the 16 combinations of the SR choices (a matrix made with "
                             "outcome_matrix.py --space), suggested as the stage suggests them")
    parser.add_argument("--screening", default="",
                        help="stage 2's screening variants to replay beside the preset, as PAIRSxTOP items "
                             "(e.g. 4x1,6x1,4x2): screening pairs and trials raced (each at alpha / TOP, as the stage races)")
    args = parser.parse_args(argv)
    started = time.time()
    matrix = OutcomeMatrix.load(args.matrix)
    settings = load_preset(args.preset, args.set)
    metric, rule = settings.metric, settings.accept
    table = matrix.table(metric)
    arms = [a for a in matrix.arms]
    seeds, complete = args.seeds or matrix.seeds, set(matrix.complete_pairs())
    # a matrix still being built replays on the tasks every arm has finished at every seed
    tasks = [t for t in matrix.tasks if all((t, s) in complete for s in seeds)]
    pairs = [(t, s) for t in tasks for s in seeds]
    truth_pairs = pairs  # the pairs that say which arms are better
    if args.tasks:
        lacking = [t for t in args.tasks if t not in tasks]
        if lacking:
            raise SystemExit(f"--tasks: {', '.join(lacking)} not complete at seeds {seeds} in {args.matrix}")
        truth_pairs = sorted(complete)
        tasks, pairs = list(args.tasks), [(t, s) for t in args.tasks for s in seeds]
    full = table
    replayed = set(pairs)  # a seed not replayed stays out of every world, reseeded or not
    table = {arm: {p: v for p, v in values.items() if p in replayed} for arm, values in table.items()}
    lines = [f"Outcome matrix: {args.matrix} ({matrix.header.get('command', '')}, {matrix.header.get('created', '')}): "
             f"{len(arms)} arms x {len(tasks)} training tasks x {len(seeds)} seeds = {len(pairs)} complete pairs at "
             f"{matrix.header.get('sr_seconds_per_run', '?')} s per SR run; score {metric} "
             f"(tie margin {rule.margin:g}); preset {args.preset}"
             + (f" with {', '.join(args.set)}" if args.set else "") + "." + guard_note(matrix)
             + (f" Replayed on the named tasks only ({', '.join(tasks)}); which arms are better is judged over all "
                f"{len(truth_pairs)} complete pairs of the matrix." if args.tasks else ""), ""]

    # 1. the matrix
    lines += ["### The arms over every pair", "",
              f"| arm | mean {metric} | acc_0.01 ID / OOD (95 %) | every point ID / OOD | against {START}: W / T / L "
              "| mean / median difference | sign-test p |", "|---|---|---|---|---|---|---|"]
    better: set[str] = set()
    for arm in arms:
        record = PairedRecord(tuple(full[arm][p] - full[START][p] for p in truth_pairs), rule.margin)
        accs = {(split, k): mean(float(matrix.outcomes[(arm, t, s)].metrics.get(split, {}).get(k) or 0.0)
                                 for t, s in truth_pairs)
                for split in ("test_id", "test_ood") for k in ("acc_0.01", "acc_all_0.01")}
        p = sign_p(record)
        if arm != START and record.wins > record.losses and p <= 0.05:
            better.add(arm)
        lines.append(f"| {arm} | {mean(full[arm][q] for q in truth_pairs):.2f} | {accs[('test_id', 'acc_0.01')]:.3f} / "
                     f"{accs[('test_ood', 'acc_0.01')]:.3f} | {accs[('test_id', 'acc_all_0.01')]:.3f} / "
                     f"{accs[('test_ood', 'acc_all_0.01')]:.3f} | "
                     + ("–" if arm == START else f"{record.wins} / {record.ties} / {record.losses}") + " | "
                     + ("–" if arm == START else f"{record.mean_diff:+.2f} / {median(record.diffs):+.2f}") + " | "
                     + ("–" if arm == START else f"{p:.3g}") + " |")
    lines += ["", f"Better than {START} over the whole matrix (more wins than losses, one-sided sign test p <= 0.05, "
              "the statistic every race reads; a mean of -log10 NMSE is swayed by a single exact fit, clipped at 16): "
              f"{', '.join(sorted(better)) or 'none'}.", ""]

    # 2. two-arm decisions
    s = settings
    n_train = s.tasks.n_train
    s2_rule = rule.model_copy(update={"alpha": rule.alpha / max(s.stage2.confirm_top, 1)})
    # title: (before, after, tasks the race draws its pairs from)
    protocols = {
        "stage 1 (a rewrite against the kept text)": (
            PairedProtocol(BEFORE_RULE, 4), RaceProtocol(rule, s.stage1.race_pairs, s.race_batch), n_train),
        "stage 2's race (its best trial against the start)": (
            PairedProtocol(BEFORE_RULE, 4, 2), RaceProtocol(s2_rule, s.stage2.race_pairs, s.race_batch), n_train),
        "stage 3 (a child against its parent)": (
            PairedProtocol(BEFORE_RULE, 4), RaceProtocol(rule, s.stage3.race_pairs, s.race_batch), s.stage3.holdout),
        "the gate (the trained harness against the default)": (
            PairedProtocol(BEFORE_RULE, 4), RaceProtocol(rule, s.freeze.race_pairs, s.race_batch),
            max(s.tasks.n_validation, 1)),
    }
    nulls = {f"{arm} again (another seed)": arm for arm in (START, "all_four") if arm in arms and len(seeds) > 1}

    def null_world(t: dict, rng: random.Random) -> dict:  # the seeds relabelled per task, then each null arm added
        t = reseeded(t, rng)
        for name, arm in nulls.items():
            t = with_other_seed(t, arm, name)
        return t

    challengers = [a for a in arms if a != START] + list(nulls)
    for title, (before, after, n_after) in protocols.items():
        n_before = BEFORE_TASKS
        lines += [f"### Two-arm decision: {title}", "",
                  f"Before: the paired rule on 4 tasks x {before.n_seeds} seed(s). After: a race of at most "
                  f"{after.max_pairs} pairs ({after.rule.describe()}) on {n_after} tasks x {s.race_seeds} seeds. "
                  f"P(accept) over {args.replays} "
                  "replays, 95 % interval, and mean solver executions.", "",
                  "| challenger (incumbent: " + START + ") | over the matrix: W / T / L | before: P(accept) | executions | "
                  "after: P(accept) | executions |", "|---|---|---|---|---|---|"]
        for arm in challengers:
            incumbent = nulls.get(arm, START)
            if arm in nulls:
                truth = "none (the same harness)"
            else:
                record = PairedRecord(tuple(full[arm][q] - full[START][q] for q in truth_pairs), rule.margin)
                truth = f"{record.wins} / {record.ties} / {record.losses}" + (" (better)" if arm in better else "")
            b = two_arm_rate(table, before, arm, incumbent, tasks, seeds, n_before, args.replays, args.seed,
                             world_table=null_world)
            a = two_arm_rate(table, after, arm, incumbent, tasks, seeds, min(n_after, len(tasks)), args.replays,
                             args.seed, world_table=null_world)
            lines.append(f"| {arm} | {truth} | {fmt(b)} | {b.mean_executions:.1f} | {fmt(a)} | "
                         f"{a.mean_executions:.1f} |")
        lines.append("")

    # 3. stage 2
    before2 = Stage2Protocol(n_trials=10, n_startup=5, screen_tasks=4, confirm_top=2, confirm_tasks=4,
                             confirm_seeds=2, paired=BEFORE_RULE)
    space = s.stage2.bounds if args.space else None
    s2_arms = arms
    if space is not None:  # the stage's own space: the 16 combinations of the SR choices, nothing else
        s2_arms = sorted(space_arms())
        missing = [a for a in s2_arms if a not in table]
        if missing:
            raise SystemExit(f"--space: the matrix lacks {', '.join(missing)} (make it with outcome_matrix.py --space)")
        table = {a: table[a] for a in s2_arms}
    after2 = Stage2Protocol(n_trials=s.stage2.n_trials, n_startup=s.stage2.n_startup_trials,
                            screen_tasks=s.stage2.minibatch or 4, confirm_top=s.stage2.confirm_top, race=rule,
                            max_pairs=s.stage2.race_pairs, batch=s.race_batch, screen_batch=s.race_batch, space=space)
    def on_a_null(protocol):  # each replay in its own null world: the outcomes permuted among the arms per pair
        return lambda t, start, arms, world, seed, **kw: protocol(permuted(t, random.Random(seed)), start, arms,
                                                                  world, seed=seed, **kw)

    lines += ["### Stage 2 from the initial harness over the matrix's arms", "",
              f"Before: {before2.n_trials} TPE trials on 4 tasks x 1 seed, the best two confirmed on 4 other tasks x "
              f"2 seeds by the paired rule ({BEFORE_TASKS} training tasks). After: {after2.n_trials} trials screened "
              f"on {after2.screen_tasks} pairs, the best {after2.confirm_top} raced on at most {after2.max_pairs} "
              f"pairs each ({n_train} training tasks x {s.race_seeds} seeds). SMAC3: its algorithm configuration "
              "facade on the same arms and pairs, with the executions the racing stage spent. 'Finds the gain': "
              "ends at an arm better than the initial harness over the whole matrix; 'false accept': ends at another "
              "arm that is not.", "",
              "| protocol | world | finds the gain | false accept | mean executions | replays |",
              "|---|---|---|---|---|---|"]
    runs = []
    for world_name, null, world_better in (("the matrix", False, better), ("null (arms permuted)", True, set())):
        wrap = on_a_null if null else (lambda protocol: protocol)
        b = stage2_rates(table, START, s2_arms, tasks, seeds, BEFORE_TASKS, wrap(stage2_paired), args.stage2_replays,
                         world_better, args.seed, p=before2)
        a = stage2_rates(table, START, s2_arms, tasks, seeds, n_train, wrap(stage2_race), args.stage2_replays,
                         world_better, args.seed, p=after2)
        runs.append((world_name, "before (paired rule)", b))
        runs.append((world_name, "after (racing)", a))
        if args.smac_replays:
            try:
                budget = max(1, round(a.found.mean_executions))
                m = stage2_rates(table, START, s2_arms, tasks, seeds, n_train, wrap(stage2_smac), args.smac_replays,
                                 world_better, args.seed, budget=budget)
                runs.append((world_name, f"SMAC3 ({budget} executions)", m))
            except ImportError as exc:
                lines.append(f"(SMAC3 not run: {exc}; pip install smac)")
    for variant in filter(None, args.screening.split(",")):
        screen, top = (int(x) for x in variant.split("x"))
        v = Stage2Protocol(n_trials=after2.n_trials, n_startup=after2.n_startup, screen_tasks=screen, confirm_top=top,
                           race=rule, max_pairs=after2.max_pairs, batch=after2.batch, screen_batch=after2.screen_batch,
                           space=space)
        for world_name, null, world_better in (("the matrix", False, better), ("null (arms permuted)", True, set())):
            wrap = on_a_null if null else (lambda protocol: protocol)
            r = stage2_rates(table, START, s2_arms, tasks, seeds, n_train, wrap(stage2_race), args.stage2_replays,
                             world_better, args.seed, p=v)
            runs.append((world_name, f"racing, screened on {screen} pairs, the best {top} raced", r))
    for world_name, name, r in runs:
        lines.append(f"| {name} | {world_name} | {fmt(r.found) if world_name == 'the matrix' else '–'} | "
                     f"{fmt(r.wrong)} | {r.found.mean_executions:.1f} | {r.found.replays} |")
    lines += ["", "Where each ended (the matrix): " + "; ".join(
        f"{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(r.ends.items(), key=lambda kv: -kv[1]))
        for world_name, name, r in runs if world_name == "the matrix"), "",
              f"({time.time() - started:.0f} s)"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
