"""Assembly of a chunked embedded model: verified file from good parts, clear errors otherwise, cache reuse."""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

import pytest

from harness.llm import models
from harness.llm.base import LLMError
from harness.llm.models import (
    ChunkedModel,
    assemble,
    cache_dir,
    embedded_model_path,
    resolve_model_name,
)


def _fake_parts(root: Path, module: str, chunks: list[bytes]) -> None:
    for i, data in enumerate(chunks, start=1):
        pkg = root / f"{module}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    importlib.invalidate_caches()


@pytest.fixture()
def fake_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ChunkedModel, list[bytes], Path]:
    module = f"fake_model_part_{os.getpid()}_{abs(hash(tmp_path)) % 10**8}_"
    chunks = [os.urandom(1000 + 37 * i) for i in range(3)]
    site = tmp_path / "site"
    _fake_parts(site, module, chunks)
    monkeypatch.syspath_prepend(str(site))
    model = ChunkedModel(name="fake", filename="fake.gguf", package="fake-model-part", module=module, parts=3,
                         sha256=hashlib.sha256(b"".join(chunks)).hexdigest(), version="0.0.1")
    return model, chunks, tmp_path / "cache"


def test_good_parts_give_a_verified_file_and_a_second_call_reuses_it(fake_model, monkeypatch) -> None:
    model, chunks, root = fake_model
    path = assemble(model, root=root)
    assert path.read_bytes() == b"".join(chunks)
    assert path.parent == root / "models" and not list(path.parent.glob("*.part"))  # no temporary file left
    # the second call must not read the parts again
    monkeypatch.setattr(models, "part_paths", lambda m: (_ for _ in ()).throw(AssertionError("reassembled")))
    assert assemble(model, root=root) == path


def test_a_changed_file_is_reassembled(fake_model) -> None:
    model, chunks, root = fake_model
    path = assemble(model, root=root)
    path.write_bytes(b"truncated")
    assert assemble(model, root=root).read_bytes() == b"".join(chunks)


def test_corrupted_part_is_a_clear_error_and_leaves_nothing(fake_model) -> None:
    model, chunks, root = fake_model
    part = Path(importlib.util.find_spec(f"{model.module}2").submodule_search_locations[0]) / "data" / "part02.bin"
    part.write_bytes(b"x" + chunks[1][1:])
    with pytest.raises(LLMError, match=r"sha256 .* expected .*pip install --force-reinstall"):
        assemble(model, root=root)
    assert not (root / "models" / model.filename).exists()
    assert not list((root / "models").glob("*"))


def test_missing_part_names_it_and_says_what_to_install(tmp_path, monkeypatch) -> None:
    module = f"fake_missing_part_{os.getpid()}_"
    _fake_parts(tmp_path, module, [b"a", b"b"])
    monkeypatch.syspath_prepend(str(tmp_path))
    model = ChunkedModel(name="fake", filename="f.gguf", package="fake-part", module=module, parts=3,
                         sha256="0" * 64, version="1.0")
    with pytest.raises(LLMError, match=r"1 of 3 parts are missing \(parts 3\).*pip install fake-part3==1.0"):
        assemble(model, root=tmp_path / "cache")


def test_cache_folder_follows_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv(models.CACHE_ENV)
    assert "harness-sr" in str(cache_dir())


def test_model_names() -> None:
    assert resolve_model_name(None) == "qwen2.5-coder-1.5b-instruct"
    assert resolve_model_name("SmolLM2-135M-Instruct") == "smollm2-135m-instruct"
    assert resolve_model_name("tiny") == "smollm2-135m-instruct"
    with pytest.raises(LLMError, match="unknown embedded model"):
        resolve_model_name("gpt-17")


def test_the_default_model_is_installed_and_verified() -> None:
    """The real parts are project dependencies: the default model assembles (or is found) and has the right hash."""
    path = Path(embedded_model_path())
    assert path.is_file() and path.stat().st_size == 1117320768
    with open(path, "rb") as fh:
        assert fh.read(4) == b"GGUF"
