"""The five roles: an optimisable instruction text each (``prompts/<role>.md``) and a fixed output schema.

Schemas are deliberately flat and bounded (every string has ``maxLength``, every array ``maxItems``): small local
models decode under a grammar built from the schema and loop forever on unbounded fields. Parsing is tolerant
(extra keys ignored, long lists and strings cut, out-of-range numbers clamped) because a role's output is advice, not a contract;
``harness.sr.plan_validation.validate_plan`` makes the final plan runnable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from harness.runtime.role_agent import RoleAgentConfig, coerce_role_agents

ROLE_NAMES: tuple[str, ...] = ("analyst", "planner", "diagnoser", "repairer", "synthesizer")
# The tools each role may be given as an agent (``RoleAgentConfig.tools``; stage 2 switches them on or off).
# None of them runs the SR engine: that stays the workflow's own step, so the solver-run count stays exact.
ROLE_TOOLS: dict[str, tuple[str, ...]] = {
    "analyst": ("summary_statistics", "correlations", "periodicity", "power_law"),
    "planner": ("evaluate_expression",),
    "diagnoser": ("residual_diagnostics", "evaluate_expression"),
    "repairer": ("evaluate_expression",),
    "synthesizer": ("evaluate_expression",),
}
# The sandboxed code tool (harness/tools/code_tools.py): for the roles whose job is reading the data; a switch of
# its own in stage 2 (``code_tool``), apart from the menus above.
CODE_TOOL = "run_python"
CODE_TOOL_ROLES: tuple[str, ...] = ("analyst", "diagnoser")
PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
INITIAL_PROMPTS_DIR = PROMPTS_DIR / "initial"


def role_tool_menu(role: str) -> tuple[str, ...]:
    """Every tool ``role`` may be given: its menu, plus the code tool where the role reads data."""
    return ROLE_TOOLS[role] + ((CODE_TOOL,) if role in CODE_TOOL_ROLES else ())

Op = Annotated[str, StringConstraints(max_length=12)]
Sentence = Annotated[str, StringConstraints(max_length=200)]
Formula = Annotated[str, StringConstraints(max_length=120)]
Feature = Annotated[str, StringConstraints(max_length=80)]


class RoleOutput(BaseModel):
    """Base of every role output: tolerant parsing, but a closed, fully required schema for the model."""

    model_config = ConfigDict(extra="ignore")

    @classmethod
    def role_schema(cls) -> dict[str, Any]:
        """JSON schema for ``response_format``: every field required, no extra keys, no titles (shorter prompt)."""
        schema = cls.model_json_schema()
        schema.pop("title", None)
        schema.pop("description", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
            prop.pop("default", None)
            prop.pop("description", None)  # described in the prompt's format text instead
        if "operators" in schema.get("properties", {}):  # a grammar-constrained model can only pick real names
            from harness.core.vocabulary import OPERATORS

            schema["properties"]["operators"]["items"]["enum"] = list(OPERATORS)
        schema["required"] = list(schema.get("properties", {}))
        schema["additionalProperties"] = False
        return schema

    @field_validator("*", mode="before")
    @classmethod
    def _tolerate(cls, value: Any, info: Any) -> Any:
        """Fit sloppy output into the schema instead of rejecting it: one string where a list is due becomes a
        one-item list, null the default, long lists and strings are cut to their limits (models without a grammar overshoot)."""
        if value is None:  # "missing_terms": null -> the field's default
            return cls.model_fields[info.field_name].get_default(call_default_factory=True)
        prop = _limits(cls).get(info.field_name, {})
        if prop.get("type") == "array":
            if isinstance(value, str):
                value = [value] if value.strip() else []
            if isinstance(value, list):
                limit = prop.get("items", {}).get("maxLength")
                value = [v[:limit] if limit and isinstance(v, str) else v for v in value[: prop["maxItems"]]]
        elif prop.get("type") == "string" and isinstance(value, str):
            value = value[: prop["maxLength"]]
        return value


_LIMIT_CACHE: dict[type, dict[str, Any]] = {}


def _limits(cls: type[RoleOutput]) -> dict[str, Any]:
    if cls not in _LIMIT_CACHE:
        _LIMIT_CACHE[cls] = cls.model_json_schema().get("properties", {})
    return _LIMIT_CACHE[cls]


class AnalystOutput(RoleOutput):
    """Findings from the data evidence, plus the operators and hypotheses they suggest."""

    findings: list[Sentence] = Field(default_factory=list, max_length=5, description="short findings, one sentence each")
    operators: list[Op] = Field(default_factory=list, max_length=10, description="operator names the search should allow")
    hypotheses: list[Formula] = Field(default_factory=list, max_length=3,
                                      description="candidate equations over the input names with constants c0, c1, ...")


class PlanOutput(RoleOutput):
    """What a role adds to one SR run: hypotheses (seed equations), extra operators, derived features.

    No engine knobs (length, time, population): the harness's SR settings are the floor of every run, and a small
    model asked for knobs shrinks the search. The rationale comes last and is short: if a small model runs out of
    tokens, the plan fields are already out.
    """

    hypotheses: list[Formula] = Field(default_factory=list, max_length=4,
                                      description="candidate equations over the input names with constants c0, c1, ...")
    operators: list[Op] = Field(default_factory=list, max_length=4,
                                description="extra operators the hypotheses need beyond + - * /, e.g. sin, exp")
    features: list[Feature] = Field(default_factory=list, max_length=2,
                                    description="optional derived inputs such as x*v or log(x)")
    rationale: str = Field("", max_length=160, description="one sentence: why these forms")

    def to_raw_plan(self) -> dict[str, Any]:
        """The fields in ``SearchPlan`` vocabulary (validated and widened to the floor later)."""
        raw: dict[str, Any] = {"seeds": list(self.hypotheses)}
        if self.operators:
            raw["operators"] = list(self.operators)
        if self.features:
            raw["features"] = list(self.features)
        return raw

    def summary(self, limit: int = 300) -> str:
        """One line for histories and shared results."""
        parts = []
        if self.hypotheses:
            parts.append("hypotheses=" + "; ".join(self.hypotheses))
        if self.operators:
            parts.append("extra ops=" + ",".join(self.operators))
        if self.features:
            parts.append("features=" + "; ".join(self.features))
        text = " ".join(parts) or "no hypotheses (engine defaults)"
        return text if len(text) <= limit else text[: limit - 3] + "..."


class RepairOutput(PlanOutput):
    """The revised plan; ``rationale`` says what changed and why."""


class SynthesisOutput(PlanOutput):
    """The merged final plan; ``rationale`` says which branches' findings were combined."""


