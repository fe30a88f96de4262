"""LSR-Synth problems of LLM-SRBench: samples from ``lsr_bench_data.hdf5``, names, descriptions and ground truth
from the benchmark's own metadata (Hugging Face dataset ``nnheui/llm-srbench``, gated).

Where the files come from, first match wins: ``path=`` (the HDF5 file; metadata is read from a ``data/`` folder
beside it when present), ``folder=`` (a folder laid out like the hub repository: ``lsr_bench_data.hdf5`` and
``data/lsr_synth_<domain>-*.parquet``), the data root (``<root>/llm-srbench/``), else the hub: downloaded once
through ``huggingface_hub.snapshot_download`` into its cache (log in with ``huggingface-cli login``: the dataset
is gated). Offline, with nothing local, the error says which of these to give.

Samples: ``/lsr_synth/<domain>/<name>/<split>``, each a 2-D dataset whose column 0 is the target. The official
code names the splits ``train_data``, ``id_test_data``, ``ood_test_data``; ``train``, ``test``, ``ood_test`` are
accepted too. Metadata rows (``lsr_synth_<domain>`` splits): ``name``, ``symbols``, ``symbol_descs``,
``symbol_properties`` (``O`` the target, ``V`` an input, ``C`` a constant), ``expression``. The ground truth is
the expression over the inputs; constants named in it (property ``C``) are fitted to the training data and written
in (``metadata['truth_constants_fitted']``). Without metadata, names follow LLM-SRBench's defaults per domain
(phys_osc: ``dv_dt`` from ``x, t, v``); when the column count disagrees, inputs are ``x0..xN``
(``metadata['names_guessed']``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

import numpy as np

from benchmarks.sources._io import data_root
from harness.core.task import Split, Task, TaskError

# domain -> (target, target description, [(input, description), ...]) as in LLM-SRBench's data modules.
DOMAINS: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    "bio_pop_growth": ("dP_dt", "population growth rate", [("t", "time"), ("P", "population at time t")]),
    "chem_react": (
        "dA_dt",
        "rate of change of concentration in chemical reaction kinetics",
        [("t", "time"), ("A", "concentration at time t")],
    ),
    "matsci": ("sigma", "stress", [("epsilon", "strain"), ("T", "temperature")]),
    "phys_osc": (
        "dv_dt",
        "acceleration in a nonlinear harmonic oscillator",
        [("x", "position at time t"), ("t", "time"), ("v", "velocity at time t")],
    ),
}
DOMAIN_LABELS = {"bio_pop_growth": "biology", "chem_react": "chemistry", "matsci": "materials", "phys_osc": "physics"}
SPLIT_KEYS = {
    "train": ("train_data", "train"),
    "test_id": ("id_test_data", "test", "test_id", "id_test"),
    "test_ood": ("ood_test_data", "ood_test", "test_ood"),
}
FILENAME = "lsr_bench_data.hdf5"
HUB_REPO = "nnheui/llm-srbench"
HUB_PATTERNS = [FILENAME, "data/lsr_synth_*"]


def default_path(root: str | os.PathLike | None = None) -> Path:
    """Where the HDF5 file is looked for when no ``path=`` is given."""
    base = data_root(root)
    for candidate in (base / "llm-srbench" / FILENAME, base / FILENAME):
        if candidate.is_file():
            return candidate
    return base / "llm-srbench" / FILENAME


def expected_names(domain: str, root: str | os.PathLike | None = None) -> list[str]:
    """The official task names of a domain (from ``<data root>/lsr-synth-task-ids/<domain>.txt``), or []."""
    file = data_root(root) / "lsr-synth-task-ids" / f"{domain}.txt"
    if not file.is_file():
        return []
    return [line.strip() for line in file.read_text().splitlines() if line.strip()]


def _h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - h5py is a declared dependency
        raise TaskError("reading LSR-Synth needs h5py (pip install h5py)") from None
    return h5py


def hub_folder() -> Path:
    """The hub repository's files (HDF5 + metadata), downloaded once into huggingface_hub's cache."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a declared dependency
        raise TaskError("downloading LSR-Synth needs huggingface_hub (pip install huggingface_hub)") from None
    try:
        return Path(snapshot_download(repo_id=HUB_REPO, repo_type="dataset", allow_patterns=HUB_PATTERNS))
    except Exception as exc:  # noqa: BLE001 - offline, gated, unauthorised: one message that says what to do
        raise TaskError(
            f"could not get LSR-Synth from the Hugging Face dataset {HUB_REPO} ({type(exc).__name__}: "
            f"{str(exc)[:200]}); it is gated: accept its terms and run `huggingface-cli login`, or give a local "
            f"copy: path=<{FILENAME}> or folder=<a folder with {FILENAME} and data/lsr_synth_*.parquet>"
        ) from None


