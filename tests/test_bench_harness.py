"""scripts/bench_harness.py's harness overrides: a channel or another model is one command, and a results folder
never mixes two harnesses' records."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from harness.app.artifact import FrozenHarness
from tests.doubles import SCRIPTED

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    """A script of scripts/ as a module (they are run as files, not imported as a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _script("bench_harness")


def test_overrides_change_the_harness_and_its_digest(tmp_path: Path) -> None:
    base = FrozenHarness.default()
    prompt = tmp_path / "planner.md"
    prompt.write_text("Propose sums of known terms.", encoding="utf-8")
    changed = bench.with_overrides(base, llm=["provider=openai", "base_url=http://host:8000/v1", "model=big"],
                                   sr=["residual_seconds=30", "time_budget=5"], prompts=[f"planner={prompt}"])
    assert changed.llm["provider"] == "openai" and changed.llm["base_url"] == "http://host:8000/v1"
    assert changed.llm["temperature"] == base.llm["temperature"]  # what is not named stays
    assert changed.sr_settings.residual_seconds == 30.0 and changed.sr_settings.time_budget == 5
    assert changed.prompts["planner"] == "Propose sums of known terms."
    assert changed.prompts["analyst"] == base.prompts["analyst"]
    assert changed.digest != base.digest
    assert bench.with_overrides(base) is base


@pytest.mark.parametrize("kwargs", [{"sr": ["residual_secs=30"]}, {"llm": ["modle=big"]},
                                    {"sr": ["time_budget"]}, {"prompts": ["critic=x.md"]}])
def test_a_mistyped_override_is_an_error_not_a_silent_default(kwargs: dict, tmp_path: Path) -> None:
    if "prompts" in kwargs:
        (tmp_path / "x.md").write_text("x", encoding="utf-8")
        kwargs = {"prompts": [f"critic={tmp_path / 'x.md'}"]}
    with pytest.raises((SystemExit, ValueError)):
        bench.with_overrides(FrozenHarness.default(), **kwargs)


def test_a_run_records_its_harness_and_refuses_a_folder_of_another(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    common = ["--suite", "synthetic", "--split", "train", "--n-per-domain", "1", "--tasks", "chem_react_synth_00",
              "--llm-sr", "", "--arms", "harness", "--out", str(out),
              "--llm", f"provider={SCRIPTED}", "--llm", "extra={fn: 'tests.doubles:respond'}"]
    assert bench.main(common + ["--sr", "time_budget=2"]) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    expected = bench.with_overrides(FrozenHarness.default(), sr=["time_budget=2"],
                                    llm=[f"provider={SCRIPTED}", "extra={fn: 'tests.doubles:respond'}"])
    assert [(r["arm"], r["task"], r["harness"]) for r in records] == [
        ("harness", "chem_react_synth_00", expected.digest[:19])]
    assert records[0]["llm_calls"] >= 1 and records[0]["equation"]
    assert records[0]["seconds"] < 60  # 2 x 2 s runs, not the default 2 x 60 s
    from harness.llm.cpu_kernels import cpu_description

    assert records[0]["machine"].startswith(cpu_description()["model"])  # a time-bound solve depends on it
    with pytest.raises(SystemExit, match="another --out"):
        bench.main(common + ["--sr", "time_budget=3"])


def test_the_planner_probe_scores_what_a_prompt_makes_the_model_write() -> None:
    """The scripted model writes the toy's law only when the prompt names the periodic hypothesis: the probe fits
    it (exact, tiny validation NMSE) and its summary tells the two prompts apart."""
    from tests.doubles import PHRASE, ScriptedLLM, respond, toy_tasks
    from workflows.params import SRSettings

    probe = _script("probe_planner")
    llm = ScriptedLLM(fn=respond)
    base = FrozenHarness.default().prompts["planner"]
    records = []
    for task in toy_tasks(2, n_rows=80):
        for name, prompt in (("harness", base), ("hinted", base + f"\nAlways write the {PHRASE}.")):
            rec = probe.probe(llm, prompt, task, 0, 0, SRSettings())
            records.append({**rec, "task": task.name, "prompt": name})
    hinted = [r for r in records if r["prompt"] == "hinted"]
    assert all(r["exact"] and r["best_valid_nmse"] < 1e-6 for r in hinted)
    assert all(r["best_valid_nmse"] is None and not r["exact"] for r in records if r["prompt"] == "harness")
    table = probe.summary(records).set_index("prompt")
    assert table.loc["hinted", "best < 0.0001"] == 1.0 and table.loc["hinted", "exact laws"] == 2
    assert table.loc["harness", "best < 0.1"] == 0.0 and table.loc["harness", "exact laws"] == 0


def test_the_planner_probe_records_a_dead_model_as_a_failed_call() -> None:
    from tests.doubles import toy_tasks
    from workflows.params import SRSettings

    class Dead:
        def complete(self, *args, **kwargs):
            raise ConnectionError("server gone")

    rec = _script("probe_planner").probe(Dead(), "plan", toy_tasks(1)[0], 0, 0, SRSettings())
    assert rec["error"].startswith("ConnectionError") and rec["fits"] == [] and rec["best_valid_nmse"] is None


def test_records_reused_from_another_harness_do_not_lock_the_folder(tmp_path: Path) -> None:
    mine, other = "sha256:aaaa", "sha256:bbbb"
    bench.check_out_folder([{"harness": mine}, {"harness": other, "reused_from": "x/results.jsonl"}], mine, tmp_path)
    with pytest.raises(SystemExit, match="another --out"):
        bench.check_out_folder([{"harness": other}], mine, tmp_path)


def test_anonymized_tasks_send_no_name_or_description_and_report_progress(tmp_path: Path, capsys) -> None:
    """``--task anonymize=true``: every prompt sees x1..xn and y only; the records keep the task's name and read
    the equation back in its names; plain progress lines (stdout is not a terminal) and a closing summary."""
    import benchmarks
    from harness.core.anonymize import rename_variables
    from tests import doubles

    [task] = benchmarks.load_suite("synthetic", split="train", n_per_domain=1, names=["chem_react_synth_00"])
    out = tmp_path / "bench"
    common = ["--suite", "synthetic", "--split", "train", "--n-per-domain", "1", "--tasks", "chem_react_synth_00",
              "--llm-sr", "", "--arms", "harness", "engine", "--out", str(out), "--sr", "time_budget=1",
              "--llm", f"provider={SCRIPTED}", "--llm", "extra={fn: tests.doubles.recording_role_output}"]
    doubles.RECEIVED.clear()
    assert bench.main(common + ["--task", "anonymize=true"]) == 0
    prompts = "\n".join(str(m.get("content") or "") for request in doubles.RECEIVED for m in request)
    assert doubles.RECEIVED and "x1" in prompts
    secrets = [task.name, task.domain, *task.input_names, *task.input_descriptions, task.target_description]
    for secret in secrets:
        if len(secret) > 2:  # one-letter names (A, t) are in every prompt's grammar note
            assert secret not in prompts, f"{secret!r} reached a prompt"
    records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["arm"], r["task"], r["anonymized"]) for r in records] == [
        ("harness", task.name, True), ("engine", task.name, True)]
    back = {f"x{i}": name for i, name in enumerate(task.input_names, 1)}
    for r in records:
        assert r["equation"] and r["equation_original"] == rename_variables(r["equation"], back)
        assert not any(f"x{i}" in r["equation_original"] for i in range(1, len(back) + 1))
    printed = capsys.readouterr().out
    assert "] 1 tasks x 2 arms: 0/2" in printed and "1 tasks x 2 arms: 2/2 done" in printed
    assert "| arm | tasks | acc_0.01 ID / OOD (95 %) |" in printed and "tables.md" in printed
    with pytest.raises(SystemExit, match="anonymized tasks"):  # a folder holds one mode only
        bench.main(common)
