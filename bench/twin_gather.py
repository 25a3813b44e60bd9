"""Gather a machine's evidence for the twin without running a ladder (bench/gpu_twin.py --gather).

What the twin needs of a machine (twin/evidence.py), measured by the
real worker on the machine it runs on, GPU or CPU, through the same backend a
session probes with (so one warm worker serves the probes as in a ladder):

1. the baseline in a fresh process (the spawn, a fresh first step), then
   `repeats` more in the warm worker (the set-up, the warm first step, the
   probe-to-probe spread of every phase, the trials' spread);
2. the baseline's each phase alone, `repeats` times, as a ladder's pairs
   measure it (its probe-to-probe noise, its warm-ups and first steps in that
   shape);
3. every candidate of every stage the preset's default ladder would run here,
   on the baseline, measuring every phase (its rates, its first step: a conv
   key new to the process, a compile cold or from the disk caches, a script,
   a capture), each right after a probe of the baseline (every phase, no loss
   steps): the twin reads a candidate's rates as its ratio to that probe, so
   the machine's drift over the gather is not taken for an effect; all of
   them twice, a round apart (a compile's second is its compile after a
   release, the disk caches hit);
4. the time around each probe beyond its wall (the session's bookkeeping),
   and the session's start before its first probe (the interpreter and imports
   from the process's start, its data made or checked), as a command pays it.

It writes DIR/gather/ (a tuneup session folder: session.json, journal.jsonl)
and DIR/gather/gather.json (the times of 4, the command, the date), a folder
the twin reads: `python bench/gpu_twin.py --evidence DIR --preset P --json`.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from tuneup.hardware.machine import machine_info
from tuneup.probe.types import BASELINE_STAGE, Candidate, ProbeResult
from tuneup.tuning.session.assembly import SessionRequest, assemble_new
from tuneup.tuning.session.control import SilentReporter
from tuneup.worker.main import process_start_time

REPEATS = 3
ROUNDS = 2  # each candidate twice, a round apart: one probe on a shared CPU is +-8%
REPEAT_STAGE = "repeat"  # the baseline measured as a ladder's pairs measure it (twin_evidence)


def _probes(built: Any, repeats: int, rounds: int = ROUNDS) -> list[tuple[str, Candidate]]:
    """The baseline 1 + `repeats` times, each phase of it alone `repeats` times (the shape
    of a ladder's pairs: their noise, warm-ups and first steps), then `rounds` rounds of
    every stage's candidates, each after the baseline again (a compile's second round is
    its compile after a release)."""
    probes = [(BASELINE_STAGE, Candidate(BASELINE_STAGE, {}))] * (1 + repeats)
    for phase in ("io", "synthetic", "full"):
        alone = Candidate(BASELINE_STAGE, {}, judged=phase, whole=False, loss=False)
        probes += [(REPEAT_STAGE, alone)] * repeats
    base = dict(built.session.base_values)
    beside = Candidate(BASELINE_STAGE, {}, loss=False)  # each candidate's partner
    paired: list[tuple[str, Candidate]] = []
    for plan in built.session.plans:
        if plan.skip_reason:
            continue
        plan = plan.refresh(base) if plan.refresh is not None else plan
        for candidate in plan.candidates:
            if candidate.reference or candidate.ranks not in (None, 1):
                continue
            whole = dataclasses.replace(candidate, whole=True, judged="full")
            paired += [(BASELINE_STAGE, beside), (plan.name, whole)]
    return probes + paired * rounds


def gather(folder: Path, preset: str, repeats: int = REPEATS, echo: bool = True) -> Path:
    """Measure the twin's evidence here into `folder`/gather (the module docstring)."""
    out = Path(folder) / "gather"
    began = time.monotonic() - (time.time() - process_start_time())  # as a command's start
    built = assemble_new(
        SessionRequest(preset=preset, trainer="unet"),
        machine_info(),
        out=out,
        reporter=SilentReporter(),
    )
    overheads: list[float] = []
    try:
        built.session.start(resume=False)
        start_s = time.monotonic() - began
        backend = built.engine.backend
        base = dict(built.session.base_values)
        for stage, candidate in _probes(built, repeats):
            values = {**base, **candidate.values}
            before = time.monotonic()
            result: ProbeResult = backend(stage, candidate, values)
            overheads.append(max(0.0, time.monotonic() - before - result.wall_s))
            built.results.append(result)
            if echo:
                print(
                    f"gather: {stage:14s} {candidate.label:28s} {result.status.value:11s} "
                    f"{result.wall_s:6.2f} s {_parts(result)}",
                    file=sys.stderr,
                )
    finally:
        built.close()
    record = {
        "command": " ".join(["python", "bench/gpu_twin.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "preset": preset,
        "python": platform.python_version(),
        "start_s": [round(start_s, 3)],
        "overhead_s": [round(s, 4) for s in overheads],
        "wall_s": round(time.monotonic() - began, 1),
    }
    (out / "gather.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return out


def _parts(result: ProbeResult) -> str:
    return " ".join(f"{k}={v:.2f}" for k, v in result.one_time_s.items())
