"""The LLM-SRBench-grade suites: lsr_like (LSR-Synth's recipe), lsr_transform (LSR-Transform from Feynman), noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import benchmarks
from benchmarks import add_noise, load_suite, load_task
from benchmarks.sources import lsr_like, lsr_transform
from benchmarks.sources.feynman import read_equations
from harness.core.evaluator import compute_metrics
from harness.core.expression import parse_expression
from harness.core.task import TaskError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_feynman = pytest.mark.skipif(not (DATA / "feynman").is_dir(), reason="shared Feynman table not present")


def truth_error(task) -> float:
    """Largest relative error of the ground truth over every split (0 = it reproduces every row)."""
    expr = parse_expression(task.ground_truth, task.input_names)
    worst = 0.0
    for split in task.splits().values():
        pred = expr(split.X)
        worst = max(worst, float(np.max(np.abs(pred - split.y) / np.maximum(np.abs(split.y), 1e-300))))
    return worst


# ----------------------------------------------------------------------------- lsr_like: the recipe


def test_every_curated_law_is_known_plus_synthetic_terms_of_one_half():
    for domain, catalogue in lsr_like.LAWS.items():
        lib = lsr_like.TERMS[domain]
        assert len(catalogue) >= 2, domain
        assert {law.split for law in catalogue} == {"train", "test"}
        for law in catalogue:
            kinds = [lib[k].kind for k in law.terms]
            assert "known" in kinds and "synthetic" in kinds, law
            assert {lib[k].half for k in law.terms if lib[k].kind == "synthetic"} == {law.split}, law
            assert lsr_like.law_split(domain, law.terms) == law.split
        # the halves of the synthetic library are disjoint, so held-out laws have unseen unusual terms
        train_terms = {k for law in catalogue if law.split == "train" for k in law.terms if lib[k].kind == "synthetic"}
        test_terms = {k for law in catalogue if law.split == "test" for k in law.terms if lib[k].kind == "synthetic"}
        assert train_terms and test_terms and not train_terms & test_terms


def test_a_law_mixing_both_halves_is_refused():
    with pytest.raises(TaskError, match="one half"):
        lsr_like.law_split("chem_react", ("first_order", "sqrt_decay", "slowing_rate"))


@pytest.mark.parametrize("domain", list(lsr_like.DOMAIN_SPECS))
def test_lsr_like_tasks_follow_the_benchmark_layout(domain):
    (task,) = load_suite("lsr_like", domains=domain, n_per_domain=1, split="test")
    dom = lsr_like.DOMAIN_SPECS[domain]
    n = task.train.n + task.test_id.n + task.test_ood.n
    assert n == lsr_like.N_POINTS
    assert task.test_ood.n == int(round(lsr_like.N_POINTS * lsr_like.OOD_FRACTION))
    assert task.input_names == list(dom.inputs) and task.target_name == dom.target
    assert task.input_descriptions == list(dom.descriptions)
    assert truth_error(task) < 1e-9  # the target is the law itself at every row
    meta = task.metadata
    assert meta["known_terms"] and meta["synthetic_terms"] and meta["split"] == "test"
    # constants at full double precision, as LLM-SRBench writes them (never rounded to a few digits)
    flat = [v for c in meta["constants"] for v in c.values()]
    assert any(len(repr(v)) > 10 for v in flat)
    if dom.dynamic:
        t = task.input_names.index("t")
        t_id = np.concatenate([task.train.X[:, t], task.test_id.X[:, t]])
        # the OOD test is the last 10% of the time axis; train and ID test share the rest
        assert task.test_ood.X[:, t].min() > t_id.max()
        assert task.test_ood.X[:, t].max() == pytest.approx(dom.horizon)
        assert t_id.min() == 0.0
        # relative accuracy is hard: the targets pass near zero (an equilibrium or a zero crossing)
        y = np.concatenate([task.train.y, task.test_id.y, task.test_ood.y])
        assert np.min(np.abs(y)) < 0.05 * np.max(np.abs(y))
    else:
        T = task.input_names.index("T")
        assert task.test_ood.X[:, T].min() >= dom.temperature_ood[0] >= task.train.X[:, T].max()


def test_lsr_like_inputs_lie_on_one_trajectory():
    (task,) = load_suite("lsr_like", names=["phys_osc_lsr_00"])
    law = parse_expression(task.ground_truth, task.input_names)
    X = np.vstack([task.train.X, task.test_id.X, task.test_ood.X])
    X = X[np.argsort(X[:, 1])]
    (x0, t0, v0), (x1, t1, v1) = X[0], X[-1]
    assert [x0, v0] == pytest.approx(task.metadata["initial_state"])

    def rhs(t, s):
        return [s[1], float(law(np.array([[s[0], t, s[1]]]))[0])]

    sol = solve_ivp(rhs, (t0, t1), [x0, v0], method="DOP853", rtol=1e-11, atol=1e-12)
    assert np.allclose(sol.y[:, -1], [x1, v1], atol=1e-5)


def test_lsr_like_is_seeded_and_deterministic():
    terms = lsr_like.LAWS["bio_pop_growth"][0].terms
    a = lsr_like.make_task("bio_pop_growth", terms, "a", 4, salt=(1,))
    b = lsr_like.make_task("bio_pop_growth", terms, "a", 4, salt=(1,))
    c = lsr_like.make_task("bio_pop_growth", terms, "a", 5, salt=(1,))
    for k in ("train", "test_id", "test_ood"):
        assert np.array_equal(a.splits()[k].X, b.splits()[k].X) and np.array_equal(a.splits()[k].y, b.splits()[k].y)
    assert a.ground_truth == b.ground_truth != c.ground_truth


def test_lsr_like_checks_reject_what_they_promise():
    terms = lsr_like.LAWS["bio_pop_growth"][0].terms
    task = lsr_like.make_task("bio_pop_growth", terms, "x", 0)
    assert lsr_like.recoverable(task.ground_truth, task.input_names, task.train, (task.test_id, task.test_ood))
    # a polynomial law is within a cubic's reach: every draw is rejected for it
    with pytest.raises(TaskError, match="cubic polynomial"):
        lsr_like.make_task("matsci", ("hooke", "quadratic_thermal"), "poly", 0, max_attempts=3)
    # a truth whose constants are off by 1% cannot earn acc_0.001 (so the check is not vacuous)
    (value,) = task.metadata["constants"][0].values()
    assert repr(value) in task.ground_truth
    wrong = task.ground_truth.replace(repr(value), repr(value * 1.01))
    pred = parse_expression(wrong, task.input_names)(task.test_id.X)
    assert compute_metrics(task.test_id.y, pred)["acc_0.001"] == 0.0
    assert lsr_like.polynomial_accuracy(task.train, task.test_id) < 1.0


def test_phys_osc_training_laws_reach_lsr_synths_two_regimes():
    """Heavily damped laws settle (most targets below 1e-3 of the largest, as on LSR-Synth's damped oscillators)
    and still hold a resolved trajectory out of domain; self-excited laws keep oscillating (none settle)."""
    train = [law for _, law in lsr_like.laws("phys_osc", "train")]
    lib = lsr_like.TERMS["phys_osc"]
    settling = [law for law in train if any(lib[k].settles for k in law.terms)]
    sustained = [law for law in train if "van_der_pol" in law.terms]
    assert len(settling) >= 2 and len(sustained) >= 2
    for law in (settling[0], sustained[0]):
        task = lsr_like.make_task("phys_osc", law.terms, "regime", 3, n_points=2000)
        share = lsr_like.settled_share(task.train, task.test_id, task.test_ood)
        assert task.metadata["settled_share"] == share
        assert truth_error(task) < 1e-9
        ood_level = np.median(np.abs(task.test_ood.y)) / np.max(np.abs(task.train.y))
        if law in settling:
            assert share >= lsr_like.MIN_SETTLED_SHARE and ood_level >= lsr_like.MIN_OOD_LEVEL_SETTLING
            # only the exact law passes relative accuracy on the settled rows: 1 % off in the damping fails them
            wrong = task.ground_truth.replace(repr(task.metadata["constants"][law.terms.index("heavy_damping")]["b"]),
                                              repr(task.metadata["constants"][law.terms.index("heavy_damping")]["b"]
                                                   * 1.01))
            pred = parse_expression(wrong, task.input_names)(task.test_ood.X)
            assert compute_metrics(task.test_ood.y, pred)["acc_0.01"] < 0.5
        else:
            assert share < 0.05 and ood_level >= lsr_like.MIN_OOD_LEVEL
    # a heavily damped law that does not settle (a drive keeps it going) is refused, not mislabelled
    with pytest.raises(TaskError, match="does not settle"):
        lsr_like.make_task("phys_osc", ("driving", "heavy_damping", "cubic_damping"), "driven", 0, max_attempts=3)


def test_lsr_like_suite_splits_and_names():
    train = load_suite("lsr_like", n_per_domain=2, split="train", domains="chemistry", n_points=400)
    test = load_suite("lsr_like", n_per_domain=2, split="test", domains="chemistry", n_points=400)
    assert {t.metadata["split"] for t in train} == {"train"} and {t.metadata["split"] for t in test} == {"test"}
    assert {t.name for t in train}.isdisjoint({t.name for t in test})
    assert train[0].train.n + train[0].test_id.n + train[0].test_ood.n == 400
    assert load_task(train[1].name, n_points=400).ground_truth == train[1].ground_truth
    k = len(lsr_like.LAWS["chem_react"])
    (variant,) = load_suite("lsr_like", names=[f"chem_react_lsr_{k:02d}"], n_points=400)
    assert variant.metadata["law"] == 0 and variant.metadata["variant"] == 1
    with pytest.raises(TaskError, match="look like"):
        load_suite("lsr_like", names=["chem_react_03"])


# ----------------------------------------------------------------------------- lsr_transform


@pytest.fixture(scope="module")
def transform_cache(tmp_path_factory):
    """One fresh cache folder for the module: the whole table is solved once (~40 s on 2 cores), later loads read it."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_SR_CACHE", str(folder))
        yield folder


