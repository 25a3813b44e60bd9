"""A probe's guardian: `python -S guardian.py PARENT_PID -- ARGV...`.

Every probe child runs under one. It stands between tuneup and the child so
that nothing a probe started outlives tuneup, however tuneup ends, SIGKILL
included (which no handler in tuneup can see):

* it asks the kernel for a signal when tuneup dies (PR_SET_PDEATHSIG), which
  wakes it to check that its parent is still tuneup (it checks every 50 ms too);
* it is a child subreaper (PR_SET_CHILD_SUBREAPER), so processes that leave
  their parent's session (torchrun's ranks, a script's `sleep`) are
  reparented to it, not to init, and it can still find and stop them;
* when tuneup is gone it stops everything below it (SIGTERM, then SIGKILL
  after a grace) and exits; when the child exits it kills what the child
  left behind and exits with the child's own status (a signal death is
  passed on as the same signal), so the runner classifies the child as if
  it had started it directly.

It runs in the child's process group (tuneup starts it in a session of its
own), so the runner's SIGTERM to the group reaches the child; the guardian
only notes such signals and waits for the child to end. Standard library
only, started with `-S`: it costs about 10 ms a probe.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1  # prctl(2)
PR_SET_CHILD_SUBREAPER = 36
PARENT_GONE = signal.SIGUSR2  # what the kernel sends when tuneup dies
GRACE_S = 2.0  # after tuneup's death: SIGTERM, this long, then SIGKILL
POLL_S = 0.05
EXIT_CANNOT_START = 127


def guarded(argv: list[str], parent: int, python: str = sys.executable) -> list[str]:
    """`argv` run under a guardian that watches the process `parent` (normally tuneup)."""
    # -I: neither this folder nor the probe's PYTHONPATH goes on sys.path; -S: no site.
    return [python, "-I", "-S", str(Path(__file__).resolve()), str(parent), "--", *argv]


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux: the parent check alone
        return False


def _wake(signum: int, frame: object) -> None:
    """PARENT_GONE only wakes the loop: the parent check decides (a user's own SIGUSR2,
    from `sbatch --signal` say, must not end a healthy probe)."""


def _ignore(signum: int, frame: object) -> None:
    """TERM, INT and HUP reach the child through the group; the guardian waits for it."""


def _children_of(pid: int) -> list[int]:
    """Pids of the processes whose parent is `pid` (from /proc), in no particular order."""
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(name))
    return found


def _below(pid: int) -> list[int]:
    """Every descendant of `pid`, parents first."""
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in _children_of(queue.pop(0)):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def _signal_all(signum: int) -> None:
    me = os.getpid()
    for pid in _below(me):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _reap() -> list[tuple[int, int]]:
    """Reap every child that has ended (the child and adopted orphans alike)."""
    ended: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, status))


def _stop_everything(grace_s: float) -> None:
    _signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap()
        if not _below(os.getpid()):
            return
        time.sleep(POLL_S)
    _signal_all(signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while _below(os.getpid()) and time.monotonic() < deadline:  # D state: do not wait forever
        _reap()
        time.sleep(POLL_S / 5)
    _reap()


def _exit_like(status: int) -> None:
    """End this process the way the child ended: the same exit code, or the same signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child's dump, if any, is enough
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        time.sleep(1)  # a signal the default action ignores: fall through to an exit status
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def main(args: list[str]) -> None:
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        sys.stderr.write("usage: guardian.py PARENT_PID -- ARGV...\n")
        os._exit(2)
    parent, argv = int(args[0]), args[2:]
    signal.signal(PARENT_GONE, _wake)
    _prctl(PR_SET_PDEATHSIG, int(PARENT_GONE))
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # SIGCHLD is waited for, not handled: the loop wakes the moment a child ends.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        child = os.fork()
    except OSError as exc:
        sys.stderr.write(f"could not start the worker ({argv[0]}): {exc.strerror or exc}\n")
        os._exit(EXIT_CANNOT_START)
    if child == 0:
        signal.signal(PARENT_GONE, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            sys.stderr.write(f"could not start the worker ({argv[0]}): {exc.strerror or exc}\n")
            sys.stderr.flush()
        os._exit(EXIT_CANNOT_START)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    while True:
        for pid, status in _reap():
            if pid == child:
                _signal_all(signal.SIGKILL)  # what the child left behind, as the runner would
                _reap()
                _exit_like(status)
        if os.getppid() != parent:  # the kernel reparents before it sends PARENT_GONE
            _stop_everything(GRACE_S)
            os._exit(128 + signal.SIGTERM)
        signal.sigtimedwait({signal.SIGCHLD}, POLL_S)


if __name__ == "__main__":
    main(sys.argv[1:])
