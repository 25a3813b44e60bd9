"""A stand-in for `python -m tuneup.worker`, for the runner's tests.

Usage: fake_worker.py MODE [--grandchild] [--ignore-term] SPEC.json

MODE: ok | oom | unsupported | garbage | selfkill | traceback | noresult | hang.
--grandchild starts `sleep 60` and reports its pid in the start event;
--ignore-term makes this process (and the grandchild) ignore SIGTERM.
Imports nothing heavy, so a run costs only the interpreter's start.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any


def emit(kind: str, /, **fields: Any) -> None:
    print(json.dumps({"event": kind, **fields}), flush=True)


def measured() -> None:
    emit("warmup", seconds=1.25, steps=4, one_time_s={"spawn": 0.5}, break_even_steps=12.0)
    for trial in range(3):
        emit("trial", phase="full", trial=trial, samples_per_s=100.0 + trial)
    emit("loss", step=0, value=2.0)
    emit("loss", step=1, value=1.5)
    emit(
        "result",
        io_sps=300.0,
        synthetic_sps=150.0,
        full_sps=101.0,
        full_sps_trials=[100.0, 101.0, 102.0],
        iqr_pct=1.0,
        loss_start=2.0,
        loss_end=1.5,
        losses=[2.0, 1.5],
        scaler_overflows=2,
        warmup_s=1.25,
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("spec")
    parser.add_argument("--grandchild", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    args = parser.parse_args()

    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild too
    with open(args.spec, encoding="utf-8") as fh:
        spec = json.load(fh)
    start: dict[str, Any] = {"config": spec["config"], "pid": os.getpid()}
    if args.grandchild:
        start["grandchild_pid"] = subprocess.Popen(["sleep", "60"]).pid
    emit("start", **start)

    mode = args.mode
    if mode == "ok":
        measured()
    elif mode == "oom":
        emit("error", kind="oom", message="CUDA out of memory.\nTried to allocate 2.00 GiB")
        return 1
    elif mode == "unsupported":
        emit("error", kind="unsupported", message="apex is not installed")
        return 0
    elif mode == "garbage":
        print("plain text from a library", flush=True)
        print('{"event": "warmup", "seconds": ', flush=True)  # cut short
        print("[1, 2, 3]", flush=True)
        print('{"no_event_key": true}', flush=True)
        sys.stdout.buffer.write(b"\xff\xfe not utf-8 either\n")
        sys.stdout.flush()
        measured()
        print("trailing chatter", flush=True)
    elif mode == "selfkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "traceback":
        print("some warning first", file=sys.stderr, flush=True)
        raise RuntimeError("boom in the training step")
    elif mode == "noresult":
        pass
    elif mode == "hang":
        while True:
            time.sleep(1)
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
