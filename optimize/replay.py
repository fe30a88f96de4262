"""Replays of the optimizer's decisions on recorded outcomes: how often a protocol accepts a gain that is there
(power), accepts one that is not (false accepts), and how many solver executions it spends.

A replay draws a world from an :class:`~optimize.matrix.OutcomeMatrix` - a seeded sample of its training tasks, its
engine seeds, a seeded order of their pairs - and runs a protocol in it with scores read from the matrix instead of
solves (:class:`MatrixScorer`; an (arm, pair) is paid once, as the evaluator's cache pays it). The protocols:

* two-arm decisions (a stage-1 rewrite against the kept text, a stage-3 child against its parent, the gate): the
  paired rule on a fixed minibatch (``paired``, before) or a race (``race``, the stages now);
* stage 2 as a whole: an Optuna TPE search over the matrix's arms from a start, then confirmation, the earlier
  one (:func:`stage2_paired`: minibatch means, the best two confirmed on fixed pairs by the paired rule) and the racing
  one the stage runs (:func:`stage2_race`: screening with drops, the best raced on the rest at alpha / k), with the
  same functions the stage calls (``optimize.screening.screen_trial``, ``confirm_by_race``);
* SMAC3's ``AlgorithmConfigurationFacade`` on the same arms, pairs and budget (:func:`stage2_smac`, optional extra).

Nulls: a two-arm null races an arm against itself on another engine seed of the same task (the same harness run
again: real noise, no difference), the seeds relabelled at random per task in every world (:func:`reseeded`); the
stage-2 null permutes the arms' outcomes within every pair, so every arm is as good as every other.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Callable, Mapping, Sequence

import optuna

from optimize.matrix import CHOICES, choice_arm
from optimize.paired import PairedRecord, PairedRule
from optimize.race import RaceRule, StopRace, pair_key, race, race_schedule
from optimize.search_space import sr_settings_of, suggest_sr_channels
from optimize.settings import Bounds

Table = dict[str, dict[tuple[str, int], float]]  # arm -> (task, seed) -> score


class MatrixScorer:
    """Scores from a table as the stages' scorer would return them; ``paid`` holds every (arm, pair) read (the
    evaluator's cache pays each once); past ``budget`` executions it stops the race (``StopRace``)."""

    def __init__(self, table: Table, budget: int | None = None) -> None:
        self.table = table
        self.paid: set[tuple[str, tuple[str, int]]] = set()
        self.budget = budget

    def __call__(self, arms: Mapping[str, str], pairs: Sequence[Any]) -> dict[str, list[float]]:
        new = {(arm, pair_key(p)) for arm in arms.values() for p in pairs} - self.paid
        if self.budget is not None and len(self.paid) + len(new) > self.budget:
            raise StopRace(f"the stage's {self.budget} solver executions are spent")
        self.paid |= new
        return {label: [self.table[arm][pair_key(p)] for p in pairs] for label, arm in arms.items()}

    @property
    def executions(self) -> int:
        return len(self.paid)


def sign_p(record: PairedRecord) -> float:
    """One-sided sign test of the wins among the non-tied pairs."""
    from math import comb

    n = record.wins + record.losses
    return sum(comb(n, k) for k in range(record.wins, n + 1)) / 2**n if n else 1.0


def better_arms(table: Table, pairs: Sequence[tuple[str, int]], start: str, margin: float) -> set[str]:
    """The arms better than ``start`` over ``pairs`` (more wins than losses, one-sided sign test p <= 0.05): what a
    replay's "finds the gain" means."""
    out = set()
    for arm in table:
        record = PairedRecord(tuple(table[arm][p] - table[start][p] for p in pairs), margin)
        if arm != start and record.wins > record.losses and sign_p(record) <= 0.05:
            out.add(arm)
    return out


def with_other_seed(table: Table, arm: str, name: str) -> Table:
    """``table`` plus arm ``name``: ``arm``'s outcome of the same task at the other engine seed (the same harness
    run again). Needs two seeds per task."""
    seeds = sorted({s for _, s in table[arm]})
    if len(seeds) < 2:
        raise ValueError("a seed null needs at least two engine seeds per task in the matrix")
    other = {s: seeds[(i + 1) % len(seeds)] for i, s in enumerate(seeds)}
    return {**table, name: {(t, s): table[arm][(t, other[s])] for t, s in table[arm]}}


