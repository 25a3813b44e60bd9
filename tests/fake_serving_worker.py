"""A stand-in for `python -m tuneup.worker --serve`, for the runner's tests.

Reads spec paths on stdin, one JSON string per line (as the runner writes them); for
each, writes a `start` event
(its pid and how many probes it served before) and then does what the spec's
config asks in its "fake" key:

ok (default): a result; oom: an error event, then exit 3 (as the real worker
after any failure); crash: a traceback on stderr, an error event, exit 3;
selfkill: SIGKILL itself; hang: start `sleep 60` (its pid in the start event)
and sleep; exit0: exit 0 without a result; chatter: a line on stderr, then a result;
vanish: a result, then exit 4 a moment later (as when releasing its state failed).

Every probe also writes "probe N of pid P" on stderr, so a test can check whose
stderr a probe's log holds. Imports nothing heavy: a start costs only the interpreter's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any


def emit(kind: str, /, **fields: Any) -> None:
    print(json.dumps({"event": kind, **fields}), flush=True)


def result(spec: dict[str, Any]) -> None:
    """A result; IO only when the spec's phases hold it, as the real worker measures."""
    emit("warmup", seconds=0.1, steps=2, one_time_s={"setup": 0.01})
    emit("trial", phase="full", index=1, samples_per_s=100.0, batches=1, seconds=0.01)
    emit(
        "result",
        full_sps=100.0,
        full_sps_trials=[100.0, 100.0],
        io_sps=300.0 if "io" in spec.get("phases", ["io"]) else None,
        losses=[2.0, 1.5],
        loss_start=2.0,
        loss_end=1.5,
    )


def main() -> int:
    served = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        path = json.loads(line)
        with open(path, encoding="utf-8") as fh:
            spec = json.load(fh)
        mode = spec["config"].get("fake", "ok")
        print(f"probe {served} of pid {os.getpid()}", file=sys.stderr, flush=True)
        start: dict[str, Any] = {"pid": os.getpid(), "served": served, "config": spec["config"]}
        if mode == "hang":
            start["grandchild_pid"] = subprocess.Popen(["sleep", "60"]).pid
        emit("start", **start)
        if mode == "ok":
            result(spec)
        elif mode == "chatter":
            print("a warning from a library", file=sys.stderr, flush=True)
            result(spec)
        elif mode == "oom":
            emit("error", kind="oom", message="CUDA out of memory. Tried to allocate 2.00 GiB")
            return 3
        elif mode == "crash":
            print("Traceback (most recent call last):", file=sys.stderr)
            print("RuntimeError: simulated crash", file=sys.stderr, flush=True)
            emit("error", kind="other", message="RuntimeError: simulated crash")
            return 3
        elif mode == "selfkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "hang":
            time.sleep(3600)
        elif mode == "exit0":
            return 0
        elif mode == "vanish":
            result(spec)
            time.sleep(0.3)  # after the runner has the result, before it sends the next spec
            print("releasing the last probe's state failed", file=sys.stderr, flush=True)
            return 4
        served += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
