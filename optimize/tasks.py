"""Training, validation and held-out task sets from a benchmark config, and seeded minibatches of them.

The sets come from the benchmark's own splits where it has them (``lsr_synth_laws``: training, validation and
held-out laws), else from a second load of the suite with another seed / index range or disjoint seeded slices of
one suite; from its ``fallback`` when its files are not on this machine. Held-out tasks never enter the
optimization objective, validation tasks only the gate.
"""

from __future__ import annotations

import importlib
import logging
import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import benchmarks
from harness.core.task import TaskDataMissing

log = logging.getLogger(__name__)


@dataclass
class TaskSets:
    """``train``: what stages 1-3 score; ``validation``: tasks no stage scores (the benchmark's validation split,
    else other draws of the training distribution), for freeze's gate only; ``heldout``: the held-out laws, for
    the report only."""

    train: list[Any]
    heldout: list[Any]
    validation: list[Any] = field(default_factory=list)
    benchmark: str = ""
    note: str = ""  # e.g. the benchmark's data was missing and its fallback suite was used

    def names(self) -> dict[str, list[str]]:
        return {"train": [t.name for t in self.train], "validation": [t.name for t in self.validation],
                "heldout": [t.name for t in self.heldout]}

    def all(self) -> list[Any]:
        return [*self.train, *self.validation, *self.heldout]


def _load(suite: str, options: Mapping[str, Any]) -> list[Any]:
    """``benchmarks.load_suite(suite, **options)``; a ``"package.module:function"`` suite calls that generator."""
    opts = {k: v for k, v in dict(options or {}).items() if v is not None}
    if ":" in suite:
        module, _, name = suite.partition(":")
        return list(getattr(importlib.import_module(module), name)(**opts))
    return list(benchmarks.load_suite(suite, **opts))


def load_at_least(suite: str, options: Mapping[str, Any], n: int) -> list[Any]:
    """Load ``suite``; for generated suites (``n_per_domain``) grow the per-domain count until ``n`` tasks exist."""
    opts = dict(options or {})
    tasks = _load(suite, opts)
    if "n_per_domain" not in opts:
        return tasks
    while len(tasks) < n:
        grown = dict(opts, n_per_domain=int(opts["n_per_domain"]) * 2)
        more = _load(suite, grown)
        if len(more) <= len(tasks):
            break
        opts, tasks = grown, more
    return tasks


def stable_seed(*parts: Any) -> int:
    """A seed derived from text parts (stable across processes, unlike ``hash``)."""
    return zlib.crc32("|".join(str(p) for p in parts).encode("utf-8"))


def _shuffled(tasks: Sequence[Any], seed: int) -> list[Any]:
    out = list(tasks)
    random.Random(seed).shuffle(out)
    return out


def load_task_sets(benchmark: Mapping[str, Any], n_train: int, n_heldout: int, seed: int = 0,
                   n_validation: int = 0) -> TaskSets:
    """Training, validation and held-out tasks named by a ``conf/benchmark/*.yaml`` mapping.

    ``benchmark.train = {suite, options}``; ``benchmark.heldout`` is another ``{suite, options}`` (a different seed /
    index range, or the suite's held-out split) or null, in which case both sets are disjoint seeded slices of the
    training suite. The ``n_validation`` validation tasks come from ``benchmark.validation`` (another
    ``{suite, options}``: the suite's validation split) when it is given, else from a disjoint seeded slice of the
    training suite (other tasks of the same distribution: for a generated suite, more of its training laws and
    constant draws). ``benchmark.fallback`` (another benchmark mapping) is used when the benchmark's files are not
    on this machine (``TaskDataMissing``); the returned sets then say so in ``note``.
    """
    try:
        return _load_task_sets(benchmark, n_train, n_heldout, seed, n_validation)
    except TaskDataMissing as exc:
        fallback = benchmark.get("fallback")
        if not fallback:
            raise
        sets = _load_task_sets(fallback, n_train, n_heldout, seed, n_validation)
        sets.note = (f"benchmark {benchmark.get('name')!r} needs files that are not on this machine ({exc}); "
                     f"its fallback {fallback.get('name')!r} was used instead")
        log.warning("%s", sets.note)
        return sets


def _load_task_sets(benchmark: Mapping[str, Any], n_train: int, n_heldout: int, seed: int,
                    n_validation: int) -> TaskSets:
    train_spec = benchmark["train"]
    valid_spec = benchmark.get("validation")
    held_spec = benchmark.get("heldout")
    split_seed = int(benchmark.get("split_seed", seed))
    if held_spec:
        in_pool = 0 if valid_spec else n_validation
        pool = _shuffled(load_at_least(train_spec["suite"], train_spec.get("options", {}), n_train + in_pool),
                         split_seed)
        train, validation = pool[:n_train], pool[n_train : n_train + in_pool]
        if valid_spec and n_validation:
            validation = _shuffled(load_at_least(valid_spec["suite"], valid_spec.get("options", {}), n_validation),
                                   split_seed + 2)[:n_validation]
        names = {t.name for t in train + validation}
        held = load_at_least(held_spec["suite"], held_spec.get("options", {}), n_heldout)
        overlap = sum(t.name in names for t in held)
        if overlap and len(held) - overlap < n_heldout:  # same names in both sets: load more, then drop them
            held = load_at_least(held_spec["suite"], held_spec.get("options", {}), n_heldout + overlap)
        held = [t for t in _shuffled(held, split_seed + 1) if t.name not in names][:n_heldout]
    else:
        pool = _shuffled(load_at_least(train_spec["suite"], train_spec.get("options", {}),
                                       n_train + n_validation + n_heldout), split_seed)
        train, validation = pool[:n_train], pool[n_train : n_train + n_validation]
        held = pool[n_train + n_validation : n_train + n_validation + n_heldout]
    if len(train) < n_train or len(held) < n_heldout or len(validation) < n_validation:
        log.warning("benchmark %r gives %d training / %d validation / %d held-out tasks, %d / %d / %d were asked for",
                    benchmark.get("name"), len(train), len(validation), len(held), n_train, n_validation, n_heldout)
    if not train:
        raise ValueError(f"benchmark {benchmark.get('name')!r} gave no training tasks")
    return TaskSets(train=train, heldout=held, validation=validation, benchmark=str(benchmark.get("name") or ""))


def minibatch(tasks: Sequence[Any], size: int | None, *key: Any) -> list[Any]:
    """A seeded subset of ``size`` tasks (all when ``size`` is None or too large); ``key`` names the draw."""
    if size is None or size >= len(tasks):
        return list(tasks)
    rng = random.Random(stable_seed(*key))
    return rng.sample(list(tasks), int(size))


def split_slice(tasks: Sequence[Any], n_holdout: int, *key: Any) -> tuple[list[Any], list[Any]]:
    """Seeded (feedback, held-out slice) partition of training tasks, for stage 3's acceptance test."""
    order = _shuffled(tasks, stable_seed(*key))
    n_holdout = max(1, min(int(n_holdout), len(order) - 1)) if len(order) > 1 else len(order)
    held = order[:n_holdout]
    rest = order[n_holdout:] or list(held)
    return rest, held
