"""An outcome matrix: the recorded outcomes of harness variants on the same (task, seed) pairs, to replay the
optimizer's decisions on instead of rerunning the solver for every protocol (as configurators are measured on
surrogate and tabular benchmarks, AClib's).

The arms span what the stages choose between (:func:`matrix_arms`): HarnessSR's initial harness, each hand-made SR
choice of the shipped default added alone (the unguided run, the term combination, the ``pow`` operator set, the
sparse regression), all four, the shipped default with its own prompts, and a deliberately worse variant (a tiny
engine population). ``scripts/outcome_matrix.py`` runs them with the optimizer's own evaluator on ``lsr_like``
*training* laws at the training seconds and writes the file this module reads: a JSON-lines file whose first line
is a header (the command, date, machine, conditions) and every other line one (arm, task, seed) outcome with its
per-split metrics, the best few equations of its pool and its costs.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any, Iterable

from harness.core.jsonio import write_text_atomic
from optimize.records import split_score
from workflows.harness import INITIAL_SR_CHOICES, Harness, initial_harness, shipped_harness
from workflows.params import SRSettings

# The metrics a row keeps per test split (what the stages and the report read).
ROW_METRICS = ("nmse", "acc_0.01", "acc_all_0.01", "acc_0.001", "frac_within_0.01")
SPLITS = ("test_id", "test_ood")


# The shipped default's hand-made SR choices (workflows.harness.INITIAL_SR_CHOICES switched to the engine's own
# defaults), each as (arm-name part, the SRSettings it sets), in the order names join them; stage 2 of ``quick`` and
# ``small`` searches exactly these four switches over the initial harness.
_PART = {"unguided_run": "unguided", "combine_terms": "combine", "operators": "pow", "sparse_regression": "sparse"}
CHOICES: tuple[tuple[str, dict[str, Any]], ...] = tuple(
    (_PART[key], {key: list(value) if isinstance(value, (list, tuple)) else value})
    for key, value in ((k, getattr(SRSettings(), k)) for k in INITIAL_SR_CHOICES))
SINGLE_NAMES = {"": "initial", "unguided+combine+pow+sparse": "all_four"}  # the original arms' names


def choice_arm(on: Iterable[str]) -> str:
    """The matrix arm of the initial harness with the named choices switched on (``"unguided+combine"``; none is
    ``initial``, all four ``all_four``), whatever order they are given in."""
    wanted = set(on)
    unknown = wanted - {name for name, _ in CHOICES}
    if unknown:
        raise ValueError(f"not a hand-made SR choice: {sorted(unknown)}")
    key = "+".join(name for name, _ in CHOICES if name in wanted)
    return SINGLE_NAMES.get(key, key)


def space_arms(llm: Any = None) -> dict[str, Harness]:
    """Every one of the 16 combinations of the four hand-made SR choices over the initial harness (stage 2's space
    at ``quick``: the search's trials are these harnesses, so a replay over them is the stage itself)."""
    init = initial_harness(llm=llm)
    arms: dict[str, Harness] = {}
    for mask in range(2 ** len(CHOICES)):
        on = [CHOICES[i] for i in range(len(CHOICES)) if mask >> i & 1]
        settings = {k: v for _, fields in on for k, v in fields.items()}
        arms[choice_arm(name for name, _ in on)] = init.with_sr_settings(**settings) if settings else init
    return arms


def matrix_arms(llm: Any = None, space: bool = False) -> dict[str, Harness]:
    """The variants, by name. All but ``shipped`` have the initial (generic) prompts and workflow; ``space`` adds
    the other 10 combinations of the four SR choices (:func:`space_arms`)."""
    choices = space_arms(llm)
    arms = {name: choices[name] for name in ("initial", "unguided", "combine", "pow", "sparse", "all_four")}
    arms["shipped"] = shipped_harness(llm=llm)
    arms["tiny_population"] = choices["initial"].with_sr_settings(population_size=20)
    if space:
        arms.update({name: spec for name, spec in choices.items() if name not in arms})
    return arms


@dataclass
class Outcome:
    """One (arm, task, seed): per-split metrics of the selected equation, the pool's best few, costs."""

    arm: str
    task: str
    seed: int
    domain: str = ""
    metrics: dict[str, dict[str, float | None]] = field(default_factory=dict)
    equation: str | None = None
    top: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0
    solver_runs: int = 0
    seconds: float = 0.0
    status: str = "ok"
    guard_hits: int | None = None  # steps that seconds stopped (optimize.records.guard_hits); None: not recorded

    def value(self, metric: str) -> float:
        """``metric`` (a row metric or ``log_nmse``) as the stages score it: the mean over the ID and OOD splits
        (``optimize.records.split_score``, the evaluator's own scoring)."""
        return split_score(self.metrics, "+".join(SPLITS), metric)[0]


class OutcomeMatrix:
    """Outcomes indexed by (arm, task, seed), with the header that says how they were made."""

    def __init__(self, outcomes: Iterable[Outcome], header: dict[str, Any] | None = None) -> None:
        self.header = dict(header or {})
        self.outcomes: dict[tuple[str, str, int], Outcome] = {(o.arm, o.task, o.seed): o for o in outcomes}

    @property
    def arms(self) -> list[str]:
        return sorted({a for a, _, _ in self.outcomes})

    @property
    def tasks(self) -> list[str]:
        return sorted({t for _, t, _ in self.outcomes})

    @property
    def seeds(self) -> list[int]:
        return sorted({s for _, _, s in self.outcomes})

    def complete_pairs(self, arms: Iterable[str] | None = None) -> list[tuple[str, int]]:
        """The (task, seed) pairs every arm (of ``arms``) has an outcome on."""
        names = list(arms or self.arms)
        return [(t, s) for t in self.tasks for s in self.seeds
                if all((a, t, s) in self.outcomes for a in names)]

    def value(self, arm: str, task: str, seed: int, metric: str) -> float:
        return self.outcomes[(arm, task, seed)].value(metric)

    def table(self, metric: str) -> dict[str, dict[tuple[str, int], float]]:
        """arm -> (task, seed) -> value, on the complete pairs."""
        pairs = self.complete_pairs()
        return {a: {p: self.value(a, p[0], p[1], metric) for p in pairs} for a in self.arms}

    def arm_means(self, metric: str) -> dict[str, float]:
        return {a: mean(v.values()) for a, v in self.table(metric).items() if v}

    # -- file ----------------------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        lines = [json.dumps({"header": self.header}, sort_keys=True)]
        for key in sorted(self.outcomes):
            lines.append(json.dumps(asdict(self.outcomes[key]), sort_keys=True, default=_plain))
        write_text_atomic(Path(path), "\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "OutcomeMatrix":
        header: dict[str, Any] = {}
        outcomes = []
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            data = json.loads(line)
            if "header" in data:
                header = data["header"]
            else:
                outcomes.append(Outcome(**data))
        return cls(outcomes, header)


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else str(value)


def outcome_of(arm: str, record: Any, domain: str = "") -> Outcome:
    """A matrix row from an optimizer ``EvalRecord`` (non-finite values stored as null)."""
    metrics = {s: {k: (float(v) if v is not None and math.isfinite(float(v)) else None)
                   for k, v in record.metrics.get(s, {}).items() if k in ROW_METRICS}
               for s in SPLITS if s in record.metrics}
    top = [{k: c.get(k) for k in ("equation", "source", "valid_nmse")} for c in (record.top or [])[:3]]
    return Outcome(arm=arm, task=record.task, seed=int(record.seed), domain=domain, metrics=metrics,
                   equation=record.equation, top=top, llm_calls=int(record.llm_calls),
                   solver_runs=int(record.solver_runs), seconds=round(float(record.seconds), 2), status=record.status,
                   guard_hits=int(record.guard_hits or 0))
