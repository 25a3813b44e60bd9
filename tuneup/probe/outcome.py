"""How a probe ended: its status and reason, from its events and what happened to its process.

Pure: the runner (runner.py) watches the child and hands over what it saw (how it
ended, each rank's exit, the events, the tail of stderr); this module judges it.
The command trainer judges its own runs with the same functions.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from tuneup.cluster.launch import RankFailure, rank_failures
from tuneup.probe.events import (
    ErrorEvent,
    Event,
    ResultEvent,
    StartEvent,
    WarmupEvent,
)
from tuneup.probe.plan import ProbeSpec
from tuneup.probe.types import ProbeResult, Status

# How the child ended, as far as the runner is concerned.
EXITED = "exited"  # by itself

TIMEOUT = "timeout"  # killed by the runner at the wall-clock limit

INTERRUPTED = "interrupted"  # killed by the runner after interrupt()

CALLBACK_FAILED = "callback-failed"  # killed because on_event raised

_E = TypeVar("_E", bound=Event)

_ERROR_LABELS = {"cuda": "CUDA error", "nccl": "NCCL error", "compile": "compile error"}

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals the runner itself stops a probe with: a rank killed by one did not crash."""


def classify(
    events: Iterable[Event],
    returncode: int | None,
    ended: str,
    limit_s: float,
    stderr_tail: list[str],
    oom_kills_before: int | None = None,
) -> tuple[Status, str]:
    """Status and one human reason for how a child ended.

    Args:
        events: the child's events, in order.
        returncode: Popen's return code (negative: killed by that signal);
            None when the child never started.
        ended: EXITED, TIMEOUT, INTERRUPTED or CALLBACK_FAILED.
        limit_s: the wall-clock limit, quoted in the timeout reason.
        stderr_tail: the last lines the child wrote on stderr (under torchrun
            or srun, their report of which rank failed, and how).
        oom_kills_before: the memory cgroup's OOM-kill count when the child
            started: a SIGKILL is blamed on the OOM killer only if it rose.

    Under several ranks the cause is, in order: a rank the launcher reports
    killed by a signal without an error event of its own (it could not
    speak, and the others' errors are fallout from its death); else the
    first error event, naming its rank; else the failed rank the launcher
    names first.
    """
    events = list(events)
    if ended == INTERRUPTED:
        return Status.CRASH, "interrupted by user"
    if ended == TIMEOUT:
        return Status.TIMEOUT, f"no result within {limit_s:g} s; killed"
    if ended == CALLBACK_FAILED:
        return Status.CRASH, "stopped: the event handler failed"
    last_line = _last_line(stderr_tail)
    if returncode is None:
        return Status.CRASH, last_line or "the worker did not start"
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    failures = rank_failures(stderr_tail) if returncode != 0 else []
    silent = _silent_death(failures, errors)
    if silent is not None:
        return Status.CRASH, _rank_reason(silent, oom_kills_before)
    # The first error is the cause; later ones tend to be fallout from it.
    if errors:
        return _classify_error(errors[0])
    has_result = any(isinstance(e, ResultEvent) for e in events)
    if returncode == 0:
        if has_result:
            return Status.OK, ""
        return Status.CRASH, with_detail("worker exited without a result", last_line)
    if returncode < 0:
        reason = signal_reason(-returncode, oom_kills_before=oom_kills_before)
        return Status.CRASH, with_detail(reason, last_line)
    if failures:
        root = next((f for f in failures if f.root_cause), failures[0])
        return Status.CRASH, _rank_reason(root, oom_kills_before)
    prefix = f"worker exited with status {returncode}"
    if has_result:
        prefix += " after its result"
    return Status.CRASH, with_detail(prefix, last_line)


# Signals a process sends itself when its own code fails: they come back the next time.
CRASH_SIGNALS = frozenset(
    int(s) for s in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)
)


def transient(
    events: Iterable[Event],
    returncode: int | None,
    ended: str,
    stderr_tail: list[str],
) -> bool:
    """Whether a failure may not happen again: the worker (or a rank) killed by a signal
    from outside (SIGKILL, SIGTERM, ...; not a crash signal) before it could report an
    error, or an NCCL timeout."""
    if ended != EXITED or returncode is None:
        return False
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    if any(e.kind == "nccl" and "timeout" in e.message.lower() for e in errors):
        return True
    if returncode < 0:
        return not errors and -returncode not in CRASH_SIGNALS
    failures = rank_failures(stderr_tail) if returncode != 0 else []
    silent = _silent_death(failures, errors)
    return silent is not None and silent.signal not in CRASH_SIGNALS


