

def test_the_same_data_under_new_column_names_is_another_task() -> None:
    """Found by the regressor's warm start: a worker keyed by data alone answered with the old names."""
    import numpy as np

    from harness.core.task import Task
    from harness.sr.workers import task_key

    X, y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    a = Task.from_arrays(X, y, name="user_data", input_names=["x1", "x2"])
    b = Task.from_arrays(X, y, name="user_data", input_names=["a", "b"])
    assert task_key(a) != task_key(b) and task_key(a) == task_key(Task.from_arrays(X, y, name="user_data",
                                                                                  input_names=["x1", "x2"]))


def _linear_task():
    import numpy as np

    from harness.core.task import Task

    rng = np.random.default_rng(0)
    X = rng.uniform(1, 3, (120, 2))
    return Task.from_arrays(X, 2.5 * X[:, 0] + 1.5 * X[:, 1], name="stuck_engine_task", input_names=["a", "b"])


def test_a_stuck_engine_is_killed_at_its_deadline_and_the_solve_keeps_the_pools_equation(monkeypatch) -> None:
    """The engine ignores its time (tests.doubles.stuck_engine sleeps 40 s): each SR run's worker is killed at
    time_budget + grace, each run is a recorded failure, and the solve ends in budget with the equation of the
    pool (the model's fitted hypothesis)."""
    import time

    from harness import FrozenHarness
    from harness.core.context import Budget
    from harness.sr import workers
    from tests.doubles import ScriptedLLM, scripted_role_output

    monkeypatch.delenv("HARNESS_SR_IN_PROCESS", raising=False)
    monkeypatch.setitem(workers.PROCESS_ENGINES, "operon", "tests.doubles:stuck_engine")
    monkeypatch.setattr(workers, "GRACE_SECONDS", 1.0)
    t0 = time.monotonic()
    solution = FrozenHarness.default().solve(_linear_task(), llm=ScriptedLLM(fn=scripted_role_output),
                                             budget=Budget(max_seconds=60), sr_settings={"time_budget": 1},
                                             max_workers=1)
    seconds = time.monotonic() - t0
    sr_errors = [e for e in solution.errors if "ran past its deadline (1s + 1s grace)" in e]
    assert len(sr_errors) == 2, solution.errors  # the unguided run and the planner's run, both killed
    assert seconds < 30, seconds  # two runs of 1 s + 1 s and their workers' start-up, not 2 x 40 s
    assert solution.equation is not None and solution.metrics["valid"]["nmse"] < 1e-10, solution.equation
    assert all(w.alive() for w in workers._POOL._idle)  # the killed workers were not given back


def test_a_worker_that_does_not_start_in_time_is_killed(monkeypatch, tmp_path) -> None:
    """A worker that never says "ready" (here: an interpreter that only sleeps) is an EngineFailure after
    STARTUP_SECONDS and its process is killed."""
    import os
    import time

    import pytest

    from harness.core.context import AgentContext
    from harness.sr import workers
    from harness.sr.plan import SearchPlan

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    os.chmod(fake, 0o755)
    started: list = []

    class Recorded(workers._Worker):
        def __init__(self) -> None:
            super().__init__()
            started.append(self)

    workers.shutdown_workers()  # no idle worker to reuse: a new one must start
    monkeypatch.setattr(workers.sys, "executable", str(fake))
    monkeypatch.setattr(workers, "_Worker", Recorded)
    monkeypatch.setattr(workers, "STARTUP_SECONDS", 1.0)
    t0 = time.monotonic()
    with pytest.raises(workers.EngineFailure, match=r"did not start within 1s"):
        workers.run_in_worker("operon", SearchPlan(), AgentContext(task=_linear_task()), max_seconds=5)
    assert time.monotonic() - t0 < 5
    assert len(started) == 1 and started[0].process.poll() is not None  # killed, not left sleeping
    assert not workers._POOL._idle