def reseeded(table: Table, rng: random.Random) -> Table:
    """Every task's engine seeds relabelled at random, for every arm alike: a seed null that does not inherit one
    seed's luck (the matrix's seeds were run at different hours, on a machine loaded differently)."""
    tasks = sorted({t for arm in table.values() for t, _ in arm})
    seeds = sorted({s for arm in table.values() for _, s in arm})
    relabel = {t: dict(zip(seeds, rng.sample(seeds, len(seeds)))) for t in tasks}
    return {arm: {(t, relabel[t][s]): v for (t, s), v in values.items()} for arm, values in table.items()}


def permuted(table: Table, rng: random.Random) -> Table:
    """Every pair's outcomes shuffled among the arms: a world where every arm is as good as every other."""
    arms = sorted(table)
    out: Table = {a: {} for a in arms}
    for pair in table[arms[0]]:
        values = [table[a][pair] for a in arms]
        rng.shuffle(values)
        for a, v in zip(arms, values):
            out[a][pair] = v
    return out


@dataclass
class World:
    """One replay's draw: its tasks (a sample of the matrix's), seeds and the seed of its orders."""

    tasks: list[str]
    seeds: list[int]
    order_seed: int

    def schedule(self, *, exclude: Sequence[tuple[str, int]] = (), last: Sequence[str] = ()) -> list[tuple[str, int]]:
        return race_schedule(self.tasks, self.seeds, self.order_seed, exclude=exclude, last=last)

    def minibatch(self, n: int, seed_index: int = 0) -> list[tuple[str, int]]:
        """The first ``n`` tasks of the world's order at one seed (a stage's fixed minibatch)."""
        order = list(self.tasks)
        random.Random(self.order_seed).shuffle(order)
        return [(t, self.seeds[seed_index]) for t in order[:n]]


def draw_world(matrix_tasks: Sequence[str], seeds: Sequence[int], n_tasks: int, rng: random.Random) -> World:
    return World(tasks=rng.sample(list(matrix_tasks), min(n_tasks, len(matrix_tasks))), seeds=list(seeds),
                 order_seed=rng.randrange(2**31))


# -- two-arm decisions --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedProtocol:
    """The earlier acceptance: the paired rule on ``n_tasks`` tasks x ``n_seeds`` seeds, all run."""

    rule: PairedRule
    n_tasks: int
    n_seeds: int = 1

    def decide(self, scorer: MatrixScorer, challenger: str, incumbent: str, world: World) -> bool:
        tasks = {t for t, _ in world.minibatch(self.n_tasks)}
        pairs = [(t, s) for t, s in world.schedule() if t in tasks and s in world.seeds[: self.n_seeds]]
        scores = scorer({"c": challenger, "i": incumbent}, pairs)
        diffs = tuple(a - b for a, b in zip(scores["c"], scores["i"]))
        return self.rule.accepts(PairedRecord(diffs, self.rule.margin))


@dataclass(frozen=True)
class RaceProtocol:
    """A race of at most ``max_pairs`` pairs in steps of ``batch`` (the stages' acceptance now)."""

    rule: RaceRule
    max_pairs: int
    batch: int = 2

    def decide(self, scorer: MatrixScorer, challenger: str, incumbent: str, world: World) -> bool:
        return race(challenger, incumbent, world.schedule(), self.rule, scorer, max_pairs=self.max_pairs,
                    batch=self.batch).accepted


@dataclass
class Rate:
    """How often a protocol accepted, over how many replays, and the executions it spent on average."""

    accepted: int = 0
    replays: int = 0
    executions: list[int] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.accepted / self.replays if self.replays else 0.0

    @property
    def mean_executions(self) -> float:
        return mean(self.executions) if self.executions else 0.0

    def interval(self) -> tuple[float, float]:
        """A 95 % Wilson interval of the rate."""
        from math import sqrt

        n, p, z = self.replays, self.rate, 1.96
        if not n:
            return (0.0, 1.0)
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))