def locate(path: str | os.PathLike | None = None, folder: str | os.PathLike | None = None,
           root: str | os.PathLike | None = None, download: bool = True) -> tuple[Path, Path | None]:
    """(HDF5 file, folder holding ``data/lsr_synth_*.parquet`` or None) by the order in the module docstring."""
    if path is not None:
        file = Path(path)
        return file, file.parent if (file.parent / "data").is_dir() else None
    if folder is not None:
        base = Path(folder)
        if not (base / FILENAME).is_file():
            raise TaskError(f"folder {str(base)!r} has no {FILENAME} (lay it out like the hub repository {HUB_REPO})")
        return base / FILENAME, base
    local = default_path(root)
    if local.is_file() or not download:
        return local, local.parent if (local.parent / "data").is_dir() else None
    base = hub_folder()
    return base / FILENAME, base


def read_metadata(folder: Path | None) -> dict[tuple[str, str], dict]:
    """``{(domain, name): row}`` from ``data/lsr_synth_<domain>-*.parquet`` (empty without a folder)."""
    if folder is None:
        return {}
    import pandas as pd

    rows: dict[tuple[str, str], dict] = {}
    for file in sorted((folder / "data").glob("lsr_synth_*.parquet")):
        domain = next((d for d in DOMAINS if file.name.startswith(f"lsr_synth_{d}-")), None)
        if domain is None:
            continue
        try:
            frame = pd.read_parquet(file)
        except Exception as exc:  # noqa: BLE001 - a broken file is named, not a traceback
            raise TaskError(f"metadata file {str(file)!r} is not readable: {type(exc).__name__}: {exc}") from None
        for record in frame.to_dict("records"):
            rows[(domain, str(record.get("name")))] = {k: (list(v) if hasattr(v, "tolist") and not isinstance(v, str)
                                                         else v) for k, v in record.items()}
    return rows


def _open(path: str | os.PathLike | None, root: str | os.PathLike | None):
    file = Path(path) if path is not None else default_path(root)
    if not file.is_file():
        raise TaskError(
            f"LSR-Synth file {str(file)!r} not found; download {FILENAME} from the Hugging Face dataset "
            "nnheui/llm-srbench and pass path=<file> (or give no path: it is then downloaded)"
        )
    try:
        handle = _h5py().File(file, "r")
    except OSError as exc:
        raise TaskError(f"file {str(file)!r}: not a readable HDF5 file ({exc})") from None
    if "lsr_synth" not in handle:
        handle.close()
        raise TaskError(f"file {str(file)!r}: no /lsr_synth group (is this {FILENAME}?)")
    return file, handle


def list_lsr_synth(path: str | os.PathLike | None = None, *, root: str | os.PathLike | None = None) -> dict[str, list[str]]:
    """``{domain: [task names]}`` as stored in the file."""
    _, handle = _open(path, root)
    with handle:
        group = handle["lsr_synth"]
        return {d: sorted(group[d].keys(), key=_natural) for d in sorted(group.keys())}


def _natural(name: str) -> tuple:
    digits = "".join(ch for ch in name if ch.isdigit())
    return (name.rstrip("0123456789"), int(digits) if digits else -1, name)


def load_lsr_synth(
    path: str | os.PathLike | None = None,
    *,
    folder: str | os.PathLike | None = None,
    names: Iterable[str] | None = None,
    domains: Iterable[str] | None = None,
    root: str | os.PathLike | None = None,
    download: bool = True,
) -> list[Task]:
    """Tasks, optionally only ``domains`` and/or ``names`` (``"PO0"`` or ``"phys_osc/PO0"``); files as in the
    module docstring (``download=False``: never the hub)."""
    h5_file, meta_folder = locate(path, folder, root, download)
    metadata = read_metadata(meta_folder)
    file, handle = _open(h5_file, root)
    with handle:
        group = handle["lsr_synth"]
        present = {d: sorted(group[d].keys(), key=_natural) for d in sorted(group.keys())}
        wanted_domains = list(domains) if domains is not None else list(present)
        unknown = [d for d in wanted_domains if d not in present]
        if unknown:
            raise TaskError(f"file {str(file)!r}: domain(s) {unknown} not in /lsr_synth; present: {sorted(present)}")
        pairs = [(d, n) for d in wanted_domains for n in present[d]]
        if names is not None:
            wanted = list(names)
            pairs = [(d, n) for d, n in pairs if n in wanted or f"{d}/{n}" in wanted]
            found = {n for _, n in pairs} | {f"{d}/{n}" for d, n in pairs}
            missing = [n for n in wanted if n not in found]
            if missing:
                raise TaskError(f"file {str(file)!r}: task(s) {missing} not found in /lsr_synth")
        return [_task(file, d, n, group[d][n], metadata.get((d, n))) for d, n in pairs]


