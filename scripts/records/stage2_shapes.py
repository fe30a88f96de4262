"""Stage 2's shape swept on a recorded outcome matrix, and how well any screening could rank the better arms first.

    python scripts/records/stage2_shapes.py [--matrix docs/data/outcome_matrix.jsonl] [--preset small]
        [--replays 300 (0: the ceiling only)] [--trials 6 8 10] [--screen 4 6 8] [--top 1 2 3] [--race 16 24]

1. Every shape (TPE trials, screening pairs, trials raced at alpha / top, race pairs) replayed as the stage runs
   (``optimize.replay.stage2_race``) over the preset's tasks x seeds drawn from the matrix: how often stage 2 ends at
   an arm better than the start over the whole matrix (finds), at another arm (false), at another arm on a null
   matrix (each pair's outcomes permuted among the arms), and the executions spent; the preset's own shape first.
2. The screening ceiling: every challenger screened on m random pairs of a world (no sampler, no drops), how often
   the one with the best clipped gain (``optimize.screening.screening_gain``'s clip) is a better arm. A stage that
   must race what it ranks first cannot find the gain more often than this times its race's power.

Issue 64 asked whether ``small``'s stage 2 can find the gain 0.8 of the time for no more executions than today
(docs/optimizer.md, "Can small's stage 2 reach 0.8?").
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from statistics import mean

from optimize.matrix import OutcomeMatrix
from optimize.replay import Stage2Protocol, better_arms, permuted, stage2_race, stage2_rates
from optimize.screening import GAIN_CLIP
from optimize.settings import load_preset

START = "initial"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", default="docs/data/outcome_matrix.jsonl")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--replays", type=int, default=300)
    parser.add_argument("--trials", type=int, nargs="+", default=[6, 8, 10])
    parser.add_argument("--screen", type=int, nargs="+", default=[4, 6, 8])
    parser.add_argument("--top", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--race", type=int, nargs="+", default=[16, 24])
    parser.add_argument("--ceiling", type=int, nargs="+", default=[4, 6, 8, 12, 16, 24, 32])
    args = parser.parse_args(argv)
    matrix, settings = OutcomeMatrix.load(args.matrix), load_preset(args.preset, [])
    rule, seeds, n_train = settings.accept, matrix.seeds, settings.tasks.n_train
    complete = set(matrix.complete_pairs())
    tasks = [t for t in matrix.tasks if all((t, s) in complete for s in seeds)]
    pairs = [(t, s) for t in tasks for s in seeds]
    table = {a: {p: v for p, v in values.items() if p in set(pairs)} for a, values in matrix.table(settings.metric).items()}
    better = better_arms(table, pairs, START, rule.margin)
    arms = list(table)
    print(f"{args.matrix}: {len(arms)} arms x {len(tasks)} tasks x {len(seeds)} seeds; preset {args.preset} "
          f"({n_train} tasks x {len(seeds)} seeds a world); better than {START}: {', '.join(sorted(better))}\n")

    def on_a_null(protocol):
        return lambda t, start, arms, world, seed, **kw: protocol(permuted(t, random.Random(seed)), start, arms,
                                                                  world, seed=seed, **kw)

    s2 = settings.stage2
    shapes = [(s2.n_trials, s2.minibatch or 4, s2.confirm_top, s2.race_pairs)]
    shapes += [(n, m, k, r) for n in args.trials for m in args.screen for k in args.top for r in args.race
               if (n, m, k, r) != shapes[0]]
    print(f"| trials | screening pairs | raced | race pairs | finds | false | null | executions |  ({args.replays} "
          "replays each; the first row is the preset)\n|---|---|---|---|---|---|---|---|")
    for n, m, k, r in shapes if args.replays else []:  # --replays 0: the ceiling only
        p = Stage2Protocol(n_trials=n, n_startup=min(s2.n_startup_trials, n), screen_tasks=m, confirm_top=k,
                           race=rule, max_pairs=r, batch=settings.race_batch, screen_batch=settings.race_batch)
        found = stage2_rates(table, START, arms, tasks, seeds, n_train, stage2_race, args.replays, better, 0, p=p)
        null = stage2_rates(table, START, arms, tasks, seeds, n_train, on_a_null(stage2_race), args.replays, set(),
                            0, p=p)
        print(f"| {n} | {m} | {k} | {r} | {found.found.rate:.3f} | {found.wrong.rate:.3f} | {null.wrong.rate:.3f} | "
              f"{found.found.mean_executions:.1f} |", flush=True)

    print("\nThe screening ceiling: every challenger screened on m random pairs of a world, the best clipped gain "
          "first\n\n| m | executions | the first is better |\n|---|---|---|")
    rng, challengers = random.Random(0), [a for a in arms if a != START]
    for m in args.ceiling:
        hits, draws = 0, 2000
        for _ in range(draws):
            world = rng.sample(tasks, min(n_train, len(tasks)))
            screened = rng.sample([(t, s) for t in world for s in seeds], min(m, len(world) * len(seeds)))
            gain = {a: mean(max(-GAIN_CLIP, min(GAIN_CLIP, table[a][q] - table[START][q])) for q in screened)
                    for a in challengers}
            hits += max(challengers, key=lambda a: (gain[a], rng.random())) in better
        print(f"| {m} | {m * (len(challengers) + 1)} | {hits / draws:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    started = time.time()
    code = main()
    print(f"\n({time.time() - started:.0f} s)")
    sys.exit(code)
