"""Make ``tests.doubles`` importable as one module (in this process and in the CLIs the tests start), and give each
pytest-xdist worker a core of its own.

Over two workers (``-n 2``) on two cores, a test whose llama.cpp threads share a core with the other worker's test
runs 3-9x slower (its threads wait on each other at every layer). Pinned, each worker is the serial suite on one
core: the embedded model sees one usable core (``harness.core.resources.usable_cpus``) and every process a test
starts inherits the pin.
"""

import os
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_configure(config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... in a worker; unset otherwise
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= len(cores):  # more workers than cores: leave the scheduler to share them
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


def pytest_collection_modifyitems(config, items) -> None:
    """Over several workers, the tests marked ``slow`` first (in their own order): the longest ones start at once
    instead of leaving one worker busy after the other has finished."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
