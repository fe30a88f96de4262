"""Run model-written Python in a short-lived, confined process (the mechanism behind the ``run_python`` tool).

Why a separate process with kernel confinement and not a restricted interpreter: Python cannot be sandboxed from
inside (every "safe eval" has been escaped), so the code runs as ordinary Python in a child process that has
locked itself down before the first line of the model's code runs:

* **resource limits** (``setrlimit``): address space, CPU seconds, size of any file written (stdout and stderr are
  files too, so a print flood stops at that size), open files, no core dumps; the parent adds a wall-clock limit
  and kills the child's whole process group when it passes;
* **Landlock** (Linux >= 5.13): the file system is read-only for the Python runtime and the shared libraries it
  loads, read-only for the data folder, read-write for the scratch folder, and closed everywhere else; on ABI >= 4
  no TCP bind/connect, on ABI >= 6 no signals to processes outside the sandbox;
* **seccomp** (libseccomp via ``pyseccomp``): no sockets, no new processes (``fork``/``vfork``/``clone`` without
  ``CLONE_THREAD``; ``clone3`` answers ENOSYS so threads fall back to ``clone``), no ``execve``, no ``ptrace``, no
  signals but to itself, no raising its own limits, no mounts, namespaces, BPF, keyrings, io_uring or modules.

``mode="strict"`` (the default) refuses to run when Landlock or seccomp is not available here
(:class:`SandboxUnavailable` names what is missing); ``mode="process"`` is the weaker opt-in that runs with the
resource limits and the wall clock only, and every result says which isolation it ran under.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["SandboxLimits", "SandboxResult", "SandboxUnavailable", "isolation_report", "kernel_seccomp", "run_sandboxed"]

Mode = Literal["strict", "process"]


class SandboxUnavailable(RuntimeError):
    """The strict sandbox cannot be built on this machine (and the weaker mode was not asked for)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run. ``output_chars``: how much of stdout/stderr the caller gets back (the files themselves
    stop at ``file_mb``)."""

    wall_s: float = 30.0
    cpu_s: int = 20
    memory_mb: int = 2048
    file_mb: int = 8
    open_files: int = 64
    output_chars: int = 8000


@dataclass
class SandboxResult:
    ok: bool
    stdout: str
    stderr: str
    returncode: int | None
    isolation: str  # "landlock+seccomp+rlimits" or "process only (rlimits, wall clock): files and network NOT confined"
    seconds: float
    error: str | None = None  # why it failed, in words (limit hit, exception, refused)
    files: list[str] = field(default_factory=list)  # what the code left in its scratch folder

    def to_dict(self) -> dict:
        return asdict(self)


STRICT = "landlock+seccomp+rlimits"
WEAK = "process only (rlimits, wall clock): files and network NOT confined"


def _landlock_abi() -> int:
    """Landlock ABI version of this kernel, 0 when it has none (or it is disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return max(int(abi), 0)


def _seccomp_available() -> bool:
    try:
        import pyseccomp  # noqa: F401

        pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    except Exception:  # the package or libseccomp.so is missing
        return False
    return True


def kernel_seccomp() -> bool:
    """Whether the kernel itself has seccomp (``Seccomp:`` in /proc/self/status), whatever is installed."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            return any(line.startswith("Seccomp:") for line in fh)
    except OSError:
        return False


def isolation_report() -> dict:
    """What this machine offers: the Landlock ABI (0 = none), whether the kernel has seccomp, and whether seccomp
    filters can be built here (that also needs pyseccomp and libseccomp2: a missing one is a broken install)."""
    abi, seccomp = _landlock_abi(), _seccomp_available()
    return {"landlock_abi": abi, "kernel_seccomp": kernel_seccomp(), "seccomp": seccomp,
            "strict": abi >= 1 and seccomp}


def _runtime_read_paths() -> list[str]:
    """Folders the Python runtime and its libraries are read from (read-only inside the sandbox)."""
    import site
    import sysconfig

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    paths |= {p for key, p in sysconfig.get_paths().items() if key in ("stdlib", "platstdlib", "purelib", "platlib")}
    user_site = site.getusersitepackages()
    if isinstance(user_site, str):
        paths.add(user_site)
    paths |= {"/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/usr/share/zoneinfo", "/etc/ld.so.cache",
              "/dev/null", "/dev/urandom", "/dev/zero"}
    return sorted(p for p in paths if p and os.path.exists(p))


def run_sandboxed(code: str, *, data: dict[str, bytes] | None = None, limits: SandboxLimits | None = None,
                  mode: Mode = "strict", preamble: str = "") -> SandboxResult:
    """Run ``code`` in a confined child process; ``data`` files are written to a read-only folder whose path the
    code finds in ``DATA_DIR``, linked into its working folder by name (``preamble`` runs first, e.g. to load
    them). Never raises for anything the code
    does: limits hit, exceptions and refusals come back as ``ok=False`` with ``error`` in words."""
    limits = limits or SandboxLimits()
    t0 = time.perf_counter()
    if mode == "strict":
        report = isolation_report()
        if not report["strict"]:
            seccomp = ("seccomp (this kernel has none)" if not report["kernel_seccomp"]
                       else "seccomp (pip install pyseccomp; needs libseccomp2)")
            missing = [name for name, ok in (("Landlock", report["landlock_abi"] >= 1), (seccomp, report["seccomp"]))
                       if not ok]
            raise SandboxUnavailable(
                f"run_python refuses: {' and '.join(missing)} not available on this machine; opt into the weaker "
                "process-only sandbox (mode='process', HARNESS_SR_SANDBOX=process), which confines neither files "
                "nor network")
    root = Path(tempfile.mkdtemp(prefix="harness-sr-sandbox-"))
    try:
        data_dir, scratch = root / "data", root / "scratch"
        data_dir.mkdir()
        scratch.mkdir()
        names = [Path(name).name for name in data or {}]
        for name, content in zip(names, (data or {}).values()):
            (data_dir / name).write_bytes(content)
            # also in the working folder, as a link to the read-only file: models open 'data.csv' by its bare name
            os.symlink(data_dir / name, scratch / name)
        config = {
            "mode": mode, "code": code, "preamble": preamble, "data_dir": str(data_dir), "scratch": str(scratch),
            "read_paths": _runtime_read_paths(), "limits": asdict(limits),
        }
        config_path = root / "config.json"
        config_path.write_text(json.dumps(config))
        out_path, err_path = root / "stdout.txt", root / "stderr.txt"
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-I", str(Path(__file__).with_name("_sandbox_child.py")),
                                     str(config_path)], stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                    cwd=scratch, start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
        stdout, out_cut = _read_bounded(out_path, limits.output_chars)
        stderr, _ = _read_bounded(err_path, limits.output_chars)
        files = sorted(p.name for p in scratch.iterdir() if p.name not in names)[:50]
        isolation = STRICT if mode == "strict" else WEAK
        code_rc = proc.returncode
        error = _why(code_rc, timed_out, stderr, limits, out_path)
        if out_cut and error is None:
            stdout += f"\n[output cut at {limits.output_chars} characters]"
        return SandboxResult(ok=error is None, stdout=stdout, stderr=stderr, returncode=code_rc, isolation=isolation,
                             seconds=time.perf_counter() - t0, error=error, files=files)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _read_bounded(path: Path, limit: int) -> tuple[str, bool]:
    with open(path, "rb") as fh:
        raw = fh.read(limit * 4 + 4)
    text = raw.decode("utf-8", errors="replace")
    return text[:limit], len(text) > limit or path.stat().st_size > len(raw)


def _why(returncode: int | None, timed_out: bool, stderr: str, limits: SandboxLimits, out_path: Path) -> str | None:
    """The failure in words, from how the child ended."""
    if timed_out:
        return f"wall-clock limit of {limits.wall_s:g} s reached: the process was killed"
    if returncode == 0:
        return None
    if returncode == -signal.SIGXCPU:
        return f"CPU limit of {limits.cpu_s} s reached"
    if returncode is not None and returncode < 0:
        return f"killed by signal {signal.Signals(-returncode).name}"
    if out_path.stat().st_size >= limits.file_mb * 1024 * 1024:
        return f"output limit of {limits.file_mb} MB reached"
    last = [line for line in stderr.strip().splitlines() if line.strip()]
    if returncode == 3:  # the child could not build the sandbox
        return last[-1] if last else "sandbox setup failed"
    return (last[-1] if last else f"exit status {returncode}")[:500]