def two_arm_rate(table: Table, protocol: Any, challenger: str, incumbent: str, matrix_tasks: Sequence[str],
                 seeds: Sequence[int], n_tasks: int, replays: int, seed: int = 0,
                 world_table: Callable[[Table, random.Random], Table] | None = None) -> Rate:
    """P(``protocol`` accepts ``challenger`` over ``incumbent``) over ``replays`` worlds of ``n_tasks`` tasks
    (``world_table``: each world's own version of the table, e.g. a null drawn afresh)."""
    rng = random.Random(seed)
    out = Rate()
    for _ in range(replays):
        world = draw_world(matrix_tasks, seeds, n_tasks, rng)
        scorer = MatrixScorer(world_table(table, rng) if world_table else table)
        out.accepted += bool(protocol.decide(scorer, challenger, incumbent, world))
        out.replays += 1
        out.executions.append(scorer.executions)
    return out


# -- stage 2 ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage2Protocol:
    """Stage 2's shape: ``n_trials`` TPE trials (``n_startup`` random first) screened on ``screen_tasks`` tasks at
    the first seed, then the best ``confirm_top`` confirmed (paired: on ``confirm_tasks`` other tasks x
    ``confirm_seeds`` seeds by ``paired``; race: raced on the rest of the pairs by ``race``, at alpha / k)."""

    n_trials: int = 10
    n_startup: int = 5
    screen_tasks: int = 4
    confirm_top: int = 2
    confirm_tasks: int = 4
    confirm_seeds: int = 2
    paired: PairedRule | None = None
    race: RaceRule | None = None
    max_pairs: int = 24
    batch: int = 2
    screen_batch: int = 2
    budget: int | None = None
    space: Bounds | None = None  # set: the arms are the SR choices' combinations, suggested within these bounds


def suggest_arm(trial: optuna.Trial, arms: Sequence[str], space: Bounds | None) -> str:
    """One trial's arm: a categorical over the arms, or (``space``: the stage's bounds) the SR choices suggested by
    the stage's own :func:`~optimize.search_space.suggest_sr_channels` (univariate TPE over four switches, not over
    16 names) and read back as the matrix arm that switches them on."""
    if space is None:
        return trial.suggest_categorical("arm", list(arms))
    chosen = sr_settings_of(suggest_sr_channels(trial, space))
    return choice_arm(name for name, fields in CHOICES if all(chosen.get(k) == v for k, v in fields.items()))


def _study(seed: int, n_startup: int) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(direction="maximize",
                               sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup))


def stage2_paired(table: Table, start: str, arms: Sequence[str], world: World, p: Stage2Protocol, seed: int
                  ) -> tuple[str, int]:
    """Stage 2 before racing: (the arm it ends with, executions)."""
    scorer = MatrixScorer(table, p.budget)
    batch = world.minibatch(p.screen_tasks)
    study = _study(seed, p.n_startup)
    means: dict[str, float] = {}
    for _ in range(p.n_trials):
        trial = study.ask()
        arm = suggest_arm(trial, arms, p.space)
        try:
            value = mean(scorer({"a": arm}, batch)["a"])
        except StopRace:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            break
        means.setdefault(arm, value)
        study.tell(trial, value)
    ranked = [a for a in sorted(means, key=lambda a: -means[a]) if a != start][: p.confirm_top]
    screen_tasks = {t for t, _ in batch}
    others = [t for t in world.tasks if t not in screen_tasks][: p.confirm_tasks]
    pairs = [(t, s) for s in world.seeds[: p.confirm_seeds] for t in others]
    rule = p.paired or PairedRule()
    for arm in ranked:
        try:
            scores = scorer({"c": arm, "i": start}, pairs)
        except StopRace:
            break
        if rule.accepts(PairedRecord(tuple(a - b for a, b in zip(scores["c"], scores["i"])), rule.margin)):
            return arm, scorer.executions
    return start, scorer.executions


