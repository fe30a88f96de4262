"""From the ``executor`` config group to a :class:`~harness.app.executor.SolveExecutor`.

Its own module so that the seam (``executor.py``) and the Ray implementation (``ray_executor.py``, which imports
the seam) form no import cycle; Ray itself is imported only when ``executor=ray`` is chosen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from harness.app.executor import ExecutorConfig, ExecutorError, LocalExecutor, SolveExecutor

CONF_DIR = Path(__file__).resolve().parents[1] / "conf" / "executor"


def make_executor(config: ExecutorConfig | Mapping[str, Any] | None = None, *, default_workers: int = 1
                  ) -> SolveExecutor:
    """The executor for an ``executor`` config (a mapping is validated first); Ray is imported only for ``ray``."""
    if config is None:
        config = ExecutorConfig()
    elif not isinstance(config, ExecutorConfig):
        config = ExecutorConfig.model_validate(dict(config))
    if config.name == "ray":
        from harness.app.ray_executor import RayExecutor

        return RayExecutor(config)
    return LocalExecutor(config.workers or default_workers)


def load_executor_config(name: str = "local", overrides: Mapping[str, Any] | None = None) -> ExecutorConfig:
    """The group file ``harness/conf/executor/<name>.yaml`` over the model's defaults, then ``overrides``
    (``executor.<key>=<value>`` items of a command line without Hydra, e.g. ``python -m benchmarks run``)."""
    from omegaconf import OmegaConf

    path = CONF_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONF_DIR.glob("*.yaml")))
        raise ExecutorError(f"unknown executor {name!r}: use one of {known}")
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    assert isinstance(data, dict)
    data.pop("defaults", None)
    if overrides:
        dotlist = [f"{k}={v}" for k, v in overrides.items()]
        data = OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(data), OmegaConf.from_dotlist(dotlist)),
                                      resolve=True)
    try:
        return ExecutorConfig.model_validate(data)
    except ValidationError as exc:
        raise ExecutorError(f"executor={name}: {exc}") from None


def split_executor_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], ExecutorConfig]:
    """(the other options, the executor config) from ``key=value`` options: ``executor=<name>`` and
    ``executor.<key>=<value>`` are the executor's (no suite option starts with ``executor``)."""
    rest: dict[str, Any] = {}
    name, overrides = "local", {}
    for key, value in options.items():
        if key == "executor":
            name = str(value)
        elif key.startswith("executor."):
            overrides[key.removeprefix("executor.")] = value
        else:
            rest[key] = value
    return rest, load_executor_config(name, overrides)