def build_result(
    stage: str,
    variant: dict[str, Any],
    spec: ProbeSpec,
    events: Iterable[Event],
    status: Status,
    reason: str,
    wall_s: float,
) -> ProbeResult:
    """A ProbeResult filled from the child's `start`, `warmup` and `result` events.

    Throughput and loss fields are taken only for an ok probe, so a failed
    one can never be mistaken for a fast one; warm-up facts and the rank
    count are kept for any status because they help explain a failure.
    """
    events = list(events)
    fields: dict[str, Any] = {}
    start = _last_event(events, StartEvent)
    ranks = (start.world_size if start is not None else None) or 1
    if start is not None and start.device:
        fields["device"] = start.device
    warmup = _last_event(events, WarmupEvent)
    if warmup is not None:
        fields.update(
            warmup_s=warmup.seconds,
            break_even_steps=warmup.break_even_steps,
            one_time_s=dict(warmup.one_time_s),
        )
    measured = _last_event(events, ResultEvent)
    if measured is not None and status is Status.OK:
        # Every figure the journal keeps, by name (tuneup.probe.figures); a number the line
        # lacked keeps the result's default, a list it lacked is empty.
        fields.update(measured.journal_figures())
        fields["plan"] = fields.get("plan") or spec.plan.to_dict()
        # One rank is also what a line that names none reads as: the start event's world
        # size decides then (a worker's two always agree).
        said = fields.pop("ranks", 1)
        ranks = said if said > 1 else ranks
    return ProbeResult(
        stage=stage,
        variant=dict(variant),
        config=spec.config,
        status=status,
        reason=reason,
        wall_s=round(wall_s, 3),
        ranks=ranks,
        **fields,
    )


def _silent_death(failures: list[RankFailure], errors: list[ErrorEvent]) -> RankFailure | None:
    """The rank killed by a signal before it could send an error event, if any."""
    spoke = {e.rank for e in errors}
    candidates = [
        f
        for f in failures
        if f.signal is not None and f.signal not in STOP_SIGNALS and f.rank not in spoke
    ]
    return next((f for f in candidates if f.root_cause), candidates[0] if candidates else None)


def _rank_reason(failure: RankFailure, oom_kills_before: int | None) -> str:
    if failure.signal is not None:
        return signal_reason(failure.signal, f"rank {failure.rank}", oom_kills_before)
    return f"rank {failure.rank} exited with status {failure.exitcode}"


def _classify_error(error: ErrorEvent) -> tuple[Status, str]:
    kind = error.kind
    message = " ".join(error.message.split()) or f"{kind} error"
    if error.rank is not None:
        message = f"{message} (rank {error.rank})"
    if kind == "oom":
        return Status.OOM, f"out of memory: {message}"
    if kind == "unsupported":
        return Status.UNSUPPORTED, message
    label = _ERROR_LABELS.get(kind)
    return Status.CRASH, f"{label}: {message}" if label else message


CGROUP_ROOT = Path("/sys/fs/cgroup")


def oom_kill_count(root: Path = CGROUP_ROOT, own: Path = Path("/proc/self/cgroup")) -> int | None:
    """The OOM kills this process's memory cgroup has counted (`oom_kill` in cgroup v2's
    memory.events, or v1's memory.oom_control); None where neither can be read."""
    places: list[Path] = []
    try:
        for line in own.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            where = path.lstrip("/")
            if controllers == "":
                places.append(root / where / "memory.events")
            elif "memory" in controllers.split(","):
                places.append(root / "memory" / where / "memory.oom_control")
    except (OSError, ValueError):
        pass
    places += [root / "memory.events", root / "memory" / "memory.oom_control"]
    for place in places:
        try:
            for line in place.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def sigkill_cause(rose: bool | None) -> str:
    """What a SIGKILL means, as far as the cgroup's OOM count can tell (None: it cannot)."""
    if rose is None:
        return (
            "a signal from outside, or the kernel's out-of-memory killer when host memory ran out"
        )
    if rose:
        return "the kernel's out-of-memory killer: this job's memory cgroup counted an OOM kill"
    return (
        "from outside tuneup, not the out-of-memory killer: this job's memory cgroup counted none"
    )


def signal_reason(signum: int, who: str = "worker", oom_kills_before: int | None = None) -> str:
    """`who` killed by the signal, named, with what it usually means (SIGKILL, SIGSEGV).

    A SIGKILL is blamed on the OOM killer only when the cgroup's count rose from
    `oom_kills_before`, taken when the probe started (None: not known).
    """
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    reason = f"{who} killed by {name}"
    if signum == signal.SIGKILL:
        now = oom_kill_count()
        rose = None if now is None or oom_kills_before is None else now > oom_kills_before
        reason += f" ({sigkill_cause(rose)})"
    elif signum == signal.SIGSEGV:
        reason += " (segmentation fault)"
    return reason


def with_detail(reason: str, detail: str) -> str:
    """The reason, then the detail (a last line printed) after a colon when there is one."""
    return f"{reason}: {detail}" if detail else reason


def _last_line(lines: list[str]) -> str:
    """The last line that says something (torchrun ends its report with a rule of "=")."""
    return next((line.strip() for line in reversed(lines) if any(c.isalnum() for c in line)), "")


def _last_event(events: list[Event], kind: type[_E]) -> _E | None:
    return next((e for e in reversed(events) if isinstance(e, kind)), None)
