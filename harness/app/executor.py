"""Where independent solves run: the executor seam (``executor=local|ray``).

A *solve* is one harness on one task with one seed (an optimizer evaluation, a benchmark task). Solves are
independent, so the optimizer's evaluator (``optimize.evaluation.Evaluator.evaluate``) and the benchmark runner
(``benchmarks.runner.run_benchmark``) hand them to a :class:`SolveExecutor`, which maps a function over them:

* :class:`LocalExecutor` - threads in this process (``workers`` at once; 1 = inline): today's behaviour and the
  default.
* :class:`~harness.app.ray_executor.RayExecutor` (``executor=ray``) - one Ray task per solve, with the per-solve
  resources of :class:`ExecutorConfig` (``num_cpus``...), on a cluster (``executor.address``).

The contract both keep (``map``): items are pulled lazily, at most ``slots`` are in flight, so a caller can decide
at dispatch time whether the next solve is still affordable (the optimizer's stage budgets); each finished result
goes to ``on_result`` *in the calling thread* as soon as it is there, so the driver writes caches, records and
traces as work completes and a killed driver loses only the solves in flight; results come back in input order.
An item whose function raised (or whose Ray worker died) goes to ``on_error`` for a substitute result (a recorded
failure); without ``on_error`` the first such error is raised after everything in flight has been delivered. An
error raised while pulling the next item (``StageBudgetSpent``) stops dispatch, drains the solves in flight, then
propagates. Nothing finished is ever dropped.

From a config to an executor: ``harness.app.executor_factory.make_executor``.
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import Any, Callable, Iterable, Literal, Protocol, Sequence, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")
R = TypeVar("R")
H = TypeVar("H")

OnResult = Callable[[int, Any], None]
OnError = Callable[[int, Any, BaseException], Any]

class ExecutorError(RuntimeError):
    """The executor cannot run solves (no Ray installed, no cluster at the address); nothing was started."""


class ExecutorConfig(BaseModel):
    """The ``executor`` config group (``harness/conf/executor/*.yaml``; its ``base`` entry is this model).

    ``workers``: local threads (None: the caller's default - ``optimize.task_workers``, 1 for benchmarks).
    Ray: ``address`` (``auto``: the running cluster, ``RAY_ADDRESS`` or a local head; ``local``: start a private
    one on this machine; ``ray://host:10001``: Ray Client; ``host:6379``: join as a driver), the resources of *one
    solve* (``num_cpus``, ``num_gpus``, ``memory_gb``), ``max_in_flight`` (None: cluster CPUs / ``num_cpus``),
    ``max_retries`` (Ray reruns a solve whose worker process died this often; then it is a recorded failure),
    ``runtime_env`` (Ray's, e.g. ``{working_dir: ., pip: [...]}`` for nodes without the project installed),
    ``connect_timeout_s`` (how long an explicit address may take to answer before it is an error).
    """

    model_config = ConfigDict(extra="forbid")

    name: Literal["local", "ray"] = "local"
    workers: int | None = Field(None, ge=1)
    address: str = "auto"
    num_cpus: float = Field(1.0, gt=0)
    num_gpus: float = Field(0.0, ge=0)
    memory_gb: float | None = Field(None, gt=0)
    max_in_flight: int | None = Field(None, ge=1)
    max_retries: int = Field(1, ge=0)
    runtime_env: dict[str, Any] | None = None
    connect_timeout_s: float = Field(10.0, gt=0)


@runtime_checkable
class SolveExecutor(Protocol):
    """Maps a function over solves (see the module docstring for the contract)."""

    name: str
    remote: bool  # True: the function runs in other processes, maybe other machines (ship plain specs, files back)

    @property
    def slots(self) -> int: ...

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_result: OnResult | None = None,
            on_error: OnError | None = None) -> list[R]: ...

    def close(self) -> None: ...


def run_bounded(
    submit: Callable[[Any], H],
    wait_any: Callable[[Sequence[H]], Sequence[H]],
    outcome: Callable[[H], Any],
    items: Iterable[Any],
    slots: int,
    *,
    on_result: OnResult | None = None,
    on_error: OnError | None = None,
    errors: tuple[type[BaseException], ...] = (Exception,),
) -> list[Any]:
    """The shared loop of every executor: lazy dispatch of at most ``slots`` items, delivery as they finish.

    ``submit(item) -> handle``, ``wait_any(handles) -> finished handles``, ``outcome(handle) -> result`` (raises
    what the solve raised: one of ``errors`` becomes ``on_error``'s substitute)."""
    source = iter(enumerate(items))
    pending: dict[Any, tuple[int, Any]] = {}
    results: dict[int, Any] = {}
    stop: BaseException | None = None  # raised while pulling the next item: no more dispatch
    failure: BaseException | None = None  # first solve error without an on_error
    exhausted = False

    def fill() -> None:
        nonlocal exhausted, stop
        while not exhausted and len(pending) < max(1, slots):
            try:
                index, item = next(source)
            except StopIteration:
                exhausted = True
                return
            except Exception as exc:  # noqa: BLE001 - e.g. StageBudgetSpent: drain what runs, then re-raise
                stop, exhausted = exc, True
                return
            pending[submit(item)] = (index, item)

    fill()
    while pending:
        for handle in wait_any(list(pending)):
            index, item = pending.pop(handle)
            try:
                result = outcome(handle)
            except errors as exc:
                if on_error is None:
                    failure = failure or exc
                    continue
                result = on_error(index, item, exc)
            results[index] = result
            if on_result is not None:
                on_result(index, result)
        fill()
    if failure is not None:
        raise failure
    if stop is not None:
        raise stop
    return [results[i] for i in sorted(results)]


class LocalExecutor:
    """Threads of this process (``workers`` at once; 1 runs each solve inline in the calling thread, exactly as
    before the seam existed). The function gets the driver's live objects (its LLM client, its folders)."""

    name = "local"
    remote = False

    def __init__(self, workers: int = 1) -> None:
        self.workers = max(1, int(workers))

    @property
    def slots(self) -> int:
        return self.workers

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_result: OnResult | None = None,
            on_error: OnError | None = None) -> list[R]:
        if self.workers == 1:
            def inline(item: T) -> cf.Future:
                future: cf.Future = cf.Future()
                try:
                    future.set_result(fn(item))
                except Exception as exc:  # noqa: BLE001 - delivered through on_error / re-raised by run_bounded
                    future.set_exception(exc)
                return future

            return run_bounded(inline, lambda fs: fs[:1], lambda f: f.result(), items, 1, on_result=on_result,
                               on_error=on_error)
        with cf.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="solve") as pool:
            def wait_any(futures: Sequence[cf.Future]) -> Sequence[cf.Future]:
                done, _ = cf.wait(futures, return_when=cf.FIRST_COMPLETED)
                return [f for f in futures if f in done]  # input order among those done

            return run_bounded(lambda item: pool.submit(fn, item), wait_any, lambda f: f.result(), items,
                               self.workers, on_result=on_result, on_error=on_error)

    def close(self) -> None:
        pass