@pytest.mark.slow
@needs_feynman
def test_lsr_transform_has_over_100_tasks_whose_truths_reproduce_the_data(transform_cache):
    skipped: list = []
    found = lsr_transform.transforms(skipped=skipped)
    assert len(found) >= 100
    assert skipped and all(reason for _, reason in skipped)
    assert len({t.filename for t in found}) >= 60
    # cached: a second call reads the file instead of solving again
    assert list((transform_cache / "lsr_transform").glob("*.json"))
    again = lsr_transform.transforms()
    assert [t.task_name for t in again] == [t.task_name for t in found]
    tasks = load_suite("lsr_transform", n=25, n_train=200, n_test=50, n_ood=50)
    assert len(tasks) == 25
    for task in tasks:
        assert truth_error(task) < 1e-6, (task.name, task.ground_truth)
        assert task.metadata["original_formula"] not in task.target_description
        assert task.target_name in (task.metadata["pivot"], task.metadata["pivot"] + "_")  # gamma -> gamma_


@needs_feynman
def test_lsr_transform_workers_give_what_one_process_gives(tmp_path):
    """The table split over child processes comes back in table order, the same as computed in this process."""
    lines = (DATA / "feynman" / "FeynmanEquations.csv").read_text().splitlines()
    table = tmp_path / "FeynmanEquations.csv"
    table.write_text("\n".join(lines[:4]) + "\n")  # the header and three equations: 6 (equation, pivot) pairs
    alone, split = [], []
    one = lsr_transform.transforms(table, skipped=alone, use_cache=False, workers=1)
    two = lsr_transform.transforms(table, skipped=split, use_cache=False, workers=2)
    assert one and two == one and split == alone
    order = [(eq.filename, pivot) for eq in read_equations(table) for pivot in eq.variables]
    places = [order.index((t.filename, t.pivot)) for t in two] + [order.index(tuple(k.split(":"))) for k, _ in split]
    assert sorted(places[: len(two)]) == places[: len(two)] and sorted(places) == list(range(len(order)))


