"""What the workbench's operator sets when starting ``python -m harness serve``, and a request never can: the model
configurations a page picks by name, and the limits every request is held to.

Why on the server: a model configuration names code (a client class by import path), hosts (``base_url``), files
(``model_path``) and environment variables (``api_key_env``). Whoever may start runs must not choose those, or one
request could make the server send its secrets to any listener, read any file or import any module. Sources, in
order: the built-in names (``local`` and ``tiny``: the embedded models, nothing leaves the machine), a YAML
``--config`` file, ``--model`` and ``--limit`` flags. docs/workbench.md has the table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.llm.config import LLMConfig

CONF_LLM = Path(__file__).resolve().parents[2] / "conf" / "llm"
BUILTIN_MODELS = ("local", "tiny")  # the embedded models: offered when the operator names none
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


class ConfigError(ValueError):
    """The operator's configuration is wrong: one line naming the key (``serve`` exits with rc 2)."""


class ServeLimits(BaseModel):
    """Upper bounds on what one request may ask for; the operator raises them (``--limit key=value``)."""

    model_config = ConfigDict(extra="forbid")

    max_run_seconds: float = Field(1800.0, gt=0, description="budget.max_seconds of a run; also the budget of a "
                                                            "request that sets none")
    sr_time_factor: float = Field(4.0, ge=1, description="sr.time_budget and sr.residual_seconds at most the "
                                                       "harness's own time_budget times this")
    max_population: int = Field(2000, ge=2, description="sr.population_size")
    max_length: int = Field(50, ge=5, le=60, description="sr.max_length")
    max_tokens: int = Field(4096, ge=1, description="llm.max_tokens and agent.max_tokens")
    max_agent_steps: int = Field(60, ge=1, description="agent.R * C * L * K of an interactive agent run")
    max_runs_per_client: int = Field(4, ge=1, description="unfinished runs (queued or running) of one client "
                                                         "address; more is 429")


class ServeSettings(BaseModel):
    """The operator's model configurations (name -> full :class:`LLMConfig`), the default one and the limits."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, LLMConfig]
    default_model: str | None = Field(None, description="the model of a request that names none (default: the first)")
    limits: ServeLimits = Field(default_factory=ServeLimits)

    @field_validator("models", mode="before")
    @classmethod
    def _entries(cls, value: Any) -> Any:
        """An entry is a built-in group name (``tiny``) or a dict of LLMConfig fields, optionally extending a
        group (``{group: openai, base_url: ..., api_key_env: ...}``)."""
        if not isinstance(value, dict):
            return value
        out = {}
        for name, entry in value.items():
            if not MODEL_NAME.fullmatch(str(name)):
                raise ValueError(f"model name {name!r}: letters, digits, '_', '.', '-' (at most 40)")
            out[str(name)] = model_entry(entry)
        return out

    @model_validator(mode="after")
    def _default_is_configured(self) -> "ServeSettings":
        if not self.models:
            raise ValueError("models: configure at least one")
        if self.default_model is None:
            self.default_model = next(iter(self.models))
        elif self.default_model not in self.models:
            raise ValueError(f"default_model {self.default_model!r} is not one of the models: {', '.join(self.models)}")
        return self

    def names(self) -> list[str]:
        return list(self.models)

    def model(self, name: str | None) -> LLMConfig:
        """The configuration named ``name`` (None: the default); a KeyError says which names exist."""
        key = self.default_model if name is None else name
        if key not in self.models:
            raise KeyError(f"unknown model {name!r}; this server offers: {', '.join(self.models)}")
        return self.models[str(key)]


def llm_group(name: str) -> dict[str, Any]:
    """The ``llm=<name>`` config group file as a dict (its ``defaults`` chain merged, ``base`` left to the model)."""
    from omegaconf import OmegaConf

    path = CONF_LLM / f"{name}.yaml"
    if not str(name).replace("_", "").isalnum() or not path.is_file():
        raise ConfigError(f"unknown llm group {name!r}; known: {', '.join(groups())}")
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    assert isinstance(data, dict)
    merged: dict[str, Any] = {}
    for entry in data.pop("defaults", []) or []:
        if isinstance(entry, str) and entry not in ("base", "_self_"):
            merged.update(llm_group(entry))
    merged.update(data)
    return merged


def groups() -> list[str]:
    return sorted(p.stem for p in CONF_LLM.glob("*.yaml"))


def model_entry(entry: Any) -> Any:
    """A configured model as LLMConfig fields: a group name, or fields on top of an optional ``group``."""
    if isinstance(entry, str):
        return llm_group(entry)
    if isinstance(entry, dict) and "group" in entry:
        rest = {k: v for k, v in entry.items() if k != "group"}
        return {**llm_group(str(entry["group"])), **rest}
    return entry


def parse_model_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``--model NAME`` (a built-in group), ``NAME=GROUP`` or ``NAME=GROUP,key=value,...`` (values as YAML
    scalars: ``qwen=openai,model=Qwen2.5-7B,base_url=http://gpu1:8000/v1,api_key_env=VLLM_KEY``)."""
    import yaml

    head, *pairs = [p.strip() for p in spec.split(",")]
    name, _, group = head.partition("=")
    entry: dict[str, Any] = {"group": group.strip() or name.strip()}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--model {spec!r}: {pair!r} is not key=value")
        entry[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return name.strip(), entry


def parse_limit(spec: str) -> tuple[str, Any]:
    """``--limit key=value`` (a :class:`ServeLimits` field)."""
    import yaml

    key, sep, value = spec.partition("=")
    if not sep or key.strip() not in ServeLimits.model_fields:
        raise ConfigError(f"--limit {spec!r}: use key=value with a key of {', '.join(ServeLimits.model_fields)}")
    return key.strip(), yaml.safe_load(value)


def load_settings(config_file: str | Path | None = None, models: Sequence[str] = (),
                  limits: Sequence[str] = ()) -> ServeSettings:
    """The operator's settings: the file (``models``, ``default_model``, ``limits``), then the flags on top; the
    built-in models when neither names any. Every provider is checked without importing it (the operator may name
    a client class by import path; a typo is an error now, not at the first run)."""
    from harness.llm.factory import check_provider

    data: dict[str, Any] = {}
    if config_file is not None:
        data = _read_yaml(Path(config_file))
    data_models = dict(data.get("models") or {})
    for spec in models:
        name, entry = parse_model_spec(spec)
        data_models[name] = entry
    data["models"] = data_models or {name: name for name in BUILTIN_MODELS}
    data["limits"] = {**dict(data.get("limits") or {}), **dict(parse_limit(s) for s in limits)}
    try:
        settings = ServeSettings.model_validate(data)
    except ValidationError as exc:
        from harness.app.cli_support import config_error

        raise ConfigError(config_error(exc)) from None
    for name, config in settings.models.items():
        try:
            check_provider(config.provider)
        except ValueError as exc:
            raise ConfigError(f"models.{name}.provider: {exc}") from None
    return settings


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--config {str(path)!r}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {str(path)!r}: expected a mapping with models, default_model, limits")
    return data