class DiagnosisOutput(RoleOutput):
    """What is wrong with the branch's best equation, each issue backed by evidence."""

    issues: list[Sentence] = Field(default_factory=list, max_length=4, description="what is wrong, one sentence each")
    evidence: list[Sentence] = Field(default_factory=list, max_length=4,
                                     description="the metric or residual pattern each issue rests on")
    missing_terms: list[Formula] = Field(default_factory=list, max_length=3,
                                         description="suspected missing terms over the input names, e.g. c0*x1**2")

    def summary(self, limit: int = 400) -> str:
        parts = []
        if self.issues:
            parts.append("issues: " + "; ".join(self.issues))
        if self.missing_terms:
            parts.append("missing terms: " + "; ".join(self.missing_terms))
        text = " | ".join(parts) or "no issues reported"
        return text if len(text) <= limit else text[: limit - 3] + "..."


ROLE_OUTPUTS: dict[str, type[RoleOutput]] = {
    "analyst": AnalystOutput,
    "planner": PlanOutput,
    "diagnoser": DiagnosisOutput,
    "repairer": RepairOutput,
    "synthesizer": SynthesisOutput,
}


def salvage_truncated(text: str, model: type[RoleOutput], tries: int = 6) -> RoleOutput | None:
    """Recover a role output whose JSON was cut off (token limit): drop the unfinished last field and close the
    object. Why: plan fields come first, so a run-on rationale must not cost the whole plan."""
    start = text.find("{")
    if start < 0:
        return None
    body = text[start:]
    cut = len(body)
    for _ in range(tries):
        cut = body.rfind(",", 0, cut)
        if cut <= 0:
            return None
        try:
            return model.model_validate(json.loads(body[:cut] + "}"))
        except ValueError:
            continue
    return None


def format_text(role: str) -> str:
    """The output format in words (small models copy raw JSON-schema keywords into their answers)."""
    model = output_model(role)
    lines = []
    example: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        schema = model.role_schema()["properties"][name]
        if schema.get("type") == "array":
            limit = schema.get("items", {}).get("maxLength")
            kind = f"list of at most {schema['maxItems']} strings" + (f" (each under {limit} characters)" if limit else "")
            example[name] = []
        else:
            kind = f"string under {schema.get('maxLength')} characters"
            example[name] = ""
        lines.append(f'- "{name}": {kind}: {field.description or name}')
    return "\n".join(lines) + "\nShape: " + json.dumps(example)


def output_model(role: str) -> type[RoleOutput]:
    try:
        return ROLE_OUTPUTS[role]
    except KeyError:
        raise KeyError(f"unknown role {role!r}; roles are {', '.join(ROLE_NAMES)}") from None


def schema_name(role: str) -> str:
    """Name of the role's ``response_format`` schema (also how test doubles recognise the role)."""
    return f"{role}_output"


def response_format(role: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": schema_name(role), "schema": output_model(role).role_schema()}}


def fallback_output(role: str) -> RoleOutput:
    """What a role contributes when its output cannot be parsed: nothing new (engine defaults for plans)."""
    return output_model(role)()


def _read_prompts(folder: Path) -> dict[str, str]:
    missing = [r for r in ROLE_NAMES if not (folder / f"{r}.md").is_file()]
    if missing:
        raise FileNotFoundError(f"no prompt file for role(s) {missing} in {folder}; reinstall harness-sr")
    return {r: (folder / f"{r}.md").read_text(encoding="utf-8").strip() for r in ROLE_NAMES}


def default_prompts() -> dict[str, str]:
    """Our role instructions: ``workflows/prompts/<role>.md`` (package data, so installed copies have them)."""
    return _read_prompts(PROMPTS_DIR)


def initial_prompts() -> dict[str, str]:
    """HarnessSR's initial role prompts: what each role does and what it answers, nothing more (no field, no
    domain, no example); ``workflows/prompts/initial/<role>.md``. The optimizer's ``seed=initial`` starts here."""
    return _read_prompts(INITIAL_PROMPTS_DIR)


def role_agent_settings(raw: Any) -> dict[str, RoleAgentConfig]:
    """Validated ``{role: RoleAgentConfig}``: known roles only, each with tools from its own menu
    (``role_tool_menu``). A role not named runs as one structured call."""
    out = coerce_role_agents(raw, ROLE_NAMES)
    for role, cfg in out.items():
        menu = role_tool_menu(role)
        extra = sorted(set(cfg.tools) - set(menu))
        if extra:
            raise ValueError(f"role_agents.{role}: tools {extra} are not among {role}'s tools {list(menu)}")
    return out
