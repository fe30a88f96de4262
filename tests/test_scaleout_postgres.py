"""Scale-out for real: two `python -m optimize` workers on one stage-2 study in a real PostgreSQL server.

The server is Debian's PostgreSQL (initdb + pg_ctl), started by the fixture in a throwaway folder on a free
port, as the ``postgres`` user when the tests run as root (PostgreSQL refuses root), and stopped afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness import FrozenHarness

REPO = Path(__file__).resolve().parents[1]
PG_BIN = next((p for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True) if (p / "initdb").exists()),
              None) if Path("/usr/lib/postgresql").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="module")
def postgres_url():
    initdb = str(PG_BIN / "initdb") if PG_BIN else shutil.which("initdb")
    if initdb is None:
        pytest.skip("no PostgreSQL server binaries (Debian package postgresql)")
    import psycopg2  # noqa: F401 - the test extra (psycopg2-binary): a missing one is a broken install, not a skip
    pg_ctl = str(Path(initdb).with_name("pg_ctl"))
    root = Path(tempfile.mkdtemp(prefix="harness-pg-", dir="/tmp"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = _free_port()
    subprocess.run(_as_postgres([initdb, "-D", str(data), "-U", "harness", "--auth=trust", "-E", "UTF8"]),
                   check=True, capture_output=True, timeout=120)
    subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "-o",
                                 f"-p {port} -k {sock} -c listen_addresses=127.0.0.1", "start"]),
                   check=True, capture_output=True, timeout=120)
    try:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, user="harness", dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE optuna")
        conn.close()
        yield f"postgresql+psycopg2://harness@127.0.0.1:{port}/optuna"
    finally:
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]), capture_output=True,
                       timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def test_two_workers_share_one_postgres_study(postgres_url: str, tmp_path: Path) -> None:
    """Exactly n_trials complete trials, no parameter set evaluated by both workers, one frozen harness."""
    import optuna

    from tests.test_optimize_app import TINY

    run_dir = tmp_path / "shared"
    cmd = [sys.executable, "-m", "optimize", *TINY, "optimize.stage2.n_trials=5",
           "optimize.stage2.bounds.repair_rounds=[0,2]", f"optimize.storage='{postgres_url}'",
           f"hydra.run.dir={run_dir}", "stage=all"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-2500:] for o in outs)
    assert not (run_dir / "optuna.db").exists()  # the study lived in PostgreSQL, not in the folder

    study = optuna.load_study(study_name="harness-sr-stage2", storage=postgres_url)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 5, [(t.number, t.state.name) for t in study.trials]
    by_worker: dict[str, set] = {}
    for t in complete:
        by_worker.setdefault(t.user_attrs.get("worker"), set()).add(tuple(sorted(t.params.items())))
    if len(by_worker) > 1:
        a, b = list(by_worker.values())[:2]
        assert not a & b
    harness = FrozenHarness.load(run_dir / "harness.json")
    assert harness.digest.startswith("sha256:") and time.monotonic() - start < 600
