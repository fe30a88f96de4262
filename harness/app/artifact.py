"""The frozen harness: one JSON file holding everything a solve needs, and the solve itself.

Why a content digest: the file is the unit that is trained once and reused everywhere, so an edited prompt or
workflow must not silently pass as the trained one. ``load`` refuses a file whose digest does not match or whose
schema version this code does not read. LLM settings are stored (they change results), API keys never are.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Sequence

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from harness.sr.settings import DEFAULT_BACKEND
from harness.app.solution import Solution
from harness.core.jsonio import json_safe, write_text_atomic
from workflows.harness import STARTING_HARNESSES, Harness, run_harness, shipped_harness
from workflows.identity import llm_identity
from workflows.params import SRSettings, WorkflowParams

SCHEMA_VERSION = 1
DEFAULT_HARNESS_FILE = Path(__file__).resolve().parents[1] / "data" / "default_harness.json"

_SECRET_KEY = re.compile(
    r"^(.*[_-])?(api[_-]?key|apikey|secret|secret[_-]?key|password|passwd|token|access[_-]?token|auth[_-]?token|"
    r"bearer|authorization|credentials?|private[_-]?key)$",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_-]{30,}|Bearer\s+[A-Za-z0-9._-]{16,})"
)


class ArtifactError(ValueError):
    """A harness file that cannot be used: unreadable, wrong schema version, invalid, or modified after saving."""


def find_secrets(obj: Any, where: str = "") -> list[str]:
    """Paths of entries that look like credentials (by key name or by value shape)."""
    found: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = f"{where}.{key}" if where else str(key)
            if _SECRET_KEY.match(str(key)) and value not in (None, "", False):
                found.append(path)
            else:
                found += find_secrets(value, path)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            found += find_secrets(value, f"{where}[{i}]")
    elif isinstance(obj, str) and _SECRET_VALUE.search(obj):
        found.append(where or "value")
    return found


def code_version() -> dict[str, str | None]:
    """Package version and ``git describe`` of the source tree (when it is a git checkout)."""
    try:
        from importlib.metadata import version

        package = version("harness-sr")
    except Exception:
        package = None
    git = None
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=root, capture_output=True,
                             text=True, timeout=5)
        git = out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"package": package, "git": git}


def _digest_of(content: dict[str, Any]) -> str:
    blob = json.dumps(json_safe(content), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


class FrozenHarness(Harness):
    """A :class:`workflows.harness.Harness` + provenance, sealed by a digest: the file a trained harness is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    provenance: dict[str, Any] = Field(default_factory=dict)
    digest: str = ""

    # -- validation -----------------------------------------------------------------------------------------
    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != SCHEMA_VERSION:
            raise ValueError(f"schema_version {v} is not supported (this code reads version {SCHEMA_VERSION})")
        return v

    @field_validator("llm", "provenance", mode="before")
    @classmethod
    def _plain(cls, v: Any) -> Any:
        return json_safe(v)

    @model_validator(mode="after")
    def _check(self) -> "FrozenHarness":
        secrets = find_secrets({"llm": self.llm, "sr_settings": self.sr_settings.model_dump(mode="json"),
                                "provenance": self.provenance})
        if secrets:
            raise ValueError(f"refusing to store what looks like a credential at {', '.join(secrets)}; "
                             "keep API keys in the environment (LLMConfig.api_key_env)")
        if not self.digest:
            object.__setattr__(self, "digest", self.compute_digest())
        return self

    def with_changes(self, **changes: Any) -> "FrozenHarness":
        """A validated copy with some fields replaced and a fresh digest (``model_copy`` would keep the old one)."""
        data = self.model_dump(exclude={"digest"})
        data.update(changes)
        return FrozenHarness(**data)

    # -- digest and files -----------------------------------------------------------------------------------
    def content(self) -> dict[str, Any]:
        """Everything but the digest, as plain JSON (no ``role_agents`` key when there are none and no later SR
        option at its neutral value, so harnesses frozen before them keep their digest)."""
        data = json_safe(self.model_dump(mode="json", exclude={"digest"}))
        if not data.get("role_agents"):
            data.pop("role_agents", None)
        # an SR option added after files were frozen, at its neutral value, is left out of the file as it is of
        # the identity (workflows.harness.Harness.identity), so the files that came before it keep their digest
        data["sr_settings"] = {k: v for k, v in data["sr_settings"].items()
                               if k not in SRSettings.NEUTRAL or v != SRSettings.NEUTRAL[k]}
        return data

    def compute_digest(self) -> str:
        return _digest_of(self.content())

    def to_json(self) -> str:
        data = {**self.content(), "digest": self.compute_digest()}
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (temporary file + rename), so a reader never sees half a harness."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, self.to_json())
        return path

    @classmethod
    def from_dict(cls, data: Any, source: str = "harness") -> "FrozenHarness":
        """Validate a loaded mapping: schema version first, then fields, then the digest."""
        if not isinstance(data, dict):
            raise ArtifactError(f"{source}: expected a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ArtifactError(f"{source}: schema_version {version!r} is not supported; this code reads "
                                f"version {SCHEMA_VERSION} (re-export the harness with a matching code version)")
        stored = data.get("digest")
        if not stored:
            raise ArtifactError(f"{source}: no digest; the file was not written by FrozenHarness.save")
        try:
            harness = cls.model_validate(data)
        except ValidationError as exc:
            raise ArtifactError(f"{source}: invalid harness: {exc}") from None
        # Checked over the content as stored: a setting added to the code later (with a default that keeps the
        # old behaviour) must not make every earlier file look tampered with. The file's digest stays its identity.
        actual = _digest_of({k: v for k, v in data.items() if k != "digest"})
        if actual != stored:
            raise ArtifactError(f"{source}: digest mismatch (stored {stored[:19]}..., content {actual[:19]}...): "
                                "the file was modified after it was saved; refusing to use it")
        return harness

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FrozenHarness":
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ArtifactError(f"{path}: no such harness file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ArtifactError(f"{path}: not a readable JSON file ({exc})") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def resolve(cls, spec: "FrozenHarness | str | os.PathLike | None") -> "FrozenHarness":
        """``default`` (or None), ``initial``, a path, or a harness: what ``harness=...`` means in configs, the
        regressor, the benchmark runner and the scripts."""
        if isinstance(spec, FrozenHarness):
            return spec
        if spec is None or str(spec) == "default":
            return cls.default()
        if str(spec) in STARTING_HARNESSES:
            return cls.named(str(spec))
        return cls.load(spec)

    @classmethod
    def named(cls, name: str) -> "FrozenHarness":
        """A starting harness of ``workflows.harness.STARTING_HARNESSES`` frozen untrained (``initial``: HarnessSR's
        start, for side-by-side runs with it). Its provenance names the code, not a git state, so its digest is
        the same on every checkout of the same code (a benchmark folder keyed on it resumes across commits)."""
        if name == "default":
            return cls.default()
        return cls.from_harness(STARTING_HARNESSES[name](), {
            "source": f"workflows.harness.{STARTING_HARNESSES[name].__name__}(), not trained",
            "training_tasks": [], "scores": {}, "solver_executions": 0, "seeds": [],
            "code_version": {"package": code_version()["package"], "git": None}})

    # -- construction ---------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        prompts: dict[str, str],
        workflow: WorkflowParams | tuple[int, ...],
        *,
        backend: str = DEFAULT_BACKEND,
        sr_settings: SRSettings | dict[str, Any] | None = None,
        llm: Any = None,
        provenance: dict[str, Any] | None = None,
        role_agents: dict[str, Any] | None = None,
    ) -> "FrozenHarness":
        """A new harness; ``llm`` may be an LLMConfig or dict (only the settings that matter are kept) and the
        code version is added to the provenance."""
        prov = dict(provenance or {})
        prov.setdefault("code_version", code_version())
        return cls(prompts=dict(prompts), workflow=workflow, backend=backend, sr_settings=sr_settings or {},
                   llm=llm_identity(llm), provenance=prov, role_agents=dict(role_agents or {}))

    @classmethod
    def from_harness(cls, harness: Harness, provenance: dict[str, Any] | None = None) -> "FrozenHarness":
        """Freeze a description: the same harness with its provenance (and the code version) and a seal."""
        return cls.create(harness.prompts, harness.workflow, backend=harness.backend,
                          sr_settings=harness.sr_settings, llm=harness.llm, provenance=provenance,
                          role_agents=harness.role_agents)

    @classmethod
    def build_default(cls) -> "FrozenHarness":
        """The shipped harness (``workflows.harness.shipped_harness``), frozen untrained: what
        ``scripts/make_default_harness.py`` writes when no optimizer run is named."""
        return cls.from_harness(shipped_harness(), {
            "source": "workflows.harness.shipped_harness(), not trained",
            "hand_choice": "each setting chosen by measurement on training templates (docs/decisions.md); no "
                           "optimizer run has beaten it yet (freeze gates every trained harness against it)",
            "training_tasks": [], "scores": {}, "solver_executions": 0, "seeds": []})

    @classmethod
    def default(cls) -> "FrozenHarness":
        """The shipped ``harness/data/default_harness.json``; built from prompts/ when the file is missing."""
        if DEFAULT_HARNESS_FILE.is_file():
            return cls.load(DEFAULT_HARNESS_FILE)
        return cls.build_default()

    # -- solving --------------------------------------------------------------------------------------------
    def llm_config(self, override: Any = None) -> Any:
        """The LLMConfig to solve with: the harness's settings, overridden by ``override`` (dict or LLMConfig)."""
        from harness.llm.config import LLMConfig

        data = dict(self.llm)
        if isinstance(override, LLMConfig):
            data.update(override.model_dump(exclude_unset=True))
        elif override:
            data.update({k: v for k, v in dict(override).items() if v is not None})
        data = {k: v for k, v in data.items() if k in LLMConfig.model_fields and v is not None}
        config = LLMConfig.model_validate(data)
        return config

    def solve(
        self,
        task: Any,
        *,
        llm: Any = None,
        llm_config: Any = None,
        backend: str | None = None,
        budget: Any = None,
        run_dir: str | os.PathLike | None = None,
        seed: int = 0,
        sr_settings: dict[str, Any] | None = None,
        max_workers: int | None = None,
        on_node: Any = None,
        warm_start: Sequence[str] = (),
        control: Any = None,
    ) -> Solution:
        """Run this harness's workflow on ``task`` and return the selected equation.

        ``llm``: a client (used as is), or an LLMConfig/dict (like ``llm_config``); by default a client is built
        from the harness's LLM settings. ``sr_settings`` overrides single SR settings (e.g. a shorter time).
        ``warm_start``: equations to refit and seed into the first SR runs (a previous front).
        ``control``: a ``harness.runtime.interaction.RunControl`` to steer the run (guidance, pause, stop).
        """
        from harness.llm.base import LLMClient
        from harness.llm.factory import make_llm

        if llm is not None and not isinstance(llm, LLMClient) and hasattr(llm, "complete"):
            client, owned = llm, False  # duck-typed client
        elif isinstance(llm, LLMClient):
            client, owned = llm, False
        else:
            client, owned = make_llm(self.llm_config(llm if llm is not None else llm_config)), True
        try:
            result = run_harness(self, task, client, seed=seed, sr_settings=sr_settings, backend=backend,
                                 budget=budget, run_dir=run_dir, max_workers=max_workers, on_node=on_node,
                                 warm_start=warm_start, control=control)
        finally:
            if owned:
                client.close()
        solution = Solution.from_result(result, task, harness_digest=self.digest)
        if result.run_dir is not None:
            solution.write_result(result.run_dir / "result.json", result.state.result() if result.state else {})
        return solution
