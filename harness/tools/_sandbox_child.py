"""The sandbox's child process: lock down, then run the code (``python -I _sandbox_child.py config.json``).

Standalone on purpose (imports nothing from this package): it is started by path with ``-I``, so neither the
working folder nor the package's source folder is on its import path. Order matters: the libraries the code may
use are imported first (their files are opened while the file system is still open), then limits, then Landlock,
then seccomp (which also forbids undoing the rest), and only then the code. Exit status 3 = the sandbox could not
be built (the code never ran).
"""

import ctypes
import errno
import json
import os
import resource
import sys
import traceback

# Landlock constants (include/uapi/linux/landlock.h)
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_ALL_V1 = (1 << 13) - 1
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
PR_SET_NO_NEW_PRIVS = 38
CLONE_THREAD = 0x00010000


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _check(result, what):
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def apply_landlock(read_paths, data_dir, scratch):
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(SYS_CREATE_RULESET, None, 0, 1)
    if abi < 1:
        raise OSError("Landlock is not available")
    handled = FS_ALL_V1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0) | (
        FS_IOCTL_DEV if abi >= 5 else 0)
    attr = _RulesetAttr(handled, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
                     "landlock_create_ruleset")
    read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    rules = [(p, read) for p in read_paths] + [(data_dir, FS_READ_FILE | FS_READ_DIR), (scratch, handled)]
    for path, access in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not os.path.isdir(path):
                access &= FILE_ONLY
            rule = _PathBeneath(access & handled, fd)
            _check(libc.syscall(SYS_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), f"landlock_add_rule {path}")
        finally:
            os.close(fd)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(libc.syscall(SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    os.close(ruleset)


def apply_seccomp(sc):
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in ("socket", "socketpair", "fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv",
                 "process_vm_writev", "tkill", "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "setrlimit",
                 "mount", "umount2", "unshare", "setns", "chroot", "pivot_root", "bpf", "perf_event_open",
                 "userfaultfd", "keyctl", "add_key", "request_key", "io_uring_setup", "init_module",
                 "finit_module", "delete_module", "kexec_load", "reboot", "swapon", "swapoff", "seccomp"):
        try:
            f.add_rule(deny, name)
        except Exception:  # a syscall this architecture does not have
            pass
    f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))  # processes, not threads
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # flags are behind a pointer: make libc fall back to clone
    pid = os.getpid()
    f.add_rule(deny, "kill", sc.Arg(0, sc.NE, pid))
    f.add_rule(deny, "tgkill", sc.Arg(0, sc.NE, pid))
    f.add_rule(deny, "prlimit64", sc.Arg(2, sc.NE, 0))  # reading a limit is fine, setting one is not
    f.load()


def apply_limits(limits):
    mb = 1024 * 1024
    for res, value in ((resource.RLIMIT_AS, limits["memory_mb"] * mb), (resource.RLIMIT_FSIZE, limits["file_mb"] * mb),
                       (resource.RLIMIT_NOFILE, limits["open_files"]), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))
    usage = resource.getrusage(resource.RUSAGE_SELF)  # the limit counts from process start: add the imports' share
    cpu = int(usage.ru_utime + usage.ru_stime + 0.999) + int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def main():
    with open(sys.argv[1]) as fh:
        config = json.load(fh)
    os.unlink(sys.argv[1])  # the code has no business reading its own instructions
    try:
        import numpy  # noqa: F401  (loaded before the file rules close the file system)
        import pandas  # noqa: F401
        import scipy.optimize  # noqa: F401
        import scipy.stats  # noqa: F401
    except ImportError:
        pass
    try:
        apply_limits(config["limits"])
        if config["mode"] == "strict":
            import pyseccomp  # finds libseccomp through ldconfig: before the file rules

            apply_landlock(config["read_paths"], config["data_dir"], config["scratch"])
            apply_seccomp(pyseccomp)
    except Exception as exc:  # noqa: BLE001 - any failure here means the code must not run
        sys.stderr.write(f"sandbox setup failed: {exc}\n")
        sys.exit(3)
    namespace = {"__name__": "__main__", "DATA_DIR": config["data_dir"]}
    try:
        if config["preamble"]:
            exec(compile(config["preamble"], "<preamble>", "exec"), namespace)  # noqa: S102 - our own text
        # the model's code: the one place it runs, inside the confined process (harness/tools/sandbox.py)
        exec(compile(config["code"], "<model code>", "exec"), namespace)  # noqa: S102
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - report the code's own error to the caller, last line first
        lines = traceback.format_exc().splitlines()
        sys.stderr.write("\n".join(lines[-12:]) + "\n")
        sys.stdout.flush()
        sys.exit(1)


if __name__ == "__main__":
    main()
