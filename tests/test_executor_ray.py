"""``executor=ray`` on a real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head and a
second node, one CPU each): a benchmark's solves run on both nodes and give what the local executor gives; the
optimizer's evaluator stores, traces and caches what its Ray solves return; a killed driver redoes only the
unfinished solves; a dead worker is a recorded failure; a dead address is a clear error; a ``base_url`` list is
spread over the solves.

Ray is in the ``test`` extra (``pip install -e ".[test]"``, what CI installs), so this module always runs there.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster

import benchmarks
from benchmarks.runner import load_records, run_benchmark
from harness.app.artifact import FrozenHarness
from harness.app.executor import ExecutorConfig, ExecutorError
from harness.app.executor_factory import make_executor
from harness.app.ray_executor import RayExecutor
from tests import doubles as toy
from tests.doubles import SCRIPTED, resolve_callable, scripted_role_output
from tests.fake_llm_servers import FakeServer, completion

REPO = Path(__file__).resolve().parent.parent
# Short, generation-capped SR runs: Operon stops after 3 generations long before its 5 s (also on a loaded
# machine, where a 1 s limit could cut a run short), so a seeded run is
# deterministic and local and Ray results can be compared equation for equation.
TINY = {"time_budget": 5, "population_size": 20, "generations": 3, "max_length": 15, "unguided_run": False,
        "operators": ["add", "sub", "mul", "div"], "combine_terms": False}
MB = 2**20


@pytest.fixture(scope="module")
def cluster():
    """A head node and a second node, one CPU each: two solves at once, necessarily on different nodes. This
    process connects once, so the tests share warm worker processes (a RayExecutor finding Ray initialized uses
    that connection and leaves it open); the killed-driver test's own drivers connect by address."""
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * MB,
                                                        "include_dashboard": False})
    c.add_node(num_cpus=1, object_store_memory=80 * MB)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def ray_executor(cluster: Cluster, **settings: Any) -> RayExecutor:
    executor = make_executor(ExecutorConfig(name="ray", address=cluster.address, **settings))
    assert isinstance(executor, RayExecutor) and executor.slots == 2
    return executor


def harness(fn: str = "tests.doubles:respond") -> FrozenHarness:
    return FrozenHarness.create(FrozenHarness.default().prompts, (0, 1, 0, 0, 0), sr_settings=TINY,
                                llm={"provider": SCRIPTED, "extra": {"fn": fn}})


def respond_slowly(messages: list[dict[str, Any]], **request: Any) -> str:
    """The toy model after 2 s: solves long enough for a driver to be killed between them."""
    time.sleep(2.0)
    return toy.respond(messages, **request)


def respond_or_die(messages: list[dict[str, Any]], **request: Any) -> str:
    """The toy model, except that the process dies on the task named ``toy_1`` (a crashed worker)."""
    if any("toy_1" in str(m.get("content") or "") for m in messages):
        os._exit(3)
    return toy.respond(messages, **request)


def loaded_model(index: int) -> tuple[int, int, int | None, int]:
    """On a worker: two solves' sessions for the embedded tiny model -> (pid, id of the loaded model, the threads
    it generates with, models loaded in this process)."""
    from harness.app.remote import WorkerSession, worker_llm_config
    from harness.llm import llama_runtime

    models, threads = [], None
    for _ in range(2):
        with WorkerSession(worker_llm_config({"provider": "local", "model": "smollm2-135m-instruct"}, index),
                           keep_files=False, cache_llm=False) as session:
            models.append(session.client._model()[0])  # held, so a second load could not reuse the first's id
            threads = session.client.threads_now()
    assert models[0] is models[1]
    return os.getpid(), id(models[0]), threads, len(llama_runtime._CACHE)


def by_task(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["task"]: r for r in records}


NUMBER = re.compile(r"\d+\.\d+(?:e[-+]?\d+)?")


def same_search_result(a: str, b: str) -> bool:
    """The same equation up to its constants' last digits: the float64 refit of each front model is capped at a
    second (``operon_backend.REFIT_SECONDS``), so on a loaded machine one run's LM may stop a few steps earlier
    than the other's. Same skeleton, same numbers to 1e-3 relative (1e-5 absolute
    for a near-zero intercept)."""
    numbers_a, numbers_b = NUMBER.findall(a), NUMBER.findall(b)
    return NUMBER.sub("c", a) == NUMBER.sub("c", b) and len(numbers_a) == len(numbers_b) and all(
        float(x) == pytest.approx(float(y), rel=1e-3, abs=1e-5) for x, y in zip(numbers_a, numbers_b))