def _from_metadata(row: dict, n_inputs: int) -> tuple[tuple[str, str, list[tuple[str, str]]], list[str]] | None:
    """(target, its description, inputs) and the constant names from a metadata row, or None if it does not fit."""
    symbols = [str(s) for s in row.get("symbols") or []]
    descs = [str(d) for d in row.get("symbol_descs") or []] + [""] * len(symbols)
    props = [str(p) for p in row.get("symbol_properties") or []]
    if not symbols or len(props) != len(symbols):
        return None
    outputs = [i for i, p in enumerate(props) if p == "O"]
    inputs = [(symbols[i], descs[i]) for i, p in enumerate(props) if p == "V"]
    if len(outputs) != 1 or len(inputs) != n_inputs:
        return None
    constants = [symbols[i] for i, p in enumerate(props) if p == "C"]
    return (symbols[outputs[0]], descs[outputs[0]], inputs), constants


def _truth(expression: str, inputs: list[str], constants: list[str], train: Split) -> tuple[str | None, str]:
    """The metadata expression in our grammar, constants fitted to the training data; (None, why) if not."""
    from harness.core.evaluator import fit
    from harness.core.expression import ExpressionError, parse_expression

    text = str(expression or "").replace("^", "**")
    if not text.strip():
        return None, "no expression"
    for i, name in enumerate(sorted(constants, key=len, reverse=True)):  # longest first: no partial renames
        text = re.sub(rf"\b{re.escape(name)}\b", f"c{i}", text)
    try:
        expr = parse_expression(text, inputs)
    except ExpressionError as exc:
        return None, f"expression not in the grammar: {exc}"
    if not expr.n_params:
        return str(expr), ""
    result = fit(expr, train.X, train.y, n_starts=8, max_seconds=10.0)
    if result.status != "ok" or not result.metrics.get("r2", 0) > 0.999999:
        return None, f"constants could not be fitted to the data ({result.status})"
    return expr.to_string(result.params), "fitted"


def _task(file: Path, domain: str, name: str, group, meta: dict | None = None) -> Task:
    where = f"file {str(file)!r}, group /lsr_synth/{domain}/{name}"
    arrays: dict[str, np.ndarray] = {}
    for split, keys in SPLIT_KEYS.items():
        key = next((k for k in keys if k in group), None)
        if key is None:
            continue
        data = np.asarray(group[key][...], dtype=np.float64)
        if data.ndim != 2 or data.shape[1] < 2:
            raise TaskError(f"{where}: dataset {key!r} must be 2-D with >= 2 columns, got shape {data.shape}")
        arrays[split] = data
    if "train" not in arrays:
        raise TaskError(f"{where}: no train dataset (looked for {list(SPLIT_KEYS['train'])}); has {list(group.keys())}")
    widths = {s: a.shape[1] for s, a in arrays.items()}
    if len(set(widths.values())) != 1:
        raise TaskError(f"{where}: splits have different column counts {widths}")
    d = arrays["train"].shape[1] - 1
    from_meta = _from_metadata(meta, d) if meta else None
    constants: list[str] = []
    if from_meta is not None:
        (target, target_desc, inputs), constants = from_meta
    else:
        target, target_desc, inputs = DOMAINS.get(domain, ("y", "target", []))
    guessed = len(inputs) != d
    if guessed:
        inputs = [(f"x{i}", "") for i in range(d)]
    truth, truth_note = None, ""
    if from_meta is not None:
        truth, truth_note = _truth(meta.get("expression"), [n for n, _ in inputs], constants,
                                   Split(arrays["train"][:, 1:], arrays["train"][:, 0]))
    try:
        return Task(
            name=name,
            domain=DOMAIN_LABELS.get(domain, domain),
            input_names=[n for n, _ in inputs],
            input_descriptions=[desc for _, desc in inputs],
            target_name=target,
            target_description=target_desc,
            train=Split(arrays["train"][:, 1:], arrays["train"][:, 0]),
            test_id=Split(arrays["test_id"][:, 1:], arrays["test_id"][:, 0]) if "test_id" in arrays else None,
            test_ood=Split(arrays["test_ood"][:, 1:], arrays["test_ood"][:, 0]) if "test_ood" in arrays else None,
            ground_truth=truth,
            metadata={
                "source": "lsr_synth",
                "path": str(file),
                "group": f"/lsr_synth/{domain}/{name}",
                "lsr_domain": domain,
                "names_from": "metadata" if from_meta is not None else "built-in defaults",
                "names_guessed": guessed,
                **({"expression": meta.get("expression"), "truth_constants_fitted": truth_note == "fitted"}
                   if from_meta is not None else {}),
                **({"truth_note": truth_note} if truth is None and truth_note else {}),
                **(
                    {"note": f"{d} input columns where {domain} expects {len(DOMAINS.get(domain, ('', '', []))[2])}; "
                     "inputs named x0..xN"}
                    if guessed
                    else {}
                ),
            },
        )
    except TaskError as exc:
        raise TaskError(f"{where}: {exc}") from None