@needs_feynman
def test_lsr_transform_one_equation_by_hand():
    (eq,) = [e for e in read_equations(DATA / "feynman" / "FeynmanEquations.csv") if e.filename == "I.12.1"]
    tr = lsr_transform.transform(eq, "mu")  # F = mu*Nn  ->  mu = F/Nn
    assert tr.inputs == ("Nn", "F") and tr.target == "mu"
    assert parse_expression(tr.formula, tr.inputs).sympy.equals(parse_expression("F/Nn", tr.inputs).sympy)
    task = lsr_transform.make_task(eq, tr, n_train=100, n_test=20, n_ood=20)
    assert task.name == "lsr_transform_I.12.1_mu"
    assert task.input_descriptions == ["normal force", "force (a measured quantity of the system)"]
    lo, hi = eq.ranges[eq.variables.index("mu")]
    assert lo <= task.train.y.min() and task.train.y.max() <= hi
    assert task.test_ood.y.min() >= hi  # OOD: the original variables above their training box


@needs_feynman
def test_lsr_transform_skips_what_it_cannot_transform_with_a_reason(tmp_path):
    table = tmp_path / "eqs.csv"
    table.write_text(
        "Filename,Number,Output,Formula,# variables,v1_name,v1_low,v1_high,v2_name,v2_low,v2_high\n"
        "ok,1,f,x*y,2,x,1,3,y,1,3\n"
        "branches,2,f,sin(x)*y,2,x,1,3,y,1,3\n"
    )
    skipped: list = []
    found = lsr_transform.transforms(table, skipped=skipped, use_cache=False)
    assert sorted(t.task_name for t in found) == ["lsr_transform_branches_y", "lsr_transform_ok_x",
                                                  "lsr_transform_ok_y"]
    assert [name for name, _ in skipped] == ["branches:x"]  # asin gives back x only below pi/2
    assert "branch" in skipped[0][1]


