"""Term combination (harness.core.combine): the model's terms and the engine's meet in one refitted equation,
and only a clearly better fit joins the pool."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import sympy

import benchmarks
from harness.core.combine import CombineSettings, additive_terms, combine_terms
from harness.core.context import AgentContext, evaluate_candidate
from harness.core.expression import parse_expression
from harness.core.task import Split
from tests.doubles import ScriptedLLM, detect_role, scripted_role_output
from workflows.runner import run_workflow


@pytest.fixture(scope="module")
def task():
    # truth: -0.848*A + 0.137*A**2*exp(-0.492*t)
    return benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=200, n_test=60, n_ood=60)[0]


def test_terms_are_expanded_and_stripped_of_their_factors() -> None:
    expr = parse_expression("2.5*x*(y + sin(0.3*x)) - 4 + 0.1*exp(-y)", ["x", "y"]).sympy
    terms = {str(t) for t in additive_terms(expr)}
    assert {"x*y", "x*sin(0.3*x)", "exp(-y)"} <= terms
    assert not any(sympy.sympify(t).is_number for t in terms)  # the intercept is always offered, never a term


def test_terms_from_two_equations_make_the_law(task) -> None:
    """The engine's equation has the first-order term, a poor hypothesis has the decaying one: together exact."""
    ctx = AgentContext(task=task, seed=0)
    engine = evaluate_candidate("c0*A + c1*t", ctx, constants_as_params=True, source="operon")
    hypothesis = evaluate_candidate("c0*A**2*exp(-c1*t)", ctx, constants_as_params=True, source="hypothesis")
    assert engine.metric("valid") > 1e-4 and hypothesis.metric("valid") > 1e-5
    found, info = combine_terms([engine, hypothesis], ctx)
    assert found and info["kept"] == len(found) and info["library"] >= 3
    best = min(found, key=lambda c: c.sort_key())
    assert best.metric("valid") < 1e-20 and best.metrics["test_ood"]["acc_0.001"] == 1.0
    assert best.source == "combination" and best.info["terms_from"] == ["hypothesis", "operon"]


def test_a_pool_that_holds_the_law_gets_nothing_new(task) -> None:
    """No combination can beat an exact fit by the required factor, so the pool stays as the search left it."""
    ctx = AgentContext(task=task, seed=0)
    exact = evaluate_candidate("c0*A + c1*A**2*exp(c2*t)", ctx, constants_as_params=True, source="operon")
    other = evaluate_candidate("c0*t + c1*A**3", ctx, constants_as_params=True, source="hypothesis")
    found, _ = combine_terms([exact, other], ctx)
    assert found == []


def test_noise_terms_do_not_join(task) -> None:
    """On a target that is noise, extra terms lower the error a little at best: never by the required factor."""
    rng = np.random.default_rng(0)

    def noise(split: Split | None) -> Split | None:
        return None if split is None else Split(split.X, rng.normal(size=split.y.size))

    noisy = replace(task, train=noise(task.train), test_id=noise(task.test_id), test_ood=noise(task.test_ood))
    ctx = AgentContext(task=noisy, seed=0)
    pool = [evaluate_candidate(text, ctx, constants_as_params=True, source="operon")
            for text in ("c0*A + c1*t", "c0*sin(c1*t) + c2*A**2", "c0*exp(-c1*t)*A + c2*t**2")]
    found, info = combine_terms(pool, ctx)
    assert found == [] and info["library"] >= 4


def test_hostile_terms_are_skipped_and_time_is_bounded(task) -> None:
    ctx = AgentContext(task=task, seed=0)
    good = evaluate_candidate("c0*A + c1*t", ctx, constants_as_params=True, source="operon")
    huge = good.__class__(expression="exp(exp(t*10))", params=[], equation="exp(exp(10*t))", complexity=5,
                          metrics={"valid": {"nmse": 0.5}}, source="hypothesis")
    broken = good.__class__(expression="A", params=[], equation="A +* t", complexity=1,
                            metrics={"valid": {"nmse": 0.5}}, source="hypothesis")
    found, info = combine_terms([good, huge, broken], ctx)
    assert info["library"] == 2  # A and t; the overflowing term and the unparseable equation are left out
    found, info = combine_terms([good], ctx, CombineSettings(max_seconds=0.0))
    assert found == [] and info["refits"] == 0


def test_a_workflow_combines_the_terms_of_a_hypothesis_too_poor_alone(task, tmp_path) -> None:
    """The first-order term only appears in a hypothesis dropped before the engine (too poor alone); the decaying
    term in one that was kept: the combine node joins them into the law (whatever the 1 s engine run finds)."""
    def planner(messages, **request):
        if detect_role(messages, request.get("response_format")) == "planner":
            return json.dumps({"hypotheses": ["c0*A**2*exp(-c1*t) + c2*t**3", "c0*A + c1*t"], "operators": []})
        return scripted_role_output(messages, **request)

    settings = {"time_budget": 1, "population_size": 20, "generations": 2, "max_length": 5,
                "operators": ["add", "sub", "mul"], "hypothesis_max_nmse": 0.005, "combine_terms": True,
                "unguided_run": False, "sparse_regression": False,
                "precision_polish": False}  # the combination's own pick, not its polish
    result = run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=planner), sr_settings=settings,
                          run_dir=tmp_path)
    sr = next(n for n in result.state.nodes if n.kind == "sr")
    assert any("dropped" in note for note in sr.info["hypothesis_notes"])  # c0*A + c1*t did not join alone
    node = next(n for n in result.state.nodes if n.kind == "combine")
    assert node.info["library"] >= 3 and node.info["guided_terms"] >= 3 and "hypothesis" in node.info["terms_from"]
    assert result.best is not None and result.best.source == "combination"
    assert result.best.metric("valid") < 1e-12
    lines = [json.loads(line) for line in (tmp_path / "nodes.jsonl").read_text().splitlines()]
    assert any(rec["kind"] == "combine" and rec["candidates"] for rec in lines)
    off = run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=planner),
                       sr_settings={**settings, "combine_terms": False})
    assert not any(n.kind == "combine" for n in off.state.nodes)
