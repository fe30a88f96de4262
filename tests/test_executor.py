"""The executor seam without Ray (harness/app/executor.py): lazy bounded dispatch, delivery as results finish,
failures as substitutes, a stop raised while dispatching drains what runs; endpoints spread over solves; the
shipping of run folders and LLM answers from a worker to the driver; the `executor` config group."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from harness.app.executor import ExecutorConfig, ExecutorError, LocalExecutor, SolveExecutor
from harness.app.executor_factory import load_executor_config, make_executor, split_executor_options
from harness.app.remote import Shipment, WorkerSession, absorb, pack_folder, unpack_folder, worker_llm_config
from harness.llm.cache import CachedLLM
from harness.llm.config import LLMConfig
from harness.llm.factory import make_llm
from tests.doubles import SCRIPTED, ScriptedLLM
from tests.fake_llm_servers import FakeServer, completion


class Stop(RuntimeError):
    pass


@pytest.mark.parametrize("workers", [1, 3])
def test_results_in_order_delivered_as_they_finish_and_at_most_slots_in_flight(workers: int) -> None:
    running, peak, lock = [0], [0], threading.Lock()
    delivered: list[tuple[int, int]] = []

    def work(x: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05 * (5 - x))  # later items finish first
        with lock:
            running[0] -= 1
        return x * x

    def on_result(i: int, r: int) -> None:
        assert threading.current_thread() is threading.main_thread()  # the driver writes, in its own thread
        delivered.append((i, r))

    executor = LocalExecutor(workers)
    assert isinstance(executor, SolveExecutor) and not executor.remote
    assert executor.map(work, range(5), on_result=on_result) == [0, 1, 4, 9, 16]
    assert sorted(delivered) == [(i, i * i) for i in range(5)] and peak[0] == workers
    if workers > 1:
        assert [i for i, _ in delivered] != list(range(5))  # completion order, not input order


def test_a_failed_item_becomes_the_substitute_and_the_rest_still_run() -> None:
    def work(x: int) -> int:
        if x == 2:
            raise ValueError("boom")
        return x

    out = LocalExecutor(2).map(work, range(4), on_error=lambda i, item, exc: f"failed {item}: {exc}")
    assert out == [0, 1, "failed 2: boom", 3]
    seen: list[int] = []
    with pytest.raises(ValueError, match="boom"):  # no on_error: raised once everything else is delivered
        LocalExecutor(2).map(work, range(4), on_result=lambda i, r: seen.append(r))
    assert sorted(seen) == [0, 1, 3]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_while_dispatching_drains_the_items_in_flight_then_propagates(workers: int) -> None:
    started: list[int] = []
    delivered: list[int] = []

    def items():
        for i in range(10):
            if len(started) >= 3:  # e.g. StageBudgetSpent, checked as each item is pulled
                raise Stop("budget spent")
            started.append(i)
            yield i

    with pytest.raises(Stop):
        LocalExecutor(workers).map(lambda x: (time.sleep(0.05), x)[1], items(),
                                   on_result=lambda i, r: delivered.append(r))
    assert sorted(delivered) == started == [0, 1, 2]  # nothing that ran was lost


def test_endpoints_round_robin_per_solve_and_per_call() -> None:
    cfg = LLMConfig(provider="openai", base_url=["http://a:1/v1", "http://b:2/v1"], model="m")
    assert [cfg.for_solve(i).base_url for i in range(4)] == ["http://a:1/v1", "http://b:2/v1"] * 2
    assert LLMConfig(base_url=["http://only/v1"]).base_url == "http://only/v1"  # one URL stays a string
    assert LLMConfig(base_url=[]).base_url is None and LLMConfig().for_solve(3).base_url is None
    assert worker_llm_config(cfg.model_dump(), 5).base_url == "http://b:2/v1"

    reply = lambda body, i: (200, completion("ok"), 0.0)  # noqa: E731
    with FakeServer(reply) as a, FakeServer(reply) as b:
        client = make_llm({"provider": "openai", "model": "m", "base_url": [a.base_url, b.base_url],
                           "max_retries": 0, "timeout_s": 5})
        for _ in range(4):  # one shared client (local executor): its calls alternate
            assert client.complete([{"role": "user", "content": "hi"}])[0].text == "ok"
        client.close()
        assert len(a.requests) == len(b.requests) == 2


def test_a_worker_session_ships_its_folder_answers_and_usage_to_the_driver(tmp_path: Path) -> None:
    config = LLMConfig(provider=SCRIPTED, extra={"responses": ["one", "two"]})
    with WorkerSession(config) as session:
        assert session.run_dir is not None and tmp_path not in session.run_dir.parents
        (session.run_dir / "sub").mkdir(parents=True)
        (session.run_dir / "sub" / "nodes.jsonl").write_text("{}\n")
        session.client.complete([{"role": "user", "content": "q1"}], seed=1)
        session.client.complete([{"role": "user", "content": "q2"}], seed=2)
        shipment = session.shipment()
        private = session.run_dir
    assert not private.exists()  # the worker keeps nothing
    assert len(shipment.llm_rows) == 2 and shipment.usage["calls"] == 2 and shipment.worker["pid"] > 0

    driver = CachedLLM(ScriptedLLM(["never used"]), tmp_path / "llm_cache.db")
    absorb(shipment, run_dir=tmp_path / "runs" / "t", llm=driver)
    assert (tmp_path / "runs" / "t" / "sub" / "nodes.jsonl").read_text() == "{}\n"
    assert driver.inner.usage.calls == 2  # what optimize.pipeline.llm_paid reads
    # the driver's cache now answers the worker's calls (same model identity and request)
    assert driver.complete([{"role": "user", "content": "q2"}], seed=2)[0].text == "two" and driver.hits == 1
    driver.close()


def test_unpack_refuses_members_outside_the_folder(tmp_path: Path) -> None:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="refusing"):
        unpack_folder(buffer.getvalue(), tmp_path / "dest")
    assert not (tmp_path / "escape.txt").exists()
    assert pack_folder(tmp_path / "missing") is None and Shipment().files is None


def test_executor_config_group_and_command_line_options() -> None:
    assert load_executor_config("local") == ExecutorConfig()
    ray = load_executor_config("ray", {"address": "ray://head:10001", "num_cpus": "2"})
    assert (ray.name, ray.address, ray.num_cpus) == ("ray", "ray://head:10001", 2.0)
    rest, cfg = split_executor_options({"n_per_domain": "1", "executor": "ray", "executor.max_in_flight": "8"})
    assert rest == {"n_per_domain": "1"} and cfg.name == "ray" and cfg.max_in_flight == 8
    with pytest.raises(ExecutorError, match="unknown executor 'slurm'"):
        load_executor_config("slurm")
    with pytest.raises(ExecutorError, match="num_cpu"):
        load_executor_config("ray", {"num_cpu": 1})  # a typo fails before anything runs
    local = make_executor({"name": "local"}, default_workers=3)
    assert isinstance(local, LocalExecutor) and local.slots == 3


def test_optimize_and_its_config_group_take_the_executor(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from optimize.__main__ import register_config_bases
    from optimize.context import build_context
    from optimize.settings import OptimizeSettings
    from optimize.tasks import TaskSets

    register_config_bases()
    with initialize_config_module("harness.conf", version_base="1.3"):
        cfg = OmegaConf.to_container(compose("optimize", overrides=["optimize.task_workers=2"]), resolve=True)
        ray = OmegaConf.to_container(compose("optimize", overrides=["executor=ray", "executor.num_cpus=2"]).executor)
    assert ExecutorConfig.model_validate(cfg["executor"]) == ExecutorConfig()
    assert ExecutorConfig.model_validate(ray) == ExecutorConfig(name="ray", num_cpus=2)
    ctx = build_context(tmp_path, OptimizeSettings.model_validate(cfg["optimize"]), llm_config=cfg["llm"],
                        backend_config=cfg["backend"], benchmark_config=cfg["benchmark"], llm=object(),
                        tasks=TaskSets([], []), executor=cfg["executor"])
    assert isinstance(ctx.evaluator.executor, LocalExecutor) and ctx.evaluator.executor.slots == 2


def test_the_slurm_launcher_config_composes_for_multiruns() -> None:
    """hydra/launcher=slurm (harness/conf/hydra/launcher/slurm.yaml) over hydra-submitit-launcher's submitit_slurm;
    not submitted here (no SLURM), but composed as `python -m optimize -m hydra/launcher=slurm ...` would."""
    from hydra import compose, initialize_config_module

    from optimize.__main__ import register_config_bases

    register_config_bases()
    with initialize_config_module("harness.conf", version_base="1.3"):
        cfg = compose("optimize", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=cpu",
                                             "executor=ray", "executor.address=local"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "cpu"
    assert launcher.cpus_per_task == 32 and launcher.timeout_min == 2880 and launcher.signal_delay_s == 120
    assert cfg.executor.address == "local"


class PicklingExecutor(LocalExecutor):
    """A "remote" executor without Ray: every job and result crosses a pickle boundary (stricter than Ray's
    cloudpickle), in threads of this process. Tests the driver's side of remote evaluation quickly."""

    remote = True
    name = "pickling"

    def map(self, fn, items, *, on_result=None, on_error=None):  # type: ignore[override]
        import pickle

        def across(item):
            return pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(item)))))

        return super().map(across, items, on_result=on_result, on_error=on_error)