def same_verdict(a: Any, b: Any) -> bool:
    """The symbolic check's verdict (equivalent, method, note) exactly; its numbers (refit constants, NMSE,
    dropped near-zero terms) only as closely as the capped refit above allows."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_verdict(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_verdict(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-2, abs=1e-5)
    if isinstance(a, str) and isinstance(b, str):
        return same_search_result(a, b)
    return a == b


def test_benchmark_on_two_nodes_equals_the_local_run(cluster: Cluster, tmp_path: Path) -> None:
    tasks = toy.toy_tasks(4)
    run_benchmark(harness(), tasks, tmp_path / "local", seed=3)
    executor = ray_executor(cluster)
    try:
        table = run_benchmark(harness(), tasks, tmp_path / "ray", seed=3, executor=executor)
    finally:
        executor.close()
    local = by_task(load_records(tmp_path / "local" / "results.jsonl"))
    remote = by_task(load_records(tmp_path / "ray" / "results.jsonl"))
    assert set(remote) == {t.name for t in tasks} and len(table) == 4
    nodes = {r["worker"]["node_id"] for r in remote.values()}
    assert len(nodes) == 2 and None not in nodes  # solves ran on both nodes
    assert {r["worker"]["pid"] for r in local.values()} == {os.getpid()}  # the local executor: this process
    assert all(r["worker"]["pid"] != os.getpid() for r in remote.values())
    for name, rec in remote.items():
        assert rec["status"] == local[name]["status"] == "completed"
        assert same_search_result(rec["equation"], local[name]["equation"])  # same seed, same run
        for split in ("test_id", "test_ood"):
            assert rec["metrics"][split]["nmse"] == pytest.approx(local[name]["metrics"][split]["nmse"],
                                                                  rel=1e-2, abs=1e-9)
        assert same_verdict(rec["symbolic"], local[name]["symbolic"])
        assert rec["llm_calls"] == local[name]["llm_calls"]
        # the run folder came back to the driver, where the local executor writes it
        folder = tmp_path / "ray" / "runs" / name
        assert rec["run_dir"] == str(folder) and (folder / "result.json").is_file()
        assert (folder / "nodes.jsonl").read_text().count("\n") == \
            (tmp_path / "local" / "runs" / name / "nodes.jsonl").read_text().count("\n")


def test_optimizer_evaluations_on_ray_are_stored_traced_and_cached_by_the_driver(cluster: Cluster,
                                                                                  tmp_path: Path) -> None:
    from harness.llm.cache import CachedLLM
    from harness.llm.factory import make_llm
    from optimize.evaluation import Evaluator
    from workflows.harness import Harness

    llm_config = {"provider": SCRIPTED, "extra": {"fn": "tests.doubles:respond"}}
    spec = Harness.from_dict(harness().description().to_dict())
    tasks = toy.toy_tasks(3)
    local = Evaluator(tmp_path / "local", make_llm(llm_config)).evaluate(spec, tasks, (0,), stage="init")

    client = CachedLLM(make_llm(llm_config), tmp_path / "ray" / "llm_cache.db")
    executor = ray_executor(cluster)
    try:
        evaluator = Evaluator(tmp_path / "ray", client, executor=executor, llm_config=llm_config,
                              stage_limits={"init": 100})
        summary = evaluator.evaluate(spec, tasks, (0,), stage="init")
        assert summary.n_new == 3 and summary.score == pytest.approx(local.score)
        assert [r.equation for r in summary.records] == [r.equation for r in local.records]  # input order
        assert len({r.worker["node_id"] for r in summary.records}) == 2
        # the driver wrote everything: cache rows, trace lines, run folders, the model's answers and usage
        assert evaluator.stage_solver_runs("init") == sum(r.solver_runs for r in summary.records) > 0
        trace = [json.loads(line) for line in (tmp_path / "ray" / "trace.jsonl").read_text().splitlines()]
        assert len(trace) == 3 and not any(t["cached"] for t in trace)
        assert all((Path(r.run_dir) / "result.json").is_file() and str(tmp_path) in r.run_dir
                   for r in summary.records)
        assert client.stats()["stored"] == client.inner.usage.calls == sum(r.llm_calls for r in summary.records)
        again = evaluator.evaluate(spec, tasks, (0,), stage="init")  # a rerun pays nothing
        assert again.n_cached == 3 and again.n_new == 0
    finally:
        executor.close()
        client.close()


def test_a_killed_driver_redoes_only_the_unfinished_solves(cluster: Cluster, tmp_path: Path) -> None:
    """`python -m benchmarks run ... executor=ray` killed with SIGKILL after its first record (two solves at once,
    three tasks: at least one is unfinished), then rerun."""
    path = harness("tests.test_executor_ray:respond_slowly").save(tmp_path / "harness.json")
    out = tmp_path / "out"
    options = ["n_per_domain=1", "domains=chemistry,materials,biology", "n_train=80", "n_test=40", "n_ood=40"]
    cmd = [sys.executable, "-m", "benchmarks", "run", "synthetic", str(out), "--harness", str(path), *options,
           "executor=ray", f"executor.address={cluster.address}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and results.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    first = [r["task"] for r in load_records(results)]
    names = [t.name for t in benchmarks.load_suite("synthetic", n_per_domain=1,
                                                   domains=["chemistry", "materials", "biology"],
                                                   n_train=80, n_test=40, n_ood=40)]
    assert 1 <= len(first) < len(names)

    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    solved_again = re.findall(r" done - (\S+) ", rerun.stdout)  # the progress line of each task solved
    assert sorted(solved_again) == sorted(set(names) - set(first))  # only the unfinished ones
    final = [r["task"] for r in load_records(results)]
    assert sorted(final) == sorted(names) and len(final) == len(set(final))
    assert (out / "table.md").is_file()


def test_a_worker_that_dies_is_a_recorded_failure(cluster: Cluster, tmp_path: Path) -> None:
    executor = ray_executor(cluster, max_retries=0)
    try:
        run_benchmark(harness("tests.test_executor_ray:respond_or_die"), toy.toy_tasks(3), tmp_path, seed=0,
                      executor=executor)
    finally:
        executor.close()
    records = by_task(load_records(tmp_path / "results.jsonl"))
    assert set(records) == {"toy_0", "toy_1", "toy_2"}
    assert records["toy_1"]["status"] == "error" and "died" in records["toy_1"]["error"].lower()
    assert records["toy_0"]["status"] == records["toy_2"]["status"] == "completed"


def test_openai_endpoints_are_spread_over_the_solves(cluster: Cluster, tmp_path: Path) -> None:
    def reply(body: dict, index: int) -> tuple[int, Any, float]:
        return 200, completion(json.dumps(json.loads(scripted_role_output(body["messages"])))), 0.0

    with FakeServer(reply) as a, FakeServer(reply) as b:
        llm = {"provider": "openai", "model": "fake", "base_url": [a.base_url, b.base_url], "max_retries": 0,
               "timeout_s": 20}
        executor = ray_executor(cluster)
        try:
            run_benchmark(harness(), toy.toy_tasks(2), tmp_path, seed=0, llm=llm, executor=executor)
        finally:
            executor.close()
        assert a.requests and b.requests  # each solve talked to its own endpoint
    records = load_records(tmp_path / "results.jsonl")
    assert [r["status"] for r in records] == ["completed", "completed"] and all(r["llm_calls"] >= 1 for r in records)


def test_the_embedded_model_loads_once_per_worker_process_not_per_solve(cluster: Cluster) -> None:
    executor = ray_executor(cluster)
    try:
        # by import path, so workers import it as tests.test_executor_ray (pytest imports this file by its name)
        out = executor.map(resolve_callable("tests.test_executor_ray:loaded_model"), range(6))
    finally:
        executor.close()
    per_process: dict[int, set[int]] = {}
    for pid, model, threads, loaded in out:
        per_process.setdefault(pid, set()).add(model)
        assert threads == 1  # llama.cpp gets the solve's one reserved CPU, not every core of the node
        assert loaded == 1
    assert all(len(models) == 1 for models in per_process.values())


def test_a_dead_address_is_a_clear_error_before_anything_runs() -> None:
    if ray.is_initialized():
        ray.shutdown()
    started = time.monotonic()
    with pytest.raises(ExecutorError, match="no Ray cluster answers at ray://127.0.0.1:9"):
        make_executor(ExecutorConfig(name="ray", address="ray://127.0.0.1:9", connect_timeout_s=2))
    assert time.monotonic() - started < 10 and not ray.is_initialized()
