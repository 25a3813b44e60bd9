"""Which of a session's targets a verify runs, and what the session claims for each.

tuneup train always runs; the tutorial's train.py where its path is given; another
program (a command trainer's) is left out, said. A session whose probes were simulated,
or that measured several ranks, has no run a verify can make, and is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.errors import UsageError
from tuneup.trainers.adapters import DEFAULT_TRAINER, load_trainer
from tuneup.tuning.results.journal import quoted
from tuneup.tuning.results.summary import Summary, TargetAnswer
from tuneup.tuning.results.targets import target_answers
from tuneup.tuning.results.verified import VerifyRun
from tuneup.verify.request import VerifyRequest
from tuneup.verify.runs import TUNEUP, TUTORIAL
from tuneup.verify.verdict import Claim


@dataclass
class VerifyTarget:
    """A target to run: its answer, its claim, and its runs as they end."""

    answer: TargetAnswer
    claim: Claim
    runs: list[VerifyRun] = field(default_factory=list)
    command: str = ""


def chosen_targets(
    request: VerifyRequest, session: Mapping[str, Any], summary: Summary
) -> tuple[list[VerifyTarget], list[tuple[str, str]]]:
    """The targets to run, and those left out with why; a session nothing can be run of
    is refused in one line."""
    trainer = str(session.get("trainer") or DEFAULT_TRAINER)
    adapter = load_trainer(trainer)
    here = quoted(request.folder)
    if adapter.simulated:
        raise UsageError(
            f"{here} is a session of the {trainer} trainer: its probes were simulated, so "
            "there is no real run to verify (verify a session of the unet trainer)"
        )
    if request.train_py is not None and not request.train_py.is_file():
        raise UsageError(
            f"--train-py {request.train_py}: no such file: give the path of the tutorial's "
            "train.py (SC22)"
        )
    launch = session.get("launch")
    world = launch.get("world_size") if isinstance(launch, Mapping) else None
    if isinstance(world, int) and world > 1:
        raise UsageError(
            f"{here} measured {world} ranks a probe; verify runs one process: verify a "
            "one-rank session"
        )
    if not summary.recommendation.recorded:
        raise UsageError(f"{here} has no recommended values: nothing to verify")
    noise = max(summary.needed_pct, default=2.0) / 100
    chosen, skipped = [], []
    for answer in target_answers(summary, adapter.own_target, adapter.targets):
        why = _cannot_run(answer.target, request.train_py)
        if why:
            skipped.append((answer.label or answer.target, why))
            continue
        claim = Claim(
            factor=answer.factor,
            low=answer.low,
            high=answer.high,
            base_sps=summary.baseline.full_sps,
            rec_sps=answer.full_sps,
            noise=noise,
            none_why=answer.note,
        )
        chosen.append(VerifyTarget(answer=answer, claim=claim))
    if not chosen:
        said = "; ".join(f"{t}: {why}" for t, why in skipped)
        raise UsageError(f"nothing in {here} that verify can run ({said})")
    return chosen, skipped


def _cannot_run(target: str, train_py: Path | None) -> str:
    if target == TUNEUP:
        return ""
    if target == TUTORIAL:
        return "" if train_py is not None else "give --train-py PATH, the tutorial's train.py"
    return "verify runs tuneup train and the tutorial's train.py, not this program"
