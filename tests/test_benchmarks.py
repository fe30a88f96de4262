"""Benchmark loaders, the synthetic generator, export and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import benchmarks
from benchmarks import load_suite, load_task
from benchmarks.sources import feynman, llm_sr, synthetic
from benchmarks.sources._io import ENV_DATA_ROOT, data_root
from benchmarks.sources.table import load_table
from harness.core.evaluator import compute_metrics
from harness.core.expression import parse_expression
from harness.core.task import Task, TaskError

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
needs_llm_sr = pytest.mark.skipif(not (DATA / "llm-sr").is_dir(), reason="shared LLM-SR data not present")
needs_feynman = pytest.mark.skipif(not (DATA / "feynman").is_dir(), reason="shared Feynman table not present")


def gt_nmse(task: Task) -> dict[str, float]:
    expr = parse_expression(task.ground_truth, task.input_names)
    return {k: compute_metrics(s.y, expr(s.X))["nmse"] for k, s in task.splits().items()}


# ----------------------------------------------------------------------------- data root


def test_data_root_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_DATA_ROOT, raising=False)
    assert data_root() == DATA.resolve()
    monkeypatch.setenv(ENV_DATA_ROOT, str(tmp_path))
    assert data_root() == tmp_path
    assert data_root(tmp_path / "x") == tmp_path / "x"


# ----------------------------------------------------------------------------- LLM-SR


@needs_llm_sr
def test_llm_sr_real_data():
    tasks = {t.name: t for t in load_suite("llm_sr")}
    assert set(tasks) == {"oscillator1", "oscillator2", "bactgrow", "stressstrain"}
    osc = tasks["oscillator1"]
    assert osc.input_names == ["x", "v"] and osc.target_name == "a"
    assert osc.input_descriptions == ["position", "velocity"] and osc.target_description == "acceleration"
    assert osc.train.n == osc.test_id.n == osc.test_ood.n == 10000
    bact = tasks["bactgrow"]
    assert bact.input_names == ["b", "s", "temp", "pH"] and bact.target_name == "db"
    assert bact.row_counts() == {"train": 7500, "test_id": 2500, "test_ood": 15000}
    assert tasks["oscillator2"].input_names == ["t", "x", "v"]
    assert tasks["stressstrain"].domain == "materials"


@needs_llm_sr
def test_llm_sr_subset_root_option_and_errors(tmp_path):
    (task,) = load_suite("llm_sr", names="stressstrain", root=str(DATA), max_rows=100)
    assert task.train.n == 100 and task.input_names == ["strain", "temp"]
    with pytest.raises(TaskError, match="unknown LLM-SR problem"):
        load_suite("llm_sr", names=["nope"])
    with pytest.raises(TaskError, match="not found"):
        load_suite("llm_sr", names=["oscillator1"], root=str(tmp_path))


def test_folder_without_optional_splits(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    x = np.linspace(0, 1, 20)
    (folder / "train.csv").write_text("u,w\n" + "\n".join(f"{a},{2 * a + 1}" for a in x))
    task = llm_sr.load_folder(folder)
    assert task.name == "mine" and task.input_names == ["u"] and task.target_name == "w"
    assert task.test_id is None and task.test_ood is None
    (folder / "test_id.csv").write_text("u,z\n1,2\n")
    with pytest.raises(TaskError, match=r"test_id\.csv.*differ from train\.csv"):
        llm_sr.load_folder(folder)


# ----------------------------------------------------------------------------- user tables


def write_csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def good_table(tmp_path: Path, n: int = 100) -> Path:
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 1, n), rng.uniform(1, 2, n)
    rows = "\n".join(f"{u},{v},{u * v},label{i % 3}" for i, (u, v) in enumerate(zip(a, b)))
    return write_csv(tmp_path / "data.csv", "load (kN),b,out,tag\n" + rows + "\n")


def test_table_loader_splits_and_renames(tmp_path):
    path = good_table(tmp_path)
    task = load_table(path, "out", inputs=["load (kN)", "b"], descriptions={"b": "width"}, ood_column="b")
    assert task.input_names == ["load_kN", "b"] and task.target_name == "out"
    assert task.input_descriptions == ["load (kN)", "width"]
    assert task.metadata["renamed_columns"] == {"load (kN)": "load_kN"}
    assert task.test_ood.n == 20 and task.train.n + task.test_id.n == 80
    assert task.test_ood.X[:, 1].min() > max(task.train.X[:, 1].max(), task.test_id.X[:, 1].max())
    again = load_table(path, "out", inputs=["load (kN)", "b"], ood_column="b")
    assert np.array_equal(task.train.X, again.train.X)
    (via_suite,) = load_suite("csv", path=str(path), target="out", inputs="load (kN),b", test_fraction="0.25")
    assert via_suite.test_id.n == 25 and via_suite.test_ood is None


@pytest.mark.parametrize(
    "text, kwargs, pattern",
    [
        ("a,b\n" + "1,2\n" * 12, {"target": "y"}, r"target column 'y' not found; columns are \['a', 'b'\]"),
        ("a,b,y\n" + "".join(f"{i},x{i},{i}\n" for i in range(12)), {"target": "y"},
         r"column 'b' is not numeric: value 'x0' at row 1 \(line 2.*pass inputs="),
        ("a,y\n" + "".join(f"{'' if i == 4 else i},{i}\n" for i in range(12)), {"target": "y"},
         r"NaN/missing value in column 'a' at row 5 \(line 6"),
        ("a,y\n" + "".join(f"{i},{'nan' if i == 9 else i}\n" for i in range(12)), {"target": "y"},
         r"NaN/missing value in column 'y' at row 10"),
        ("a,y\n1,2\n2,3\n", {"target": "y"}, r"only 2 rows, at least 10"),
        ("a,y\n" + "".join(f"{i},5\n" for i in range(12)), {"target": "y"}, r"target column 'y' is constant"),
        ("", {"target": "y"}, r"is empty"),
        ("a,y\n", {"target": "y"}, r"header but no data rows"),
        ("1,2\n3,4\n", {"target": "y"}, r"no header row"),
        ("a,y\n" + "1,2\n" * 12, {"target": "y", "inputs": ["q"]}, r"input column\(s\) \['q'\] not found"),
        ("a,y\n" + "1,2\n" * 12, {"target": "y", "descriptions": {"zz": "?"}}, r"descriptions given for .*'zz'"),
    ],
)
def test_bad_tables_name_file_column_and_problem(tmp_path, text, kwargs, pattern):
    path = write_csv(tmp_path / "bad.csv", text)
    with pytest.raises(TaskError, match=pattern) as info:
        load_table(path, **kwargs)
    assert "bad.csv" in str(info.value)


def test_missing_file_and_parquet_engine(tmp_path):
    with pytest.raises(TaskError, match="does not exist"):
        load_table(tmp_path / "nope.csv", "y")
    path = tmp_path / "t.parquet"
    try:
        import pandas as pd

        pd.DataFrame({"a": np.arange(20.0), "y": np.arange(20.0) ** 2}).to_parquet(path)
    except ImportError:
        path.write_bytes(b"PAR1 not really")
        with pytest.raises(TaskError, match="Parquet needs pyarrow or fastparquet"):
            load_table(path, "y")
    else:
        assert load_table(path, "y").input_names == ["a"]



@needs_feynman
def test_feynman_sampling_is_deterministic_and_subset_stable():
    a = load_suite("feynman", n=5, n_train=50, n_test=20, n_ood=20)
    b = load_suite("feynman", n=5, n_train=50, n_test=20, n_ood=20)
    assert [t.name for t in a] == [t.name for t in b] and len(a) == 5
    for s, t in zip(a, b):
        assert np.array_equal(s.train.X, t.train.X) and np.array_equal(s.test_ood.y, t.test_ood.y)
    (single,) = load_suite("feynman", names=[a[3].metadata["filename"]], n_train=50, n_test=20, n_ood=20)
    assert np.array_equal(single.train.X, a[3].train.X)
    (other,) = load_suite("feynman", names=["I.6.2a"], n_train=50, seed=1)
    assert not np.array_equal(other.train.X, a[0].train.X)


@needs_feynman
def test_feynman_equations_evaluate_and_ranges():
    tasks = {t.metadata["filename"]: t for t in load_suite("feynman", names="I.6.2a,I.8.14,I.12.1,I.39.11", n_train=100)}
    th = tasks["I.6.2a"].train.X[:, 0]
    assert np.allclose(tasks["I.6.2a"].train.y, np.exp(-th**2 / 2) / np.sqrt(2 * np.pi), rtol=1e-12)
    x1, x2, y1, y2 = tasks["I.8.14"].train.X.T
    assert np.allclose(tasks["I.8.14"].train.y, np.sqrt((x2 - x1) ** 2 + (y2 - y1) ** 2), rtol=1e-12)
    gas = tasks["I.39.11"]  # a variable called gamma must be renamed
    assert "gamma_" in gas.input_names and gas.metadata["renamed"] == {"gamma": "gamma_"}
    for task in tasks.values():
        lo = np.array([r[0] for r in task.metadata["ranges"].values()])
        hi = np.array([r[1] for r in task.metadata["ranges"].values()])
        assert np.all(task.train.X >= lo) and np.all(task.train.X <= hi)
        assert np.all(task.test_ood.X >= hi)
        assert max(gt_nmse(task).values()) < 1e-20


@needs_feynman
def test_feynman_whole_table_parses_and_bad_rows_are_skipped(tmp_path):
    skipped: list = []
    tasks = feynman.load_feynman(n_train=20, n_test=5, n_ood=5, skipped=skipped)
    assert len(tasks) == 100 and skipped == []
    table = tmp_path / "eqs.csv"
    table.write_text(
        "Filename,Number,Output,Formula,# variables,v1_name,v1_low,v1_high\n"
        "ok,1,f,x**2+1,1,x,1,3\n"
        'weird,2,f,"besselj(0, x)",1,x,1,3\n'
        "undefined,3,f,sqrt(-x),1,x,1,3\n"
    )
    tasks = feynman.load_feynman(table, n_train=20, skipped=skipped)
    assert [t.name for t in tasks] == ["feynman_ok"]
    assert [name for name, _ in skipped] == ["weird", "undefined"]
    assert "cannot parse" in skipped[0][1] and "finite" in skipped[1][1]


# ----------------------------------------------------------------------------- synthetic generator


def test_synthetic_is_deterministic():
    a = synthetic.generate_task("physics", 4, seed=7, n_train=60, n_test=20, n_ood=20)
    b = synthetic.generate_task("phys_osc", 4, seed=7, n_train=60, n_test=20, n_ood=20)
    for k in ("train", "test_id", "test_ood"):
        assert np.array_equal(a.splits()[k].X, b.splits()[k].X) and np.array_equal(a.splits()[k].y, b.splits()[k].y)
    assert a.ground_truth == b.ground_truth
    c = synthetic.generate_task("physics", 4, seed=8, n_train=60, n_test=20, n_ood=20)
    assert c.ground_truth != a.ground_truth and not np.array_equal(c.train.X, a.train.X)


@pytest.mark.parametrize("domain", list(synthetic.DOMAINS))
def test_every_template_ground_truth_is_exact(domain):
    dom = synthetic.DOMAINS[domain]
    assert len(dom.templates) >= 6
    for index in range(len(dom.templates)):
        task = synthetic.generate_task(domain, index, n_train=200, n_test=50, n_ood=50)
        assert task.name == f"{domain}_synth_{index:02d}"
        assert task.input_names == list(dom.inputs) and task.target_name == dom.target
        for split in task.splits().values():
            assert np.all(np.isfinite(split.X)) and np.all(np.isfinite(split.y)) and np.ptp(split.y) > 0
        scores = gt_nmse(task)
        assert set(scores) == {"train", "test_id", "test_ood"}
        assert max(scores.values()) < 1e-12, (task.ground_truth, scores)


def test_synthetic_windows_and_trajectories():
    phys = synthetic.generate_task("physics", 0, n_train=100, n_test=40, n_ood=40)
    t_col = phys.input_names.index("t")
    lo, hi = synthetic.PHYS.window_id
    in_window = np.concatenate([phys.train.X[:, t_col], phys.test_id.X[:, t_col]])
    assert in_window.min() >= lo and in_window.max() <= hi and phys.test_ood.X[:, t_col].min() >= hi
    # the held-out ID points are different times of the same window
    assert not set(phys.train.X[:, t_col]) & set(phys.test_id.X[:, t_col])
    # inputs lie on a real trajectory: integrating from one sample reaches the next one
    from scipy.integrate import solve_ivp

    c = np.array(phys.metadata["constants"])
    fn = synthetic.PHYS.templates[0].fn
    pts = np.vstack([phys.train.X, phys.test_id.X])
    pts = pts[np.argsort(pts[:, t_col])]
    (x0, t0, v0), (x1, t1, v1) = pts[0], pts[-1]
    sol = solve_ivp(lambda t, s: [s[1], fn(c, s[0], t, s[1])], (t0, t1), [x0, v0], method="DOP853",
                    rtol=1e-11, atol=1e-12)
    assert np.allclose(sol.y[:, -1], [x1, v1], atol=1e-6)
    mat = synthetic.generate_task("materials", 0, n_train=100, n_test=20, n_ood=20)
    assert mat.test_ood.X[:, 0].min() >= mat.train.X[:, 0].max()


def test_synthetic_suite_names_and_splits():
    train = load_suite("synthetic", n_per_domain=2, split="train", domains="physics,materials",
                       n_train=40, n_test=10, n_ood=10)
    test = load_suite("synthetic", n_per_domain=2, split="test", domains=["physics", "materials"],
                      n_train=40, n_test=10, n_ood=10)
    assert [t.name for t in train] == ["phys_osc_synth_00", "phys_osc_synth_02", "matsci_synth_00", "matsci_synth_02"]
    assert [t.name for t in test] == ["phys_osc_synth_01", "phys_osc_synth_03", "matsci_synth_01", "matsci_synth_03"]
    assert {t.metadata["template"] for t in train}.isdisjoint({t.metadata["template"] for t in test})
    (named,) = load_suite("synthetic", names=["chem_react_synth_07"], n_train=40, n_test=10, n_ood=10)
    assert named.metadata["template"] == 1 and named.metadata["variant"] == 1
    default = load_suite("synthetic", n_train=40, n_test=10, n_ood=10)
    assert len(default) == 12 and {t.domain for t in default} == {"physics", "chemistry", "biology", "materials"}
    with pytest.raises(TaskError, match="unknown synthetic domain"):
        load_suite("synthetic", domains="astrology")


# ----------------------------------------------------------------------------- registry, load_task, export


def test_registry_options_and_errors():
    assert set(benchmarks.SUITES) >= {"synthetic", "llm_sr", "lsr_synth", "feynman", "csv"}
    assert benchmarks.coerce_options("synthetic", {"n_per_domain": "2", "domains": "a,b"}) == {
        "n_per_domain": 2, "domains": ["a", "b"]}
    with pytest.raises(TaskError, match="takes no option"):
        load_suite("synthetic", bogus=1)
    with pytest.raises(TaskError, match="expected int"):
        load_suite("synthetic", n_per_domain="many")
    with pytest.raises(TaskError, match="unknown suite"):
        load_suite("nope")
    with pytest.raises(TaskError, match="needs path"):
        load_suite("table")


def test_load_task_specs(tmp_path):
    t = load_task("phys_osc_synth_01", n_train=40, n_test=10, n_ood=10)
    assert t.name == "phys_osc_synth_01"
    assert load_task("synthetic:matsci_synth_00", n_train=40).name == "matsci_synth_00"
    assert load_task(t) is t
    path = good_table(tmp_path)
    assert load_task(str(path), target="out", inputs="b").input_names == ["b"]
    assert load_task(f"csv:{path}", target="out", inputs="b").name == "data"
    with pytest.raises(TaskError, match="cannot resolve"):
        load_task("what is this")


def test_export_round_trip(tmp_path):
    from benchmarks.export import export_tasks

    tasks = load_suite("synthetic", n_per_domain=1, domains="chemistry,materials", n_train=40, n_test=10, n_ood=10)
    folders = export_tasks(tasks, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(t.name for t in tasks)
    header = (folders[0] / "train.csv").read_text().splitlines()[0]
    assert header == "t,A,dA_dt"
    info = json.loads((folders[0] / "task.json").read_text())
    assert info["ground_truth"] == tasks[0].ground_truth and info["input_descriptions"] == tasks[0].input_descriptions
    back = {t.name: t for t in load_suite("folder", path=str(tmp_path / "out"))}
    for task in tasks:
        other = back[task.name]
        assert other.input_names == task.input_names and other.ground_truth == task.ground_truth
        assert other.domain == task.domain and other.target_description == task.target_description
        assert other.metadata["source"] == "synthetic"
        for k, s in task.splits().items():
            assert np.array_equal(other.splits()[k].X, s.X) and np.array_equal(other.splits()[k].y, s.y)


# ----------------------------------------------------------------------------- CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_list_show_export(tmp_path):
    out = run_cli("list")
    assert out.returncode == 0 and "synthetic" in out.stdout and "lsr_synth" in out.stdout and "n_per_domain" in out.stdout
    out = run_cli("show", "synthetic", "--name", "bio_pop_growth_synth_02", "n_train=40", "n_test=10", "n_ood=10")
    assert out.returncode == 0, out.stderr
    assert "Task: bio_pop_growth_synth_02" in out.stdout and "P: population at time t" in out.stdout
    assert "Ground truth: dP_dt =" in out.stdout
    out = run_cli("export", "synthetic", str(tmp_path / "exp"), "n_per_domain=1", "domains=physics", "n_train=40")
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(tmp_path / "exp" / "phys_osc_synth_00")) == [
        "task.json", "test_id.csv", "test_ood.csv", "train.csv"]
    out = run_cli("show", "synthetic", "bogus=1")
    assert out.returncode == 2 and "takes no option" in out.stderr