@pytest.mark.slow  # with the table test, on one worker: alone it solves the whole table again
@needs_feynman
def test_lsr_transform_splits_halve_the_equations(transform_cache):
    train = load_suite("lsr_transform", split="train", n=10, n_train=50, n_test=10, n_ood=10)
    test = load_suite("lsr_transform", split="test", n=10, n_train=50, n_test=10, n_ood=10)
    assert {t.metadata["number"] % 2 for t in train} == {0} and {t.metadata["number"] % 2 for t in test} == {1}


# ----------------------------------------------------------------------------- noise


def test_noise_is_relative_recorded_and_seeded():
    (clean,) = load_suite("lsr_like", names=["matsci_lsr_00"], n_points=2000)
    (noisy,) = load_suite("lsr_like", names=["matsci_lsr_00"], n_points=2000, noise=0.01)
    rel = noisy.train.y / clean.train.y - 1.0
    assert np.std(rel) == pytest.approx(0.01, rel=0.1) and abs(np.mean(rel)) < 0.002
    assert np.array_equal(noisy.train.X, clean.train.X)
    assert np.array_equal(noisy.test_id.y, clean.test_id.y) and np.array_equal(noisy.test_ood.y, clean.test_ood.y)
    assert noisy.metadata["noise"] == {"level": 0.01, "kind": "relative gaussian", "splits": ["train"]}
    (again,) = load_suite("lsr_like", names=["matsci_lsr_00"], n_points=2000, noise=0.01)
    assert np.array_equal(again.train.y, noisy.train.y)
    both = add_noise(clean, 0.05, tests=True, seed=1)
    assert both.metadata["noise"]["splits"] == ["train", "test_id", "test_ood"]
    assert np.std(both.test_ood.y / clean.test_ood.y - 1.0) == pytest.approx(0.05, rel=0.2)
    assert not np.array_equal(both.train.y, noisy.train.y)


def test_noise_works_for_every_built_in_suite_and_is_checked():
    (task,) = load_suite("synthetic", names=["phys_osc_synth_00"], n_train=200, noise="0.02", noise_tests="true")
    assert task.metadata["noise"]["level"] == 0.02 and task.metadata["noise"]["splits"][-1] == "test_ood"
    with pytest.raises(TaskError, match="noise"):
        load_suite("synthetic", names=["phys_osc_synth_00"], noise=1.5)


def test_the_new_suites_are_registered():
    assert {"lsr_like", "lsr_transform"} <= set(benchmarks.SUITES)
    assert benchmarks.coerce_options("lsr_like", {"n_points": "600", "noise": "0.01"}) == {
        "n_points": 600, "noise": 0.01}


def test_curation_takes_laws_written_by_hand():
    """``curate_lsr_like.py --law phys_osc:...``: hand-written compositions go through the same filters; the half
    follows the synthetic terms, and a typo or a law mixing both halves is an error before any engine runs."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "curate_lsr_like.py"
    spec = importlib.util.spec_from_file_location("curate_lsr_like_script", path)
    curate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(curate)
    laws = curate.written_laws(["physics:harmonic, heavy_damping,soft_spring", "phys_osc:damping,sqrt_spring"])
    assert laws == [("phys_osc", "train", 0, ("harmonic", "heavy_damping", "soft_spring")),
                    ("phys_osc", "test", 1, ("damping", "sqrt_spring"))]
    with pytest.raises(TaskError, match="unknown term"):
        curate.written_laws(["phys_osc:harmonic,heavy_dampng"])
    with pytest.raises(TaskError, match="one half"):
        curate.written_laws(["phys_osc:harmonic,soft_spring,sqrt_spring"])
