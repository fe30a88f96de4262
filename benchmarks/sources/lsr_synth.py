"""LSR-Synth problems of LLM-SRBench from its HDF5 file ``lsr_bench_data.hdf5`` (gated: nnheui/llm-srbench).

Layout: ``/lsr_synth/<domain>/<name>/<split>``, each a 2-D dataset whose column 0 is the target. The official
benchmark code names the splits ``train_data``, ``id_test_data``, ``ood_test_data``; the shorter ``train``,
``test``, ``ood_test`` are accepted too. Variable names follow LLM-SRBench's own defaults per domain (e.g.
phys_osc: ``dv_dt`` from ``x, t, v``); when a file's column count disagrees, inputs fall back to ``x0..xN`` and
``metadata['names_guessed']`` says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import numpy as np

from benchmarks.sources._io import data_root
from harness.task import Split, Task, TaskError

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


def _open(path: str | os.PathLike | None, root: str | os.PathLike | None):
    file = Path(path) if path is not None else default_path(root)
    if not file.is_file():
        raise TaskError(
            f"LSR-Synth file {str(file)!r} not found; download {FILENAME} from the Hugging Face dataset "
            "nnheui/llm-srbench and pass path=<file>"
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
    names: Iterable[str] | None = None,
    domains: Iterable[str] | None = None,
    root: str | os.PathLike | None = None,
) -> list[Task]:
    """Tasks from the HDF5 file, optionally only ``domains`` and/or ``names`` (``"PO0"`` or ``"phys_osc/PO0"``)."""
    file, handle = _open(path, root)
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
        return [_task(file, d, n, group[d][n]) for d, n in pairs]


def _task(file: Path, domain: str, name: str, group) -> Task:
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
    target, target_desc, inputs = DOMAINS.get(domain, ("y", "target", []))
    guessed = len(inputs) != d
    if guessed:
        inputs = [(f"x{i}", "") for i in range(d)]
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
            metadata={
                "source": "lsr_synth",
                "path": str(file),
                "group": f"/lsr_synth/{domain}/{name}",
                "lsr_domain": domain,
                "names_guessed": guessed,
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
