"""LSR-Synth regenerated from its own laws: the recipe against four problems the benchmark released, every law
loading with its ground truth, the fixed split, and clear errors for bad law files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import benchmarks
from benchmarks.sources import lsr_synth_laws as synth
from harness.core.evaluator import compute_metrics
from harness.core.expression import parse_expression
from harness.core.task import TaskError

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "lsr-synth-laws"
needs_laws = pytest.mark.skipif(not (DATA / "laws.csv").is_file(), reason="shared LSR-Synth laws not present")
REAL = ("CRK0", "BPG0", "PO0", "MatSci0")
# LSR-Synth's 129 problems per domain (LLM-SRBench), whose proportions the split keeps.
OFFICIAL = {"bio_pop_growth": 24, "chem_react": 36, "matsci": 25, "phys_osc": 44}


def _grid_index(task, column: str, values: np.ndarray) -> np.ndarray:
    """Row of the regenerated 5,000-point grid each released value of ``column`` (t or epsilon) sits on."""
    lo, hi = synth.RECIPES[task.metadata["lsr_domain"]].span
    grid = np.linspace(lo, hi, synth.N_POINTS).astype(np.float32)
    index = np.rint((values - lo) / (hi - lo) * (synth.N_POINTS - 1)).astype(int)
    assert np.array_equal(grid[index], values.astype(np.float32)), "a released row is off the recipe's time grid"
    return index


@needs_laws
@pytest.mark.parametrize("name", REAL)
def test_regenerated_problem_matches_the_released_one(name):
    task = benchmarks.load_suite("lsr_synth_laws", names=[name], root=str(DATA.parent))[0]
    full_X = np.vstack([task.train.X, task.test_id.X, task.test_ood.X])
    full_y = np.concatenate([task.train.y, task.test_id.y, task.test_ood.y])
    # stored as the benchmark stores them: every value a float32
    assert np.array_equal(full_X.astype(np.float32), full_X) and np.array_equal(full_y.astype(np.float32), full_y)
    axis = task.input_names.index("t") if "t" in task.input_names else 0
    ours = {}
    for X, y in ((task.train.X, task.train.y), (task.test_id.X, task.test_id.y), (task.test_ood.X, task.test_ood.y)):
        for i, row in zip(_grid_index(task, task.input_names[axis], X[:, axis]), np.column_stack([X, y])):
            ours[i] = row
    assert sorted(ours) == list(range(synth.N_POINTS))  # the three splits cover the grid once
    for split, n in (("train", 4000), ("test_id", 500), ("test_ood", 500)):
        released = pd.read_csv(DATA / "real" / name / f"{split}.csv")
        assert list(released.columns) == [*task.input_names, task.target_name]
        assert len(released) == n == task.row_counts()[split]
        values = released.to_numpy(dtype=np.float64)
        index = _grid_index(task, task.input_names[axis], values[:, axis])
        if split == "test_ood":  # the OOD split is the last 10 % of the grid, in time order, in both
            assert np.array_equal(index, np.arange(4500, 5000))
            assert np.array_equal(task.test_ood.X[:, axis], values[:, axis])
        else:
            assert index.max() < 4500
        regenerated = np.array([ours[i] for i in index])
        scale = np.max(np.abs(values), axis=0)
        # within float32 rounding of each column's scale (float32's epsilon is 1.2e-7)
        assert np.all(np.abs(regenerated - values) <= 2.5e-7 * scale), split


@needs_laws
def test_all_laws_load_with_their_ground_truth():
    laws = synth.read_laws(root=DATA.parent)
    assert len(laws) == 109
    assert Counter(law.domain for law in laws) == {"bio_pop_growth": 19, "chem_react": 31, "matsci": 20,
                                                   "phys_osc": 39}
    tasks = benchmarks.load_suite("lsr_synth_laws", root=str(DATA.parent))
    assert [t.name for t in tasks] == [law.name for law in laws]
    for task in tasks:
        assert task.ground_truth and task.metadata["split"] in synth.PARTS
        assert task.row_counts() == {"train": 4000, "test_id": 500, "test_ood": 500}
        law = parse_expression(task.ground_truth, task.input_names)
        for split in task.splits().values():  # the law reproduces its own float32-stored targets
            assert compute_metrics(split.y, law(split.X))["nmse"] < 1e-6, task.name


@needs_laws
def test_the_split_is_fixed_disjoint_and_stratified():
    names = {law.name: law.domain for law in synth.read_laws(root=DATA.parent)}
    parts = {p: [n for d in synth.SPLITS[p].values() for n in d] for p in synth.PARTS}
    everything = [n for p in synth.PARTS for n in parts[p]]
    assert sorted(everything) == sorted(names) and len(set(everything)) == len(everything)
    assert {p: len(v) for p, v in parts.items()} == {"train": 57, "validation": 12, "heldout": 40}
    for part, size in (("heldout", 40), ("validation", 12)):
        for domain, members in synth.SPLITS[part].items():
            assert all(names[n] == domain for n in members)
            assert abs(len(members) - size * OFFICIAL[domain] / 129) < 1.0, (part, domain)
    first = benchmarks.load_suite("lsr_synth_laws", split="heldout", n_per_domain="1", root=str(DATA.parent))
    assert [t.name for t in first] == [synth.SPLITS["heldout"][d][0] for d in synth.RECIPES]
    assert synth.part_of("PO999") == "other"


def _laws_file(tmp_path: Path, *rows: str) -> Path:
    file = tmp_path / "laws.csv"
    file.write_text(",".join(synth.COLUMNS) + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return file


def test_law_files_that_cannot_be_used_are_named(tmp_path):
    with pytest.raises(TaskError, match="not found"):
        synth.load_lsr_synth_laws(path=tmp_path / "absent.csv")
    bad_domain = _laws_file(tmp_path, "astro,AS0,t;A,c0*A,c0,1.0,-0.5*A")
    with pytest.raises(TaskError, match="domain 'astro'"):
        synth.read_laws(bad_domain)
    bad_input = _laws_file(tmp_path, "chem_react,CRK0,t;B,c0*B,c0,1.0,-0.5*B")
    with pytest.raises(TaskError, match="inputs"):
        synth.read_laws(bad_input)
    # dA/dt = A**2 from A(0) = 1 blows up at t = 1: refused by name, never a shortened trajectory
    blows_up = _laws_file(tmp_path, "chem_react,CRK99,t;A,c0*A**2,c0,1.0,1.0*A**2")
    with pytest.raises(TaskError, match="CRK99.*cannot be integrated"):
        synth.load_lsr_synth_laws(path=blows_up)
    decays = _laws_file(tmp_path, "chem_react,CRK98,t;A,-c0*A,c0,0.1,-0.1*A")
    task = synth.load_lsr_synth_laws(path=decays)[0]
    assert task.metadata["split"] == "other" and task.ground_truth == "-0.1*A"
    t, a = task.test_ood.X[:, 0], task.test_ood.X[:, 1]
    assert np.allclose(a, np.exp(-0.1 * t), rtol=1e-3, atol=1e-5)  # the recipe's A(0) = 1, RK45 at its default tolerance
