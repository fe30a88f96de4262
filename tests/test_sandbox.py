"""run_python's sandbox against hostile code: each attack is contained with a clear error and the caller goes
on. Strict isolation needs Landlock and seccomp in the kernel and pyseccomp + libseccomp2 installed. The tests
skip only where the kernel lacks Landlock or seccomp (the skip says which; the refusal itself is tested); a
missing package is a broken install, so there they fail."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from harness.core.context import AgentContext, BudgetTracker, FitSettings
from harness.core.task import Task
from harness.tools.code_tools import SANDBOX_ENV, RunPythonTool
from harness.tools.sandbox import SandboxLimits, SandboxUnavailable, isolation_report, run_sandboxed

REPORT = isolation_report()
KERNEL_LACKS = [name for name, ok in (("Landlock", REPORT["landlock_abi"] >= 1),
                                      ("seccomp", REPORT["kernel_seccomp"])) if not ok]
SKIP_REASON = f"this kernel lacks {' and '.join(KERNEL_LACKS)}: the refusal is tested instead"
needs_strict = pytest.mark.skipif(bool(KERNEL_LACKS), reason=SKIP_REASON)
LIMITS = SandboxLimits(wall_s=20, cpu_s=3, memory_mb=1024, file_mb=1, output_chars=2000)


def test_pyseccomp_and_libseccomp_are_installed():
    """A core dependency: without it strict isolation is off on any kernel, which must read as a broken install."""
    import pyseccomp

    pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)  # loads libseccomp2
    assert REPORT["seccomp"]


@needs_strict
def test_strict_isolation_is_on_where_the_kernel_has_it():
    assert REPORT["strict"], f"the kernel has Landlock and seccomp but strict isolation is off: {REPORT}"


def run(code: str, **kwargs):
    return run_sandboxed(code, limits=kwargs.pop("limits", LIMITS), **kwargs)


@needs_strict
def test_numpy_scipy_pandas_work_on_the_read_only_data_and_the_scratch_folder():
    code = ("import pandas as pd\nfrom scipy.optimize import curve_fit\n"
            "df = pd.read_csv('d.csv')\n"  # linked into the working folder by name
            "p, _ = curve_fit(lambda x, a: a * x, df.x, df.y)\n"
            "open('note.txt', 'w').write('kept')\nprint(round(p[0], 3), open('note.txt').read())")
    result = run(code, data={"d.csv": b"x,y\n1,2\n2,4\n3,6\n"})
    assert result.ok, result.error
    assert result.stdout.split() == ["2.0", "kept"]
    assert result.isolation.startswith("landlock+seccomp") and result.files == ["note.txt"]


@needs_strict
def test_no_network_a_listening_socket_here_is_never_reached():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    result = run(f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('in')")
    assert not result.ok and "Operation not permitted" in result.error
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()


@needs_strict
def test_files_outside_are_neither_read_nor_written(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    read = run(f"print(open({str(secret)!r}).read())")
    assert not read.ok and "Permission denied" in read.error and "do not read" not in read.stdout
    target = tmp_path / "written.txt"
    write = run(f"open({str(target)!r}, 'w').write('x')")
    assert not write.ok and "Permission denied" in write.error and not target.exists()
    data = run("open(DATA_DIR + '/d.csv', 'a').write('1,1\\n')", data={"d.csv": b"x,y\n"})
    assert not data.ok and "Permission denied" in data.error  # the data folder is read-only
    linked = run("open('d.csv', 'a').write('1,1\\n')", data={"d.csv": b"x,y\n"})
    assert not linked.ok and "Permission denied" in linked.error  # its link in the working folder too


@needs_strict
def test_no_child_processes_fork_bomb_and_subprocess_fail_at_once():
    start = time.perf_counter()
    bomb = run("import os\nwhile True:\n    os.fork()")
    assert not bomb.ok and "Operation not permitted" in bomb.error
    sub = run("import subprocess\nsubprocess.run(['ls', '/'])")
    assert not sub.ok and "Operation not permitted" in sub.error
    assert time.perf_counter() - start < 20
    threads = run("import threading\nt = threading.Thread(target=lambda: print('thread'))\nt.start()\nt.join()")
    assert threads.ok and threads.stdout.strip() == "thread"  # threads are not processes


@needs_strict
def test_it_cannot_signal_its_parent_nor_lift_its_limits():
    killed = run("import os\nos.kill(os.getppid(), 9)")
    assert not killed.ok and "Operation not permitted" in killed.error
    lifted = run("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))\nprint('lifted')")
    assert not lifted.ok and "lifted" not in lifted.stdout


@pytest.mark.parametrize("mode", ["strict", "process"])
def test_memory_bomb_infinite_loop_hang_and_output_flood_hit_their_limits(mode):
    if mode == "strict" and KERNEL_LACKS:
        pytest.skip(SKIP_REASON)
    memory = run("x = bytearray(8 * 10**9)\nprint(len(x))", mode=mode)
    assert not memory.ok and "MemoryError" in memory.error
    loop = run("while True:\n    pass", mode=mode)
    assert not loop.ok and "CPU limit of 3 s" in loop.error
    hang = run("import time\ntime.sleep(60)", mode=mode, limits=SandboxLimits(wall_s=4, cpu_s=3))
    assert not hang.ok and "wall-clock limit of 4 s" in hang.error and hang.seconds < 15
    flood = run("import sys\nwhile True:\n    sys.stdout.write('x' * 100000)", mode=mode)
    assert not flood.ok and "output limit of 1 MB" in flood.error and len(flood.stdout) <= LIMITS.output_chars
    assert mode == "strict" or "NOT confined" in memory.isolation


def test_strict_mode_refuses_where_the_kernel_cannot_confine(monkeypatch):
    import harness.tools.sandbox as sandbox

    monkeypatch.setattr(sandbox, "_landlock_abi", lambda: 0)
    with pytest.raises(SandboxUnavailable, match="Landlock.*HARNESS_SR_SANDBOX=process"):
        sandbox.run_sandboxed("print(1)")
    weak = sandbox.run_sandboxed("print(1)", mode="process", limits=LIMITS)  # the opt-in says what it is
    assert weak.ok and weak.stdout.strip() == "1" and "NOT confined" in weak.isolation


def _context() -> AgentContext:
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 2, 200)
    task = Task.from_arrays(x[:, None], 3.0 * x**0.5, name="toy", input_names=["P"], input_descriptions=["load"])
    return AgentContext(task=task, fit=FitSettings(n_starts=1, max_seconds=1.0), budget=BudgetTracker())


def test_run_python_tool_sees_the_fitting_rows_and_a_hostile_call_is_a_recorded_failure(monkeypatch):
    if KERNEL_LACKS:
        monkeypatch.setenv(SANDBOX_ENV, "process")
    tool = RunPythonTool(_context())
    tool.limits = SandboxLimits(wall_s=20, cpu_s=2)
    good = tool(code="import numpy as np\nprint(len(df), round(float(np.polyfit(np.log(df.P), "
                     "np.log(df.iloc[:, -1]), 1)[0]), 3))")
    assert good.ok, good.error
    n_rows, slope = good.result_str.split()
    assert int(n_rows) == len(tool.context.train.y) + len(tool.context.valid.y) and slope == "0.5"
    bad = tool(code="while True:\n    pass")  # the solve goes on: a failed call, not an exception
    assert not bad.ok and "limit" in bad.error
    monkeypatch.setenv(SANDBOX_ENV, "loose")
    odd = tool(code="print(1)")
    assert not odd.ok and "HARNESS_SR_SANDBOX" in odd.error
