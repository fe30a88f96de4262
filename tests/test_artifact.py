"""Frozen harness: default, round trip, tamper and version checks, no secrets, solve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import benchmarks
from harness.app.artifact import (
    DEFAULT_HARNESS_FILE,
    SCHEMA_VERSION,
    ArtifactError,
    FrozenHarness,
    find_secrets,
)
from harness.llm.config import LLMConfig
from tests.doubles import SCRIPTED
from workflows.params import WorkflowParams, expected_llm_calls, expected_solver_runs
from workflows.roles import ROLE_NAMES, default_prompts

ROOT = Path(__file__).resolve().parent.parent
TINY = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15,
        "unguided_run": False}  # the engine-only run is tested on its own


def test_default_is_our_prompts_and_baseline_workflow() -> None:
    h = FrozenHarness.default()
    assert h.workflow.as_tuple() == (0, 1, 0, 0, 0)  # Planner -> one SR run (chosen on training templates)
    assert h.sr_settings.unguided_run is True  # ... beside the engine's own unguided run
    assert h.sr_settings.time_budget == 60.0 and h.sr_settings.selection == "ladder"  # exact laws first ...
    assert h.sr_settings.precision_polish is True  # ... and the best few polished (docs/decisions.md)
    assert h.backend == "operon" and h.schema_version == SCHEMA_VERSION
    assert h.prompts == default_prompts() and set(h.prompts) == set(ROLE_NAMES)
    assert h.digest.startswith("sha256:") and h.digest == h.compute_digest()
    assert FrozenHarness.resolve("default") == h and FrozenHarness.resolve(None) == h


def test_shipped_default_matches_prompts_folder() -> None:
    """harness/data/default_harness.json is regenerated from prompts/ (scripts/make_default_harness.py)."""
    assert DEFAULT_HARNESS_FILE.is_file()
    rc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_default_harness.py"), "--check"],
                        capture_output=True, text=True, cwd=ROOT)
    assert rc.returncode == 0, rc.stdout + rc.stderr
    built = FrozenHarness.build_default()
    assert built.prompts == FrozenHarness.default().prompts


def test_round_trip_is_exact_and_atomic(tmp_path: Path) -> None:
    h = FrozenHarness.create(default_prompts(), (1, 3, 2, 1, 1), sr_settings={"time_budget": 3},
                             llm={"provider": "openai", "model": "qwen", "temperature": 0.2, "max_tokens": 300},
                             provenance={"training_tasks": ["a", "b"], "scores": {"stage2": 0.5, "bad": float("nan")},
                                         "solver_executions": 42, "seeds": [0, 1]})
    path = h.save(tmp_path / "sub" / "harness.json")
    assert [p.name for p in path.parent.iterdir()] == ["harness.json"]  # no temporary file left
    loaded = FrozenHarness.load(path)
    assert loaded == h and loaded.digest == h.digest
    assert loaded.workflow == WorkflowParams.from_tuple((1, 3, 2, 1, 1))
    assert loaded.sr_settings.time_budget == 3 and loaded.sr_settings.population_size == 500
    assert loaded.provenance["code_version"]["package"]  # package version recorded
    assert loaded.provenance["scores"]["bad"] == "nan"
    # saving again gives the same bytes (canonical content)
    assert h.save(tmp_path / "again.json").read_text() == path.read_text()
    changed = h.with_changes(prompts={**h.prompts, "planner": "Plan well."})
    assert changed.digest != h.digest and changed.digest == changed.compute_digest()


def _saved(tmp_path: Path) -> tuple[Path, dict]:
    path = FrozenHarness.default().save(tmp_path / "h.json")
    return path, json.loads(path.read_text())


@pytest.mark.parametrize("edit", [
    lambda d: d["prompts"].__setitem__("planner", d["prompts"]["planner"] + " Always use sin."),
    lambda d: d["workflow"].__setitem__("branches", 3),
    lambda d: d["sr_settings"].__setitem__("time_budget", 99.0),
    lambda d: d["llm"].__setitem__("temperature", 0.0),
])
def test_tampered_file_is_refused(tmp_path: Path, edit) -> None:
    path, data = _saved(tmp_path)
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="digest mismatch"):
        FrozenHarness.load(path)


def test_wrong_version_and_broken_files_are_refused(tmp_path: Path) -> None:
    path, data = _saved(tmp_path)
    path.write_text(json.dumps({**data, "schema_version": 2}))
    with pytest.raises(ArtifactError, match="schema_version 2 is not supported"):
        FrozenHarness.load(path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "schema_version"}))
    with pytest.raises(ArtifactError, match="schema_version None"):
        FrozenHarness.load(path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "digest"}))
    with pytest.raises(ArtifactError, match="no digest"):
        FrozenHarness.load(path)
    path.write_text(json.dumps({**data, "unexpected": 1}))
    with pytest.raises(ArtifactError, match="invalid harness"):
        FrozenHarness.load(path)
    path.write_text("{not json")
    with pytest.raises(ArtifactError, match="not a readable JSON"):
        FrozenHarness.load(path)
    with pytest.raises(ArtifactError, match="no such harness file"):
        FrozenHarness.load(tmp_path / "missing.json")
    with pytest.raises(ValidationError):
        FrozenHarness(prompts=default_prompts(), workflow=(0, 1, 0, 0, 0), schema_version=2)


def test_no_api_keys_are_stored(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "a" * 40)
    config = LLMConfig(provider="openai", model="gpt-x", base_url="http://localhost:1/v1", temperature=0.3)
    h = FrozenHarness.create(default_prompts(), (0, 1, 0, 0, 0), llm=config)
    assert h.llm == {"provider": "openai", "model": "gpt-x", "temperature": 0.3, "max_tokens": 512}
    text = h.save(tmp_path / "h.json").read_text()
    assert "sk-" not in text and "api_key" not in text
    for llm in ({"provider": "openai", "api_key": "abc"}, {"model": "m", "token": "xyz"},
                {"model": "sk-" + "b" * 30}, {"extra": {"headers": {"Authorization": "Bearer " + "c" * 30}}}):
        with pytest.raises(ValidationError, match="credential"):
            FrozenHarness(prompts=default_prompts(), workflow=(0, 1, 0, 0, 0), llm=llm)
    with pytest.raises(ValidationError, match="credential"):
        FrozenHarness.create(default_prompts(), (0, 1, 0, 0, 0), provenance={"note": "key hf_" + "d" * 30})
    assert find_secrets({"max_tokens": 5, "prompt_tokens": 3, "api_key_env": "OPENAI_API_KEY"}) == []


def test_validation_of_contents() -> None:
    prompts = default_prompts()
    with pytest.raises(ValidationError, match="unknown role"):
        FrozenHarness(prompts={**prompts, "critic": "x"}, workflow=(0, 1, 0, 0, 0))
    with pytest.raises(ValidationError, match="no prompt"):
        FrozenHarness(prompts={"planner": "p"}, workflow=(0, 1, 1, 0, 0))
    with pytest.raises(ValidationError, match="backend"):
        FrozenHarness(prompts=prompts, workflow=(0, 1, 0, 0, 0), backend="gplearn")
    with pytest.raises(ValidationError):
        FrozenHarness(prompts=prompts, workflow=(0, 1, 0, 0, 0), sr_settings={"tme_budget": 1})
    only_planner = FrozenHarness(prompts={"planner": "p"}, workflow=(0, 1, 0, 0, 0))
    assert only_planner.digest


def test_llm_config_merges_overrides() -> None:
    h = FrozenHarness.default()
    assert h.llm_config().provider == "local"
    config = h.llm_config({"provider": SCRIPTED, "temperature": None})
    assert config.provider == SCRIPTED and config.temperature == h.llm["temperature"]
    assert config.extra == {}  # the harness passes the config through; the double picks its own default
    assert h.llm_config({"provider": SCRIPTED, "extra": {"fn": "tests.doubles:respond"}}).extra["fn"] == "tests.doubles:respond"
    with pytest.raises(ValueError, match="unknown LLM provider"):
        h.llm_config({"provider": "scripted"})  # test doubles are not a provider name of the library
    assert h.llm_config(LLMConfig(provider=SCRIPTED, max_tokens=64)).max_tokens == 64


def test_solve_with_scripted_model(tmp_path: Path) -> None:
    task = benchmarks.load_suite("synthetic", names=["phys_osc_synth_00"], n_train=60, n_test=30, n_ood=30)[0]
    h = FrozenHarness.default()
    settings = {**TINY, "unguided_run": True}  # the shipped default's unguided run, at a tiny size
    sol = h.solve(task, llm={"provider": SCRIPTED}, sr_settings=settings, run_dir=tmp_path, seed=3)
    assert sol.equation and sol.status == "completed"
    assert sol.llm_calls == expected_llm_calls(h.workflow)
    assert sol.solver_runs == expected_solver_runs(h.workflow, h.sr_settings.updated(**settings)) == 2  # the unguided run and the seeded one
    assert set(sol.metrics) == {"train", "valid", "test_id", "test_ood"}
    assert list(sol.front.columns) == ["complexity", "loss", "score", "equation", "sympy_format"]
    assert sol.front["complexity"].is_monotonic_increasing and sol.latex
    assert {s.name for s in sol.sympy.free_symbols} <= set(task.input_names)
    pred = sol.predict(task.test_id.X)
    assert pred.shape == task.test_id.y.shape
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["expression"] == sol.equation and record["harness_digest"] == h.digest
    assert record["llm_calls"] == sol.llm_calls and (tmp_path / "nodes.jsonl").is_file()


def test_the_seeded_run_can_continue_the_unguided_population(tmp_path: Path) -> None:
    """SRSettings.continue_unguided: the guided run goes on from the unguided run's population."""
    task = benchmarks.load_suite("synthetic", names=["phys_osc_synth_00"], n_train=60, n_test=30, n_ood=30)[0]
    settings = {**TINY, "generations": 1000, "unguided_run": True, "continue_unguided": True}
    sol = FrozenHarness.default().solve(task, llm={"provider": SCRIPTED}, sr_settings=settings, run_dir=tmp_path)
    nodes = [json.loads(line) for line in (tmp_path / "nodes.jsonl").read_text().splitlines()]
    engine = {n["info"]["step"]: n["info"].get("engine", {}) for n in nodes if n["kind"] == "sr"}
    assert sol.status == "completed" and set(engine) == {"unguided", "initial"}
    assert "continued" not in engine["unguided"] and engine["initial"]["continued"].endswith("/0")