def stage2_race(table: Table, start: str, arms: Sequence[str], world: World, p: Stage2Protocol, seed: int
                ) -> tuple[str, int]:
    """The racing stage 2 (after), through the stage's own screening and confirmation functions."""
    from optimize.screening import confirm_by_race, eligible, screen_trial, screening_gain, uninformative_tasks

    rule = p.race or RaceRule()
    scorer = MatrixScorer(table, p.budget)
    screen_pairs = world.minibatch(p.screen_tasks)
    study = _study(seed, p.n_startup)
    screened: list[dict[str, Any]] = []
    for _ in range(p.n_trials):
        trial = study.ask()
        arm = suggest_arm(trial, arms, p.space)
        result = screen_trial(arm, start, screen_pairs, rule, scorer, batch=p.screen_batch)
        if result is None:  # the budget is spent
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            break
        screened.append({"key": arm, "candidate": arm, "gain": screening_gain(result),
                         "dropped": result.verdict == "behind", "pairs": result.pairs, "calls": 0.0,
                         "diffs": list(result.record.diffs), "number": trial.number})
        study.tell(trial, screening_gain(result))
    retired = uninformative_tasks(screened, rule.margin)
    schedule = world.schedule(exclude=screen_pairs, last=retired)
    candidates = eligible(screened, start, p.confirm_top)
    chosen, _ = confirm_by_race(candidates, start, schedule, rule, scorer, max_pairs=p.max_pairs, batch=p.batch)
    return (chosen if chosen is not None else start), scorer.executions


def stage2_smac(table: Table, start: str, arms: Sequence[str], world: World, budget: int, seed: int
                ) -> tuple[str, int]:
    """SMAC3's algorithm configuration on the same arms and pairs: its incumbent after ``budget`` executions."""
    from ConfigSpace import Categorical, ConfigurationSpace
    from smac import AlgorithmConfigurationFacade, Scenario
    from smac.main.exceptions import ConfigurationSpaceExhaustedException

    pairs = world.schedule()
    names = [f"{t}|{s}" for t, s in pairs]
    space = ConfigurationSpace(seed=seed)
    space.add(Categorical("arm", list(arms), default=start))
    paid: set[tuple[str, str]] = set()

    def target(config: Any, instance: str, seed: int = 0) -> float:
        task, s = instance.rsplit("|", 1)
        paid.add((config["arm"], instance))
        return -table[config["arm"]][(task, int(s))]  # SMAC minimises

    scenario = Scenario(space, deterministic=True, n_trials=budget, instances=names,
                        instance_features={n: [float(i)] for i, n in enumerate(names)}, seed=seed,
                        output_directory=_smac_folder(seed))
    smac = AlgorithmConfigurationFacade(scenario, target, overwrite=True, logging_level=40)
    try:
        smac.optimize()
    except ConfigurationSpaceExhaustedException:  # a small space: every arm proposed, nothing left to ask
        pass
    incumbent = smac.intensifier.get_incumbent()
    return (str(incumbent["arm"]) if incumbent is not None else start), len(paid)


def _smac_folder(seed: int) -> Any:
    import tempfile
    from pathlib import Path

    return Path(tempfile.gettempdir()) / f"harness-sr-smac-replay-{seed}"


@dataclass
class Stage2Rates:
    """Where a stage-2 protocol ended over its replays: in ``better`` (found the gain), at another arm than the start
    (a false accept), or at the start; with the executions each replay spent."""

    found: Rate = field(default_factory=Rate)
    wrong: Rate = field(default_factory=Rate)
    ends: dict[str, int] = field(default_factory=dict)


def stage2_rates(table: Table, start: str, arms: Sequence[str], matrix_tasks: Sequence[str], seeds: Sequence[int],
                 n_tasks: int, protocol: Callable[..., tuple[str, int]], replays: int, better: set[str],
                 seed: int = 0, **kwargs: Any) -> Stage2Rates:
    """Run ``protocol`` (:func:`stage2_paired`, :func:`stage2_race`, :func:`stage2_smac`) in ``replays`` worlds."""
    rng = random.Random(seed)
    out = Stage2Rates()
    for i in range(replays):
        world = draw_world(matrix_tasks, seeds, n_tasks, rng)
        arm, executions = protocol(table, start, arms, world, seed=seed * 100_003 + i, **kwargs)
        out.ends[arm] = out.ends.get(arm, 0) + 1
        for rate, hit in ((out.found, arm in better), (out.wrong, arm != start and arm not in better)):
            rate.accepted += hit
            rate.replays += 1
            rate.executions.append(executions)
    return out
