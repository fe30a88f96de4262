"""Config defaults have one source, the pydantic models: YAML files only override them (harness/app/config_store.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from harness.app.config_store import register_bases
from harness.llm.config import LLMConfig
from workflows.params import SRSettings

CONF = Path(__file__).resolve().parents[1] / "harness" / "conf"


@pytest.fixture(scope="module", autouse=True)
def bases():
    register_bases()


def _compose(config: str, *overrides: str):
    with initialize_config_module("harness.conf", version_base="1.3"):
        return compose(config, overrides=list(overrides))


@pytest.mark.parametrize("group", sorted(p.stem for p in (CONF / "llm").glob("*.yaml")))
def test_llm_files_only_say_what_differs_from_llmconfig(group: str) -> None:
    text = yaml.safe_load((CONF / "llm" / f"{group}.yaml").read_text())
    assert len(text) < len(LLMConfig.model_fields), "a group file restates the model's defaults"
    cfg = OmegaConf.to_container(_compose("agent", f"llm={group}", "data=x").llm, resolve=True)
    assert set(cfg) == set(LLMConfig.model_fields)  # the base fills in every field
    if group != "vllm":
        LLMConfig.model_validate(cfg)


@pytest.mark.parametrize("group", sorted(p.stem for p in (CONF / "backend").glob("*.yaml")))
def test_backend_files_get_every_sr_setting_from_the_model(group: str) -> None:
    cfg = OmegaConf.to_container(_compose("agent", f"backend={group}", "data=x").backend, resolve=True)
    assert cfg["name"] == group
    settings = SRSettings.model_validate({k: v for k, v in cfg.items() if k != "name"})
    assert settings.carry_seeds == SRSettings().carry_seeds  # not in any file: the model's default


def test_a_changed_model_default_reaches_the_config(monkeypatch) -> None:
    """The base is built from the model when registered, so a default exists once."""
    from harness.app import config_store

    class Wider(SRSettings):
        carry_seeds: int = 5

    monkeypatch.setattr(config_store, "SRSettings", Wider)
    config_store.register_bases()
    try:
        assert _compose("agent", "backend=operon", "data=x").backend.carry_seeds == 5
    finally:
        monkeypatch.undo()
        config_store.register_bases()
    assert _compose("agent", "backend=operon", "data=x").backend.carry_seeds == SRSettings().carry_seeds


def test_agent_and_solve_sections_come_from_the_models() -> None:
    from harness.core.context import Budget, FitSettings
    from harness.runtime.agent import AgentConfig

    agent = _compose("agent", "data=x")
    assert AgentConfig(**OmegaConf.to_container(agent.agent, resolve=True)).max_tokens == 512  # the one override
    assert FitSettings(**OmegaConf.to_container(agent.fit, resolve=True)) == FitSettings()
    assert Budget(**OmegaConf.to_container(agent.budget, resolve=True)) == Budget()
    solve = _compose("solve", "data=x", "budget.max_seconds=180")
    assert solve.budget.max_seconds == 180 and solve.budget.max_llm_calls is None


def test_one_definition_of_the_default(tmp_path) -> None:
    """The shipped file, the Hydra base entries (optimize with llm=local, backend=operon) and the optimizer's seed
    are the same harness: workflows.harness.shipped_harness()."""
    from harness.app.artifact import FrozenHarness
    from optimize.__main__ import register_config_bases
    from optimize.context import build_context
    from optimize.settings import OptimizeSettings
    from optimize.tasks import TaskSets
    from workflows.harness import shipped_harness

    register_config_bases()
    definition = shipped_harness()
    shipped = FrozenHarness.default()
    assert shipped.description() == definition
    assert shipped.identity_digest == definition.identity_digest
    cfg = OmegaConf.to_container(_compose("optimize"), resolve=True)
    backend = {k: v for k, v in cfg["backend"].items() if k != "name"}
    assert cfg["backend"]["name"] == definition.backend
    assert SRSettings.model_validate(backend) == definition.sr_settings
    ctx = build_context(tmp_path, OptimizeSettings.model_validate(cfg["optimize"]), llm_config=cfg["llm"],
                        backend_config=cfg["backend"], benchmark_config=cfg["benchmark"], llm=object(),
                        tasks=TaskSets([], []))
    assert ctx.default == definition and ctx.default.identity_digest == shipped.identity_digest
    # the optimizer starts from HarnessSR's initial harness: the same definition with the hand-made choices undone
    from workflows.harness import initial_harness

    assert ctx.base == initial_harness() and ctx.base.settings.time_budget == definition.settings.time_budget


def test_a_preset_replayed_with_other_sizes_is_the_preset_with_those_keys_changed() -> None:
    """``scripts/power_replay.py --set KEY=VALUE`` replays a preset with another size: ``load_preset`` applies
    dotted overrides over the preset (and validates them as the command line does)."""
    from pydantic import ValidationError

    from optimize.settings import load_preset

    quick = load_preset("quick")
    changed = load_preset("quick", ["stage2.race_pairs=12", "tasks.n_train=8"])
    assert (changed.stage2.race_pairs, changed.tasks.n_train) == (12, 8) != (quick.stage2.race_pairs,
                                                                          quick.tasks.n_train)
    assert changed.model_dump(exclude={"stage2", "tasks"}) == quick.model_dump(exclude={"stage2", "tasks"})
    assert changed.stage2.minibatch == quick.stage2.minibatch
    with pytest.raises(ValidationError):
        load_preset("quick", ["stage2.race_pairs=many"])
