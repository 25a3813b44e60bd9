"""A process's descendants, read from /proc, and a safe way to kill those still running.

Killing a probe's process group is not enough under torchrun: it starts each
rank with start_new_session=True, so the ranks (and their loader workers)
live in process groups of their own, and once torchrun dies they are
reparented away from the probe's tree. The runner therefore records the
tree while the probe runs (`Tree.record`) and, when it ends, kills every
recorded process still alive (`Tree.kill`). A process is identified by its
pid *and* its start time, so a pid the kernel has since given to someone
else is never signalled.

Parsing is pure (`parse_stat`, `descendants`); reading /proc is in
`read_processes`. Off Linux (no /proc) the tree stays empty.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat the tree needs (see proc(5))."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgid: int
    sid: int
    start_ticks: int  # since boot, in clock ticks: with the pid, names the process
    cpu_ticks: int = 0  # utime + stime + cutime + cstime: its CPU time and its reaped children's
    self_ticks: int = 0  # utime + stime: its own CPU time alone

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start_ticks

    @property
    def running(self) -> bool:
        """Alive and not a zombie (a zombie holds no memory or GPU, only its pid)."""
        return self.state not in ("Z", "X", "x")


def parse_stat(text: str) -> ProcStat | None:
    """One /proc/PID/stat line; None when it is not in the expected form.

    The command name is in parentheses and may itself hold spaces and
    parentheses, so the fields are split after the *last* ")".
    """
    head, sep, rest = text.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    fields = rest.split()
    if not sep or not pid_text.strip().isdigit() or len(fields) < 20:
        return None
    try:
        # fields[0] is field 3 (state) of proc(5): ppid 4, pgrp 5, session 6, utime 14,
        # stime 15, cutime 16, cstime 17, starttime 22.
        return ProcStat(
            pid=int(pid_text),
            comm=comm,
            state=fields[0],
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            sid=int(fields[3]),
            start_ticks=int(fields[19]),
            cpu_ticks=sum(int(x) for x in fields[11:15]),
            self_ticks=sum(int(x) for x in fields[11:13]),
        )
    except ValueError:
        return None


def read_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """The process `pid` now; None when it is gone."""
    try:
        return parse_stat((proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


def read_processes(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every process visible in /proc, by pid; empty where there is no /proc."""
    found: dict[int, ProcStat] = {}
    try:
        entries = list(os.scandir(proc))
    except OSError:
        return found
    for entry in entries:
        if entry.name.isdigit():
            stat = read_stat(int(entry.name), proc)
            if stat is not None:
                found[stat.pid] = stat
    return found


def descendants(pid: int, processes: Mapping[int, ProcStat]) -> list[ProcStat]:
    """Children, grandchildren and so on of `pid`, parents before their children."""
    children: dict[int, list[ProcStat]] = {}
    for stat in processes.values():
        children.setdefault(stat.ppid, []).append(stat)
    found: list[ProcStat] = []
    queue = [pid]
    seen = {pid}
    while queue:
        for child in sorted(children.get(queue.pop(0), []), key=lambda s: s.pid):
            if child.pid not in seen:
                seen.add(child.pid)
                found.append(child)
                queue.append(child.pid)
    return found


def read_descendants(pid: int, proc: Path = PROC) -> list[ProcStat]:
    """The descendants of `pid` as they are now."""
    return descendants(pid, read_processes(proc))


@dataclass
class Tree:
    """The descendants of one process, as seen over its life.

    Args:
        root: the pid whose descendants are recorded (the probe's child).
        proc: where /proc is (tests point it elsewhere).
    """

    root: int
    proc: Path = PROC
    seen: dict[tuple[int, int], ProcStat] = field(default_factory=dict)

    def record(self) -> None:
        """Add the descendants running now; cheap enough to call every few polls."""
        for stat in read_descendants(self.root, self.proc):
            self.seen.setdefault(stat.key, stat)

    def alive(self) -> list[ProcStat]:
        """Recorded processes still running, the same process (pid and start time)."""
        return [stat for stat in self.seen.values() if _still(stat, self.proc)]

    def kill(self, signum: int) -> list[int]:
        """Signal every recorded process still running, and its group where it leads one.

        A group is signalled only through a leader checked to be the recorded
        process: while the leader lives, its group id cannot name another group.
        Returns the pids signalled.
        """
        hit: list[int] = []
        for stat in self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if stat.pgid == stat.pid:
                    os.killpg(stat.pid, signum)
                os.kill(stat.pid, signum)
                hit.append(stat.pid)
        return hit


def _still(stat: ProcStat, proc: Path) -> bool:
    now = read_stat(stat.pid, proc)
    return now is not None and now.start_ticks == stat.start_ticks and now.running


def running_with_argument(argument: str, proc: Path = PROC) -> list[int]:
    """Pids of running processes whose command line holds `argument` (a spec path, say)."""
    pids: list[int] = []
    for pid, stat in read_processes(proc).items():
        if not stat.running or pid == os.getpid():
            continue
        try:
            argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in argv:
            pids.append(pid)
    return pids
