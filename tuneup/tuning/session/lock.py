"""One owner per results folder: a lock file naming the tuneup that holds it.

The lock is an advisory `flock` on `DIR/.tuneup.lock`, which the kernel
releases when its holder dies however it dies, so a dead owner's lock is
taken over at once; the file also records the owner (pid, host, start) so a
refusal can say who holds the folder. Where the file system refuses `flock`
(some NFS and Lustre mounts), the record alone decides: an owner on this
host whose process is gone is taken over; one on another host is reported.
The file is emptied, never removed, on release: removing a locked file lets
two later runs lock two different files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from tuneup.cluster.proctree import read_stat
from tuneup.errors import UsageError

LOCK_FILE = ".tuneup.lock"


@dataclass(frozen=True)
class Owner:
    """Who holds (or last held) a results folder."""

    pid: int
    host: str
    started: str
    start_ticks: int | None = None  # with the pid, names the process (pids are reused)

    def alive_here(self, host: str) -> bool | None:
        """Whether the owner still runs: None when it is on another host (unknowable here)."""
        if _short(self.host) != _short(host):
            return None
        now = read_stat(self.pid)
        if now is None or not now.running:
            return False
        return self.start_ticks is None or now.start_ticks == self.start_ticks

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, since {self.started}"


class FolderBusy(UsageError):
    """Another live tuneup owns the folder."""


class ResultsLock:
    """The lock of one results folder; `acquire` it before writing there, `release` at the end.

    Args:
        folder: the results folder (it must exist).
        host: this host's name (socket.gethostname() when None).
    """

    def __init__(self, folder: Path, host: str | None = None) -> None:
        self.path = folder / LOCK_FILE
        self.host = host or socket.gethostname()
        self._fd: int | None = None

    def acquire(self) -> Owner | None:
        """Take the folder; returns the previous owner when it died holding it.

        Raises:
            FolderBusy: a live tuneup holds it (named, with the way out).
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            previous = _read_owner(fd)
            if not self._lock(fd, previous):
                raise FolderBusy(self._busy(previous))
            _write_owner(fd, self._me())
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return previous

    def release(self) -> None:
        """Give the folder back; safe to call twice, from two threads."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing drops the flock

    def _lock(self, fd: int, previous: Owner | None) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
        # No flock on this file system: the owner's record decides.
        return previous is None or previous.alive_here(self.host) is False

    def _busy(self, owner: Owner | None) -> str:
        folder = self.path.parent
        if owner is None:
            return f"{folder} is in use by another tuneup: wait for it, or use another --out folder"
        text = f"{folder} is in use by another tuneup ({owner.describe()})"
        if owner.alive_here(self.host) is None:
            return (
                f"{text}: wait for it, or if that run is gone, delete {self.path} and "
                "run again with --resume"
            )
        return f"{text}: wait for it or stop it (kill {owner.pid}), then continue with --resume"

    def _me(self) -> Owner:
        me = read_stat(os.getpid())
        return Owner(
            pid=os.getpid(),
            host=self.host,
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            start_ticks=me.start_ticks if me is not None else None,
        )


def _read_owner(fd: int) -> Owner | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        data = json.loads(raw)
        return Owner(
            pid=int(data["pid"]),
            host=str(data["host"]),
            started=str(data["started"]),
            start_ticks=data.get("start_ticks"),
        )
    except (ValueError, KeyError, TypeError):
        return None  # empty (released) or not ours


def _write_owner(fd: int, owner: Owner) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(owner.__dict__).encode() + b"\n")
    os.fsync(fd)


def _short(host: str) -> str:
    return host.split(".")[0]
