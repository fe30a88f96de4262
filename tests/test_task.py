"""Task / Split validation, hold-out, cards and summaries."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.core.task import RESERVED_NAMES, Split, Task, TaskError, safe_identifier


def make(n: int = 50, d: int = 2, seed: int = 0, **kw) -> Task:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X.sum(axis=1) + 0.1 * rng.normal(size=n)
    return Task.from_arrays(X, y, name=kw.pop("name", "demo"), **kw)


def test_from_arrays_defaults_and_padding():
    t = make(d=3, input_descriptions=["first"])
    assert t.input_names == ["x0", "x1", "x2"]
    assert t.input_descriptions == ["first", "", ""]
    assert t.train.X.dtype == np.float64 and t.train.X.shape == (50, 3)
    assert list(t.splits()) == ["train"]


def test_splits_accept_pairs_and_keep_order():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(30, 1)), rng.normal(size=30)
    t = Task.from_arrays(X, y, test_ood=(X[:5], y[:5]), test_id=Split(X[5:9], y[5:9]))
    assert list(t.splits()) == ["train", "test_id", "test_ood"]
    assert t.test_ood.n == 5 and t.test_id.n == 4


def test_split_reshapes_1d_x_and_checks_rows():
    s = Split(np.arange(5.0), np.arange(5))
    assert s.X.shape == (5, 1) and s.y.dtype == np.float64
    with pytest.raises(TaskError, match="5 rows but y has 4"):
        Split(np.zeros((5, 2)), np.zeros(4))


@pytest.mark.parametrize(
    "names, pattern",
    [
        (["sin", "x"], "'sin' clashes"),
        (["c0", "x"], "'c0' clashes"),
        (["params", "x"], "'params' clashes"),
        (["pi", "x"], "'pi' clashes"),
        (["np", "x"], "'np' clashes"),
        (["lambda", "x"], "'lambda' is not a valid"),
        (["1x", "x"], "'1x' is not a valid"),
        (["a b", "x"], "'a b' is not a valid"),
        (["x", "x"], "duplicate input names"),
    ],
)
def test_bad_input_names(names, pattern):
    with pytest.raises(TaskError, match=pattern):
        make(input_names=names)


def test_target_name_checks():
    with pytest.raises(TaskError, match="also an input"):
        make(input_names=["a", "b"], target_name="a")
    with pytest.raises(TaskError, match="not a valid Python identifier"):
        make(target_name="y(t)")


def test_too_many_descriptions():
    with pytest.raises(TaskError, match="3 input descriptions for 2 inputs"):
        make(input_descriptions=["a", "b", "c"])


def test_shape_and_value_errors_name_what_is_wrong():
    X, y = np.ones((20, 2)), np.arange(20.0)
    with pytest.raises(TaskError, match="X has 2 columns but there are 3 input names"):
        Task.from_arrays(X, y, input_names=["a", "b", "c"])
    X2 = np.random.default_rng(0).normal(size=(20, 2))
    X2[7, 1] = np.nan
    with pytest.raises(TaskError, match=r"column 'b' .* at row 7"):
        Task.from_arrays(X2, y, input_names=["a", "b"])
    y2 = y.copy()
    y2[3] = np.inf
    with pytest.raises(TaskError, match=r"column 'y' .* at row 3"):
        Task.from_arrays(np.ones((20, 2)), y2)
    with pytest.raises(TaskError, match=r"split 'test_ood'.*column 'x0'"):
        Task.from_arrays(X, y, test_ood=(np.full((3, 2), np.nan), np.ones(3)))
    with pytest.raises(TaskError, match="at least 10 are needed"):
        Task.from_arrays(np.ones((5, 1)), np.arange(5.0))
    with pytest.raises(TaskError, match="constant"):
        Task.from_arrays(np.arange(20.0), np.full(20, 3.0))
    with pytest.raises(TaskError, match="X must be 2-D"):
        Split(np.zeros((2, 2, 2)), np.zeros(2))


def test_train_valid_is_deterministic_and_partitions_train():
    t = make(n=101)
    a_train, a_valid = t.train_valid(0.2, seed=3)
    b_train, b_valid = t.train_valid(0.2, seed=3)
    assert np.array_equal(a_train.X, b_train.X) and np.array_equal(a_valid.y, b_valid.y)
    assert a_valid.n == 20 and a_train.n == 81
    rows = {tuple(r) for r in np.vstack([a_train.X, a_valid.X])}
    assert rows == {tuple(r) for r in t.train.X}
    c_train, _ = t.train_valid(0.2, seed=4)
    assert not np.array_equal(a_train.X, c_train.X)
    with pytest.raises(TaskError):
        t.train_valid(1.0)


def test_card_contents_and_no_ground_truth():
    t = make(input_names=["x", "v"], input_descriptions=["position", "velocity"], target_name="a",
             target_description="acceleration", ground_truth="x + v", name="osc", domain="physics")
    card = t.card()
    for part in ("osc", "physics", "a: acceleration", "x: position", "v: velocity", "Rows: train 50", "std"):
        assert part in card
    assert "x + v" not in card


@pytest.mark.parametrize("max_chars", [300, 600, 1500])
def test_card_is_bounded_for_wide_tasks(max_chars):
    t = make(d=60, input_descriptions=["a rather long description of this input " * 4] * 60)
    card = t.card(max_chars=max_chars)
    assert len(card) <= max_chars
    assert card.startswith("Task: demo")


def test_card_keeps_rows_line_when_inputs_are_summarised():
    card = make(d=40).card(max_chars=700)
    assert "more inputs" in card and card.rstrip().endswith("Rows: train 50")


def test_to_dict_is_light_and_json_safe():
    t = make(metadata={"source": "unit"}, ground_truth="x0 + x1")
    d = t.to_dict()
    json.dumps(d)
    assert d["n_train"] == 50 and d["ground_truth"] == "x0 + x1" and d["metadata"] == {"source": "unit"}
    assert not any(isinstance(v, np.ndarray) for v in d.values())


def test_safe_identifier():
    assert safe_identifier("stress (MPa)") == "stress_MPa"
    assert safe_identifier("lambda") == "lambda_"
    assert safe_identifier("gamma") == "gamma_"
    assert safe_identifier("c3") == "c3_"
    assert safe_identifier("2x") == "x_2x"
    assert safe_identifier("g_") == "g_"
    assert safe_identifier("a", taken=["a"]) == "a_1"


def test_reserved_names_cover_engine_functions():
    from harness.core import expression
    assert set(expression.ALLOWED_FUNCTIONS) <= RESERVED_NAMES
    # every name a Task accepts is also accepted by the engine
    t = make(input_names=["gamma_", "T"])
    expression.parse_expression("gamma_ * T", t.input_names)
