"""`tuneup verify DIR`: the recommendation and the baseline run as each target runs them,
their real speedup against the ladder's claim (tuneup/verify/session.py runs them).

Progress goes to stderr as each run starts and ends; the verdicts to stdout (`--json`:
one object). The first Ctrl-C (or SIGTERM, SIGHUP) ends the run in progress and keeps
what finished, in verify.jsonl and summary.json's `verify` block; a second aborts.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from tuneup.cluster.signals import StopSignals, signal_name
from tuneup.errors import ExitCode
from tuneup.tuning.results.verify_words import verified_lines
from tuneup.verify.request import VerifyRequest
from tuneup.verify.session import verify_session


def run_verify_command(
    folder: Path,
    *,
    seconds: float,
    rounds: int,
    train_py: Path | None = None,
    box: int | None = None,
    budget_s: float | None = None,
    as_json: bool = False,
) -> int:
    request = VerifyRequest(
        folder=folder, seconds=seconds, rounds=rounds, train_py=train_py, box=box, budget_s=budget_s
    )
    request = dataclasses.replace(request, command=request.reproduce())
    with StopSignals(sys.stderr) as signals:
        signals.arm(lambda: None)  # the runs watch `stop`: the one in progress ends itself

        def stop() -> str | None:
            return f"stopped by {signal_name(signals.signum)}" if signals.signum else None

        def say(line: str) -> None:
            print(f"tuneup: {line}", file=sys.stderr, flush=True)

        verified = verify_session(request, say=say, stop=stop)
    if as_json:
        print(json.dumps({"folder": str(request.folder), **verified.to_dict()}, indent=2))
    else:
        for line in verified_lines(verified):
            print(line)
    return signals.exit_code if signals.requested else ExitCode.OK
