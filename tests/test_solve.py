"""Solving with a frozen harness: the sklearn-style regressor and ``python -m harness solve``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError
import sympy

from harness import FrozenHarness, HarnessRegressor
from harness.core.evaluator import compute_metrics
from tests.doubles import HYDRA_TEST_CONF, SCRIPTED

ROOT = Path(__file__).resolve().parent.parent
TINY = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15,
        "unguided_run": False}  # the engine-only run is tested on its own


def _data(n: int, lo: float, hi: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1, x2 = rng.uniform(lo, hi, n), rng.uniform(-2, 2, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": 2.5 * x1 * x2 + 1.2 * x1**2})


def test_regressor_fit_predict_score() -> None:
    df = _data(120, 1, 3, 0)
    X, y = df[["x1", "x2"]], df["y"].to_numpy()
    reg = HarnessRegressor(llm={"provider": SCRIPTED}, sr_settings=TINY, seed=0)
    assert reg.fit(X, y, descriptions={"x1": "speed", "x2": "load"}, target_name="power") is reg
    pred = reg.predict(X)
    assert pred.shape == y.shape and np.all(np.isfinite(pred))
    assert reg.score(X, y) > 0.9
    assert list(reg.equations_.columns) == ["complexity", "loss", "score", "equation", "sympy_format"]
    assert {s.name for s in reg.sympy().free_symbols} <= {"x1", "x2"} and reg.latex()
    # columns are matched by name, not position
    assert np.allclose(reg.predict(X[["x2", "x1"]]), pred)
    assert reg.solution_.llm_calls == 1  # default harness: the planner, then one SR run


def test_regressor_with_arrays_names_and_a_harness_object(tmp_path: Path) -> None:
    df = _data(80, 1, 3, 1)
    harness = FrozenHarness.create(FrozenHarness.default().prompts, (0, 1, 0, 0, 0), sr_settings=TINY)
    path = harness.save(tmp_path / "h.json")
    for spec in (harness, str(path)):
        reg = HarnessRegressor(harness=spec, llm={"provider": SCRIPTED})
        reg.fit(df[["x1", "x2"]].to_numpy(), df["y"].to_numpy(), variable_names=["speed (m/s)", "load"])
        assert reg.variable_names_ == ["speed_m_s", "load"]
        assert reg.predict(df[["x1", "x2"]].to_numpy()).shape == (80,)
        assert reg.solution_.llm_calls == 1
    with pytest.raises(NotFittedError, match="not fitted"):
        HarnessRegressor().predict(df[["x1", "x2"]])
    assert HarnessRegressor(seed=3).get_params()["seed"] == 3


def _folder(tmp_path: Path) -> Path:
    """A task in the LLM-SR layout: train.csv, test_id.csv, test_ood.csv, target in the last column."""
    folder = tmp_path / "toytask"
    folder.mkdir()
    _data(150, 1, 3, 0).to_csv(folder / "train.csv", index=False)
    _data(50, 1, 3, 1).to_csv(folder / "test_id.csv", index=False)
    _data(50, 3, 4, 2).to_csv(folder / "test_ood.csv", index=False)
    return folder


def _solve_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "solve", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=240)


def test_cli_solve_writes_result_that_reproduces_metrics(tmp_path: Path) -> None:
    folder, out = _folder(tmp_path), tmp_path / "run"
    proc = _solve_cli("harness=default", f"data={folder}", f"llm.provider={SCRIPTED}", "sr.time_budget=1",
                      "sr.population_size=20", "sr.generations=3", "budget.max_seconds=120", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "equation" in proc.stdout and "test_ood" in proc.stdout  # printed metrics table
    result = json.loads((out / "result.json").read_text())
    for name in ("nodes.jsonl", "pred_vs_true_id.png", "pred_vs_true_ood.png", "pareto_front.png"):
        assert (out / name).is_file(), name
    assert set(result["metrics"]) == {"train", "valid", "test_id", "test_ood"}
    assert result["pareto_front"] and result["llm_calls"] == 1

    symbols = {n: sympy.Symbol(n) for n in ("x1", "x2")}
    expr = sympy.sympify(result["expression"], locals=symbols)
    assert expr.free_symbols <= set(symbols.values())
    test = pd.read_csv(folder / "test_id.csv")
    fn = sympy.lambdify([symbols["x1"], symbols["x2"]], expr, "numpy")
    pred = np.broadcast_to(np.asarray(fn(test["x1"].to_numpy(), test["x2"].to_numpy()), dtype=float), (len(test),))
    metrics = compute_metrics(test["y"].to_numpy(), pred)
    reported = result["metrics"]["test_id"]
    assert metrics["nmse"] == pytest.approx(reported["nmse"], rel=1e-6, abs=1e-12)
    assert metrics["acc_0.01"] == reported["acc_0.01"]


def test_cli_solve_with_csv_and_backend_group(tmp_path: Path) -> None:
    csv, out = tmp_path / "data.csv", tmp_path / "run"
    _data(100, 1, 3, 0).to_csv(csv, index=False)
    harness = FrozenHarness.create(FrozenHarness.default().prompts, (0, 1, 0, 0, 0), sr_settings=TINY)
    path = harness.save(tmp_path / "h.json")
    proc = _solve_cli(f"harness={path}", f"data={csv}", "target=y", "llm=scripted", HYDRA_TEST_CONF, "backend=operon",
                      'sr.term_library={any: ["0.5*x1", "x2**2"]}', f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["llm_calls"] == 1 and "test_id" in result["metrics"]
    run = json.loads((out / "run.json").read_text())  # the library given on the command line was fitted
    assert run["config"]["sr_settings"]["term_library"] == {"any": ["0.5*x1", "x2**2"]}
    nodes = [json.loads(line) for line in (out / "nodes.jsonl").read_text().splitlines()]
    assert any(c["source"] == "library" for n in nodes if n["kind"] == "sr" for c in n["candidates"])
    assert not (out / "pred_vs_true_ood.png").exists()


def test_cli_solve_reports_bad_input(tmp_path: Path) -> None:
    (tmp_path / "h.json").write_text("{}")
    proc = _solve_cli(f"harness={tmp_path / 'h.json'}", f"data={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "schema_version" in proc.stdout


@pytest.mark.slow
@pytest.mark.llm
def test_cli_solve_with_the_embedded_model_gets_a_parsed_plan_and_a_solution(tmp_path: Path) -> None:
    """`python -m harness solve harness=default` end to end with the default embedded model (Qwen2.5-Coder-1.5B via
    llama.cpp, no extra install step) on a synthetic task, y = 2.5*x1*x2 + 1.2*x1**2, in the LLM-SR folder layout.
    What it shows of the model: its planner call returns a valid plan, parsed (no fallback), with hypotheses that
    parse over the task's inputs, and that plan reaches the engine: its hypotheses are fitted in the guided SR
    run (kept ones seed it and join the pool, poor ones are dropped with a note). Without the model (a fallback
    plan, no hypotheses) these fail. The recovered law is the whole pipeline's (its degree-2 terms are in the
    sparse regression's library, so the engine side finds it without the model): this is not a test of the
    model's contribution to accuracy (that is measured, docs/results.md)."""
    folder, out = _folder(tmp_path), tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "harness", "solve", "harness=default", f"data={folder}",
                           "sr.time_budget=3", "sr.population_size=200", f"hydra.run.dir={out}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["llm_calls"] == 1  # default harness: the planner (its seeded SR run beside the unguided one)
    assert result["metrics"]["test_id"]["acc_0.01"] == 1.0, result["expression"]
    nodes = [json.loads(line) for line in (out / "nodes.jsonl").read_text().splitlines()]
    planner = next(n for n in nodes if n["kind"] == "role:planner")
    assert not planner["info"]["fallback"] and not planner["error"], planner["response"]
    hypotheses = planner["info"]["output"]["hypotheses"]
    assert hypotheses, planner["response"]
    from harness.core.expression import parse_expression

    parsed = []
    for h in hypotheses:
        try:
            parsed.append(parse_expression(h, ["x1", "x2"]))
        except ValueError:
            pass
    assert parsed, hypotheses  # at least one hypothesis is a usable equation over the task's inputs
    [guided] = [n for n in nodes if n["kind"] == "sr" and n["parent"] == planner["id"]]
    kept = [c for c in guided["candidates"] if c["source"] == "hypothesis"]
    dropped = [note for note in guided["info"]["hypothesis_notes"] if note.startswith("hypothesis ")]
    assert kept or dropped, guided["info"]  # the model's hypotheses were fitted in the run it planned
    if kept:  # ... and the kept ones seeded the engine
        assert guided["info"]["plan"]["seeds"], guided["info"]["plan"]
    x1, x2 = sympy.symbols("x1 x2")
    expr = sympy.sympify(result["expression"])
    assert abs(float(expr.subs({x1: 2.0, x2: -1.0})) - (2.5 * 2 * -1 + 1.2 * 4)) < 1e-2


