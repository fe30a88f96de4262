"""The LSR-Synth loader (LLM-SRBench's HDF5 layout and metadata): local copies, the hub, filters, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import load_suite
from benchmarks.sources import lsr_synth
from harness.core.task import TaskError

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
needs_llm_sr = pytest.mark.skipif(not (DATA / "llm-sr").is_dir(), reason="shared LLM-SR data not present")
needs_feynman = pytest.mark.skipif(not (DATA / "feynman").is_dir(), reason="shared Feynman table not present")


def write_h5(path: Path, official_keys: bool = True) -> Path:
    import h5py  # a core dependency
    rng = np.random.default_rng(0)
    keys = ("train_data", "id_test_data", "ood_test_data") if official_keys else ("train", "test", "ood_test")
    layout = {"phys_osc": {"PO0": 4, "PO1": 4}, "chem_react": {"CRK0": 3}, "matsci": {"MatSci0": 5}}
    with h5py.File(path, "w") as f:
        for domain, tasks in layout.items():
            for name, width in tasks.items():
                for key, n in zip(keys, (30, 10, 12)):
                    data = rng.normal(size=(n, width))
                    data[:, 0] = data[:, 1:].sum(axis=1)  # column 0 = target
                    f.create_dataset(f"lsr_synth/{domain}/{name}/{key}", data=data)
        f.create_dataset("lsr_transform/I.6.2/train", data=np.zeros((3, 2)))
    return path


@pytest.mark.parametrize("official_keys", [True, False])
def test_lsr_synth_hdf5_layout(tmp_path, official_keys):
    path = write_h5(tmp_path / "lsr_bench_data.hdf5", official_keys)
    listing = lsr_synth.list_lsr_synth(path)
    assert listing == {"chem_react": ["CRK0"], "matsci": ["MatSci0"], "phys_osc": ["PO0", "PO1"]}
    tasks = {t.name: t for t in load_suite("lsr_synth", path=str(path))}
    po = tasks["PO0"]
    assert po.input_names == ["x", "t", "v"] and po.target_name == "dv_dt" and po.domain == "physics"
    assert po.row_counts() == {"train": 30, "test_id": 10, "test_ood": 12}
    assert np.allclose(po.train.y, po.train.X.sum(axis=1))
    assert tasks["CRK0"].input_names == ["t", "A"] and tasks["CRK0"].target_name == "dA_dt"
    odd = tasks["MatSci0"]  # 4 inputs where matsci expects 2
    assert odd.input_names == ["x0", "x1", "x2", "x3"] and odd.metadata["names_guessed"] is True
    assert "x0..xN" in odd.metadata["note"]


def test_lsr_synth_filters_and_errors(tmp_path):
    path = write_h5(tmp_path / "lsr.hdf5")
    assert [t.name for t in load_suite("lsr_synth", path=str(path), domains="phys_osc")] == ["PO0", "PO1"]
    assert [t.name for t in load_suite("lsr_synth", path=str(path), names="phys_osc/PO1,CRK0")] == ["CRK0", "PO1"]
    with pytest.raises(TaskError, match=r"\['PO9'\] not found"):
        load_suite("lsr_synth", path=str(path), names=["PO9"])
    with pytest.raises(TaskError, match="domain"):
        load_suite("lsr_synth", path=str(path), domains=["bio_pop_growth"])
    with pytest.raises(TaskError, match="nnheui/llm-srbench"):
        load_suite("lsr_synth", path=str(tmp_path / "missing.hdf5"))
    (tmp_path / "junk.hdf5").write_text("not hdf5")
    with pytest.raises(TaskError, match="junk.hdf5"):
        load_suite("lsr_synth", path=str(tmp_path / "junk.hdf5"))


def write_hub_folder(folder: Path) -> Path:
    """A folder laid out like the hub repository nnheui/llm-srbench: the HDF5 file + data/*.parquet metadata."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    write_h5(folder / "lsr_bench_data.hdf5")
    (folder / "data").mkdir(exist_ok=True)
    phys = pd.DataFrame([
        {"name": "PO0", "symbols": ["dv_dt", "x", "t", "v"], "expression": "x + t + v",
         "symbol_descs": ["Acceleration", "Position at time t", "Time", "Velocity at time t"],
         "symbol_properties": ["O", "V", "V", "V"]},
        {"name": "PO1", "symbols": ["dv_dt", "F0", "x", "t", "v"], "expression": "F0*x + t + v",
         "symbol_descs": ["Acceleration", "Driving force", "Position", "Time", "Velocity"],
         "symbol_properties": ["O", "C", "V", "V", "V"]},
    ])
    phys.to_parquet(folder / "data" / "lsr_synth_phys_osc-00000-of-00001.parquet")
    chem = pd.DataFrame([{"name": "CRK0", "symbols": ["dA_dt", "t", "A"], "expression": "t + besselj(A)",
                          "symbol_descs": ["Rate", "Time (s)", "Concentration (mol/L)"],
                          "symbol_properties": ["O", "V", "V"]}])
    chem.to_parquet(folder / "data" / "lsr_synth_chem_react-00000-of-00001.parquet")
    return folder


def test_lsr_synth_from_a_local_copy_of_the_hub_takes_its_metadata(tmp_path):
    folder = write_hub_folder(tmp_path / "llm-srbench")
    tasks = {t.name: t for t in load_suite("lsr_synth", folder=str(folder))}
    po0, po1, crk = tasks["PO0"], tasks["PO1"], tasks["CRK0"]
    assert po0.ground_truth == "t + v + x" and po0.input_descriptions[0] == "Position at time t"
    assert po0.metadata["names_from"] == "metadata" and po0.target_description == "Acceleration"
    # a constant named in the expression (property C) is fitted to the data and written in
    assert po1.input_names == ["x", "t", "v"] and po1.metadata["truth_constants_fitted"] is True
    from harness.core.expression import parse_expression
    assert np.allclose(parse_expression(po1.ground_truth, po1.input_names)(po1.train.X), po1.train.y)
    # a function outside the grammar: no ground truth, and the reason is kept
    assert crk.ground_truth is None and "grammar" in crk.metadata["truth_note"]
    assert crk.input_descriptions == ["Time (s)", "Concentration (mol/L)"]
    # no metadata for MatSci0: the built-in defaults, as before
    assert tasks["MatSci0"].metadata["names_from"] == "built-in defaults"
    # path= to the HDF5 inside such a folder reads the metadata beside it
    assert load_suite("lsr_synth", path=str(folder / "lsr_bench_data.hdf5"), names="PO0")[0].ground_truth


def test_lsr_synth_downloads_from_the_hub_when_nothing_is_local(tmp_path, monkeypatch):
    import huggingface_hub

    folder = write_hub_folder(tmp_path / "hub-cache")
    asked: list[dict] = []

    def fake_snapshot_download(**kwargs):
        asked.append(kwargs)
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    empty_root = tmp_path / "no-data"
    tasks = load_suite("lsr_synth", root=str(empty_root), names="PO0")
    assert [t.name for t in tasks] == ["PO0"] and tasks[0].ground_truth == "t + v + x"
    assert asked == [{"repo_id": "nnheui/llm-srbench", "repo_type": "dataset",
                      "allow_patterns": ["lsr_bench_data.hdf5", "data/lsr_synth_*"]}]

    def offline(**kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(TaskError, match=r"huggingface-cli login.*path=.*folder="):
        load_suite("lsr_synth", root=str(empty_root))
    with pytest.raises(TaskError, match="not found"):  # download=false: never the hub
        load_suite("lsr_synth", root=str(empty_root), download=False)


@pytest.mark.skipif(not (DATA / "lsr-synth-task-ids").is_dir(), reason="shared task ids not present")
def test_lsr_synth_expected_names_from_shared_ids():
    counts = {d: len(lsr_synth.expected_names(d, root=DATA)) for d in lsr_synth.DOMAINS}
    assert counts == {"bio_pop_growth": 24, "chem_react": 36, "matsci": 25, "phys_osc": 44}


# ----------------------------------------------------------------------------- Feynman
