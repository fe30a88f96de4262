"""What the commands share: reading tasks and config sections, run folders, config errors, keys kept out of logs.

Its own module so a command body (``solve_cli``) and the command registry (``cli``) both use it without a cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "openai")


def quiet_http_logs() -> None:
    """Hydra logs at INFO; the HTTP clients under the openai SDK would then print a line per request."""
    import logging

    for name in HTTP_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def refuse_pasted_keys(overrides: list[str]) -> str | None:
    """A message when an override puts a key where an environment variable's name belongs.

    Checked before Hydra starts, because Hydra writes every override to ``.hydra/*.yaml`` in the run folder."""
    from harness.llm.config import looks_like_key

    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+~").endswith("api_key_env") and looks_like_key(value.strip().strip("'\"")):
            return ("llm.api_key_env must be the NAME of an environment variable holding the key (for example "
                    "OPENAI_API_KEY), not the key itself; export the key and pass its name")
    return None


def config_error(exc: Exception, section: str = "") -> str:
    """One line naming the key for a pydantic error (never the value: it may be a secret), else the message."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in (section, *err.get("loc", ())) if x != "")
            parts.append(f"{loc}: {err.get('msg', 'invalid')}")
        return "; ".join(parts)
    return str(exc)



def load_task(
    data: str,
    target: str | None = None,
    name: str | None = None,
    *,
    inputs: list[str] | None = None,
    descriptions: dict[str, str] | None = None,
) -> Any:
    """A task from a CSV file or a task folder (``train.csv`` [``test_id.csv`` ``test_ood.csv``] [``task.json``]).

    CSV: ``target`` column (default the last), ``inputs`` (default every other column). Folder: the target is the
    last column of ``train.csv``; ``target``, when given, must name it. ``descriptions`` (column -> text, the target
    included) override those of ``task.json``. A column name that is not in the data is a TaskError naming it."""
    path = Path(data).expanduser()
    if path.is_dir():
        from benchmarks.sources import llm_sr

        if inputs is not None:
            raise ValueError(f"data={data!r} is a task folder, whose inputs are every column of train.csv but the "
                             "last; inputs= selects columns of a CSV file")
        task = llm_sr.load_folder(path, name=name, descriptions=descriptions)
        if target is not None:
            original = {new: old for old, new in task.metadata.get("renamed_columns", {}).items()}
            last = original.get(task.target_name, task.target_name)
            if str(target) not in (last, task.target_name):
                raise ValueError(f"target={target!r}: a task folder's target is the last column of train.csv, "
                                 f"{last!r}")
        return task
    if path.is_file():
        from benchmarks.sources import table

        if target is None:
            target = _last_column(path)
        return table.load_table(path, target=str(target), name=name, inputs=inputs, descriptions=descriptions)
    raise FileNotFoundError(f"data={data!r}: no such file or folder")


def column_map(value: Any, key: str) -> dict[str, str] | None:
    """``describe={x: "position", t: "time"}`` as a plain dict of strings (None when not given)."""
    if value is None:
        return None
    if isinstance(value, DictConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a mapping of column to text, e.g. '{key}={{x: \"position\", t: \"time\"}}'"
                         f", got {value!r}")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def column_list(value: Any, key: str) -> list[str] | None:
    """``inputs=[x,t]`` as a list of column names (None when not given)."""
    if value is None:
        return None
    if isinstance(value, ListConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{key} must be a list of column names, e.g. '{key}=[x,t]', got {value!r}")
    return [str(v) for v in value]


def print_error(console: Any, exc: BaseException | str) -> None:
    """``error: <message>`` on one line: never wrapped at the terminal's width, never read as rich markup."""
    from rich.text import Text

    console.print(Text.assemble(("error:", "red"), " ", str(exc)), soft_wrap=True)


def _last_column(path: Path) -> str:
    """Header's last column of a CSV file (the LLM-SR convention for the target)."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh), [])
    if not header:
        raise ValueError(f"data={str(path)!r}: empty file; pass target=<column>")
    return header[-1].strip()


def run_dir_of(cfg: DictConfig) -> Path:
    """This job's output folder: ``out`` for a single run, ``out/<job number>`` in a Hydra multirun."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # called outside a Hydra app (tests)
        return Path(cfg.out)


def plain(cfg: DictConfig, key: str) -> dict[str, Any]:
    """A config section as a plain dict (for pydantic / dataclass construction)."""
    section = cfg.get(key)
    return dict(OmegaConf.to_container(section, resolve=True)) if section is not None else {}