def test_named_starting_harnesses_are_accepted_wherever_a_harness_is(tmp_path: Path) -> None:
    """``harness=initial`` (HarnessSR's start: generic prompts, none of the hand-made SR choices) and ``default`` in
    the solve CLI, the regressor and the benchmark runner: a side-by-side with HarnessSR's start needs no file."""
    from workflows.harness import hand_made_choices
    from workflows.roles import initial_prompts

    initial = FrozenHarness.resolve("initial")
    assert initial.prompts == initial_prompts() and hand_made_choices(initial.description()) == {}
    assert initial.digest == FrozenHarness.resolve("initial").digest != FrozenHarness.resolve("default").digest
    assert "initial_harness" in initial.provenance["source"]

    X = np.random.default_rng(0).uniform(1, 3, size=(120, 2))
    model = HarnessRegressor(harness="initial", llm={"provider": SCRIPTED},
                             sr_settings={"time_budget": 1, "population_size": 20, "generations": 3})
    model.fit(X, 2.0 * X[:, 0] + X[:, 1] ** 2)
    assert model.harness_.digest == initial.digest

    folder, out = _folder(tmp_path), tmp_path / "run"
    proc = _solve_cli("harness=initial", f"data={folder}", f"llm.provider={SCRIPTED}", "sr.time_budget=1",
                      "sr.population_size=20", "sr.generations=3", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["llm_calls"] == 1 and result["solver_runs"] == 1  # one Planner -> SR branch, no unguided run
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["sr_settings"]["unguided_run"] is False and run["config"]["sr_settings"]["combine_terms"] is False


def test_a_solve_bound_by_work_gives_the_same_equations_for_the_same_seed(tmp_path: Path) -> None:
    """A user's solve is bounded by seconds unless they ask for work: ``sr.generations`` below what
    ``sr.time_budget`` allows ends every SR run after its generations (one thread, a seeded engine), and
    ``sr.time_guard`` makes every later step's seconds cap (constant fits, front refits, the combination, sparse
    regression, the precision polish) a guard, so the same data and seed give the same front on the same machine,
    also beside other work (the suite runs on two workers)."""
    rng = np.random.default_rng(2)  # a law the engine does not finish in the run, so its front depends on the work
    X = pd.DataFrame({"x1": rng.uniform(0.5, 3, 200), "x2": rng.uniform(-2, 2, 200)})
    y = (np.sin(2.3 * X["x1"]) * np.exp(-0.4 * X["x2"]) + 0.7 * X["x1"] ** 1.5 / (1 + X["x2"] ** 2)).to_numpy()
    work = {"time_budget": 60, "generations": 25, "time_guard": 20, "population_size": 100, "max_length": 15}
    fronts = []
    for i in range(2):
        reg = HarnessRegressor(llm={"provider": SCRIPTED}, sr_settings=work, seed=4, run_dir=tmp_path / str(i))
        reg.fit(X, y)
        nodes = [json.loads(line) for line in (tmp_path / str(i) / "nodes.jsonl").read_text().splitlines()]
        steps = {n["info"].get("channel", "combination"): n for n in nodes if "cap_seconds" in n["info"]}
        assert set(steps) == {"combination", "sparse regression", "precision polish"}
        for node in steps.values():  # every cap 20 times its usual seconds, and none reached
            assert node["info"]["cap_seconds"] >= 20 * 8.0 and node["seconds"] < node["info"]["cap_seconds"]
        assert not [c for n in nodes for c in n["candidates"] if c["status"] == "timeout"]
        assert [n["info"]["engine"]["generations"] for n in nodes if n["kind"] == "sr"] == [25, 25]
        fronts.append(reg.equations_[["complexity", "loss", "equation"]])
    assert len(fronts[0]) > 1
    pd.testing.assert_frame_equal(fronts[0], fronts[1])
