"""PySR-grade regressor: model_selection, latex_table, jax/pytorch export, from_file, warm_start."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import sympy

from harness import FrozenHarness, HarnessRegressor
from harness.app.export import latex_table, select_index
from tests.doubles import SCRIPTED

TINY = {"time_budget": 1, "population_size": 30, "generations": 5, "max_length": 15,
        "unguided_run": False}  # the engine-only run is tested on its own

FRONT = pd.DataFrame({
    "complexity": [1, 3, 5, 9],
    "loss": [0.5, 0.01, 0.0095, 0.009],
    "score": [0.0, 1.956, 0.0256, 0.0136],
    "equation": ["2.1", "1.2*x1**2", "1.2*x1**2 + 0.01*x2", "2.5*x1*x2 + 1.2*x1**2"],
})


def test_model_selection_rules_follow_pysr() -> None:
    assert select_index(FRONT, "accuracy") == 3           # lowest loss
    assert select_index(FRONT, "score") == 1              # highest score
    assert select_index(FRONT, "best") == 1               # highest score with loss <= 1.5 x lowest (0.0135)
    tight = FRONT.assign(loss=[0.5, 0.02, 0.0095, 0.009])  # the score winner is now 2.2x the lowest loss
    assert select_index(tight, "best") == 2
    with pytest.raises(ValueError, match="model_selection"):
        select_index(FRONT, "fastest")


def test_latex_table_rounds_constants_and_has_the_columns() -> None:
    text = latex_table(FRONT, ["x1", "x2"], indices=[1, 3], precision=2)
    assert text.startswith("\\begin{tabular}") and "\\toprule" in text and text.endswith("\\end{tabular}")
    assert "Equation & Complexity & Loss" in text and "$1.2 x_{1}^{2}$" in text and "2.5" in text
    assert text.count("\\\\") == 3  # header + 2 rows
    with pytest.raises(ValueError, match="unknown columns"):
        latex_table(FRONT, ["x1", "x2"], columns=("equation", "r2"))


def _data(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"x1": rng.uniform(1, 3, n), "x2": rng.uniform(-2, 2, n)})
    return X, 2.5 * X["x1"].to_numpy() * X["x2"].to_numpy() + 1.2 * X["x1"].to_numpy() ** 2


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> HarnessRegressor:
    X, y = _data(120, 0)
    run_dir = tmp_path_factory.mktemp("solve")
    harness = FrozenHarness.create(FrozenHarness.default().prompts, (0, 1, 0, 0, 0), sr_settings=TINY)
    return HarnessRegressor(harness=harness, llm={"provider": SCRIPTED}, run_dir=run_dir).fit(X, y)


def test_selection_index_and_exports_agree(fitted: HarnessRegressor) -> None:
    X, _ = _data(30, 1)
    front = fitted.equations_
    assert len(front) >= 2
    last = len(front) - 1
    expected = sympy.lambdify([sympy.Symbol("x1"), sympy.Symbol("x2")], fitted.sympy(last))(X["x1"], X["x2"])
    assert np.allclose(fitted.predict(X, index=last), expected)
    assert fitted.get_best(last)["equation"] == front.iloc[last]["equation"]
    accurate = HarnessRegressor.from_file(fitted.run_dir, model_selection="accuracy")
    assert accurate.equation_ == front.iloc[select_index(front, "accuracy")]["equation"]
    assert "\\begin{tabular}" in fitted.latex_table() and fitted.latex(index=0)


def test_from_file_reloads_a_solved_model_without_solving(fitted: HarnessRegressor) -> None:
    X, _ = _data(30, 2)
    again = HarnessRegressor.from_file(fitted.run_dir)
    assert again.equation_ == fitted.equation_ and np.allclose(again.predict(X), fitted.predict(X))
    assert again.loaded_from_ == fitted.run_dir and again.run_dir is None  # a later fit writes elsewhere
    assert list(again.equations_["equation"]) == list(fitted.equations_["equation"])
    with pytest.raises(FileNotFoundError, match="result.json"):
        HarnessRegressor.from_file(fitted.run_dir / "missing")


def _first_sr_node(run_dir) -> dict:
    import json

    nodes = [json.loads(line) for line in (run_dir / "nodes.jsonl").read_text().splitlines()]
    return next(n for n in nodes if n["kind"] == "sr" and n["info"]["step"] != "unguided")  # the first guided run


def test_warm_start_seeds_the_previous_front(fitted: HarnessRegressor, tmp_path) -> None:
    X, y = _data(100, 3)
    reg = HarnessRegressor(harness=fitted.harness, llm={"provider": SCRIPTED}, warm_start=True,
                           run_dir=tmp_path / "first")
    reg.fit(X, y)
    assert reg.warm_started_from_ == []  # nothing to start from on the first fit
    previous = list(reg.equations_["equation"])
    reg.set_params(run_dir=tmp_path / "second")
    renamed = X.rename(columns={"x1": "a", "x2": "b"})
    reg.fit(renamed, y)  # same columns, new names: the front is renamed
    assert len(reg.warm_started_from_) == len(previous)
    assert all({str(s) for s in sympy.sympify(e).free_symbols} <= {"a", "b"} for e in reg.warm_started_from_)
    node = _first_sr_node(tmp_path / "second")
    assert node["info"]["engine"]["n_seeds"] >= 1  # the previous front went into the first SR run
    assert any(c["source"] == "warm_start" for c in node["candidates"])  # refitted, in the pool
    assert reg.score(renamed, y) > 0.9
    cold = _first_sr_node(tmp_path / "first")
    assert not any(c["source"] == "warm_start" for c in cold["candidates"])


def test_jax_export_matches_predict(fitted: HarnessRegressor) -> None:
    jax = pytest.importorskip("jax", reason="jax is an optional export target")
    X, _ = _data(20, 4)
    exported = fitted.jax()
    out = exported["callable"](X.to_numpy(), exported["parameters"])
    assert np.allclose(np.asarray(out), fitted.predict(X), rtol=1e-4)
    grad = jax.grad(lambda p: exported["callable"](X.to_numpy(), p).sum())(exported["parameters"])
    assert grad.shape == exported["parameters"].shape


def test_pytorch_export_matches_predict_and_trains(fitted: HarnessRegressor) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional export target")
    X, y = _data(20, 5)
    module = fitted.pytorch()
    out = module(torch.tensor(X.to_numpy(), dtype=torch.float64))
    assert np.allclose(out.detach().numpy(), fitted.predict(X))
    loss = ((out - torch.tensor(y)) ** 2).mean()
    loss.backward()
    assert module.constants.grad is not None and module.constants.grad.shape == module.constants.shape