def test_a_file_from_before_a_new_setting_still_loads(tmp_path) -> None:
    """Settings added later (with defaults that keep the old behaviour) must not make old files look tampered."""
    import hashlib
    import json as _json

    path = FrozenHarness.build_default().save(tmp_path / "h.json")
    data = _json.loads(path.read_text())
    data["sr_settings"].pop("continue_search")  # as written by a version that had no such setting
    content = {k: v for k, v in data.items() if k != "digest"}
    blob = _json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    data["digest"] = "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
    path.write_text(_json.dumps(data))
    loaded = FrozenHarness.load(path)
    assert loaded.digest == data["digest"] and loaded.sr_settings.continue_search is False
    data["prompts"]["planner"] += " tampered"
    path.write_text(_json.dumps(data))
    with pytest.raises(ArtifactError, match="digest mismatch"):
        FrozenHarness.load(path)


def test_an_option_added_later_leaves_the_identity_of_harnesses_before_it_alone() -> None:
    """SRSettings.NEUTRAL: a later option at its neutral value is not part of a harness's identity, so the caches
    and frozen files of harnesses made before it keep their digest; set, it is part of it."""
    from workflows.harness import Harness, shipped_harness
    from workflows.params import SRSettings

    h = shipped_harness().with_sr_settings(**SRSettings.NEUTRAL)  # a harness from before the options
    assert set(SRSettings.NEUTRAL) <= set(SRSettings.model_fields)
    assert not set(SRSettings.NEUTRAL) & set(h.identity()["sr_settings"])
    for name, neutral in SRSettings.NEUTRAL.items():
        changed = h.with_sr_settings(**{name: not neutral if isinstance(neutral, bool) else neutral + 1})
        assert changed.identity_digest != h.identity_digest
    # stored before the options existed (the keys missing): loaded at the neutral values, whatever today's default,
    # so it behaves as it did and its digest still matches its seal
    old = h.to_dict()
    stored_digest = old.pop("digest")
    for name in SRSettings.NEUTRAL:
        del old["sr_settings"][name]
    loaded = Harness.from_dict(old)
    assert all(getattr(loaded.sr_settings, k) == v for k, v in SRSettings.NEUTRAL.items())
    assert loaded.identity_digest == stored_digest
    assert any(getattr(SRSettings(), k) != v for k, v in SRSettings.NEUTRAL.items())  # today's default differs