def test_remote_evaluations_are_stored_by_the_driver_and_a_spent_budget_keeps_what_ran(tmp_path: Path) -> None:
    from optimize.evaluation import Evaluator, StageBudgetSpent
    from tests import doubles as toy
    from workflows.harness import Harness, shipped_harness

    llm_config = {"provider": SCRIPTED, "extra": {"fn": "tests.doubles:respond"}}
    spec: Harness = shipped_harness(llm=llm_config).with_changes(workflow=(0, 1, 0, 0, 0)).with_sr_settings(
        time_budget=1, population_size=20, generations=3, max_length=15, unguided_run=False, combine_terms=False,
        operators=["add", "sub", "mul", "div"])
    tasks = toy.toy_tasks(4)
    client = CachedLLM(make_llm(llm_config), tmp_path / "llm_cache.db")
    evaluator = Evaluator(tmp_path, client, executor=PicklingExecutor(2), llm_config=llm_config,
                          stage_limits={"init": 2})  # one SR run per solve: the third dispatch finds it spent
    with pytest.raises(StageBudgetSpent):
        evaluator.evaluate(spec, tasks, (0,), stage="init")
    # dispatch stopped once the stage's runs were spent (it may overshoot by the solves in flight, as threads
    # do); everything that ran was stored, traced and its answers and usage kept by the driver
    ran = evaluator.stage_solver_runs("init")
    assert 2 <= ran < len(tasks)
    assert len((tmp_path / "trace.jsonl").read_text().splitlines()) == ran
    assert client.stats()["stored"] == client.inner.usage.calls == ran
    evaluator.stage_limits = {}
    summary = evaluator.evaluate(spec, tasks, (0,), stage="init")
    assert (summary.n_cached, summary.n_new) == (ran, len(tasks) - ran)
    assert [r.task for r in summary.records] == [t.name for t in tasks]  # input order
    assert all(r.worker["pid"] and (Path(r.run_dir) / "nodes.jsonl").is_file() for r in summary.records)

    with pytest.raises(ExecutorError, match="llm config"):  # remote without a config to rebuild the model from
        Evaluator(tmp_path / "other", client, executor=PicklingExecutor(1)).evaluate(spec, tasks[:1], stage="init")
    client.close()
