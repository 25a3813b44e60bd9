"""What `tuneup verify` found: its runs (verify.jsonl) and the summary's `verify` block.

A verify runs the recommendation and the baseline as each target (the program the user
trains with) runs them, and sets their real speedup beside the ladder's claim. These are
its frozen values, written as JSON and parsed back in one place each (`from_dict`): a
key an older or a damaged file lacks reads as its default, so a folder always opens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.probe.jsonvalues import as_list, count, finite, number, text

BASELINE = "baseline"
RECOMMENDATION = "recommendation"
VERIFY_JOURNAL = "verify.jsonl"
VERIFY_FOLDER = "verify"  # the runs' configs and logs


@dataclass(frozen=True, kw_only=True)
class VerifyRun:
    """One run: a target's program on one configuration, as it ended.

    Attributes:
        config: BASELINE or RECOMMENDATION; round: its place in the A B B A order.
        status: "ok", "failed" (it exited with an error), "timeout" (killed at its
            limit; the epochs it finished count) or "stopped" (Ctrl-C).
        epochs: (seconds, samples/s) of each epoch it logged, the tutorial's line.
        val_s: each validation's seconds, as logged.
        samples, val_samples: an epoch's planned training and validation samples.
        box: the (train, validation) box sides it read.
        command: the command line it ran (shell words); log: its output's file.
    """

    run: int = 0
    target: str = "?"
    config: str = "?"
    round: int = 0
    status: str = "?"
    reason: str = ""
    epochs: tuple[tuple[float, float], ...] = ()
    val_s: tuple[float, ...] = ()
    samples: int = 0
    val_samples: int = 0
    box: tuple[int, int] = (0, 0)
    wall_s: float = 0.0
    command: str = ""
    log: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "target": self.target,
            "config": self.config,
            "round": self.round,
            "status": self.status,
            "reason": self.reason,
            "epochs": [list(e) for e in self.epochs],
            "val_s": list(self.val_s),
            "samples": self.samples,
            "val_samples": self.val_samples,
            "box": list(self.box),
            "wall_s": self.wall_s,
            "command": self.command,
            "log": self.log,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerifyRun:
        epochs = []
        for entry in as_list(data.get("epochs")):
            pair = tuple(finite(v) for v in as_list(entry))
            if len(pair) == 2 and pair[0] is not None and pair[1] is not None:
                epochs.append((pair[0], pair[1]))
        return cls(
            run=count(data.get("run")) or 0,
            target=text(data.get("target"), "?"),
            config=text(data.get("config"), "?"),
            round=count(data.get("round")) or 0,
            status=text(data.get("status"), "?"),
            reason=text(data.get("reason")),
            epochs=tuple(epochs),
            val_s=tuple(v for v in map(finite, as_list(data.get("val_s"))) if v is not None),
            samples=count(data.get("samples")) or 0,
            val_samples=count(data.get("val_samples")) or 0,
            box=_box(data.get("box")) or (0, 0),
            wall_s=finite(data.get("wall_s")) or 0.0,
            command=text(data.get("command")),
            log=text(data.get("log")),
        )


@dataclass(frozen=True, kw_only=True)
class Moved:
    """A part of a real run that moved its speedup away from the claim, with its figures.

    Attributes:
        part: "io" (the larger box's reading), "rate" (the steady step itself),
            "validation" or "first_steps".
    """

    part: str
    text: str


@dataclass(frozen=True, kw_only=True)
class TargetCheck:
    """One target's real runs against the ladder's claim.

    Attributes:
        claimed_factor, claimed_low, claimed_high: the claim and its likely range (None:
            the session claimed nothing for this target).
        real_factor, real_low, real_high: the recommendation's steady samples/s over the
            baseline's (after warm-up), and the range of their epochs' quartiles.
        real_sps, baseline_sps: the two steady rates (medians of their epochs).
        whole_factor: the user's whole run (its epochs, validations and first steps) as
            these runs price it.
        within_claim: True, False (`reason` says by how much and which part moved), or
            None where nothing could be compared (`reason` says why).
        outside: "below" or "above" the claim's range where within_claim is False.
        command: the recommendation's run, to run it again by hand.
    """

    target: str
    label: str = ""
    claimed_factor: float | None = None
    claimed_low: float | None = None
    claimed_high: float | None = None
    real_factor: float | None = None
    real_low: float | None = None
    real_high: float | None = None
    real_sps: float | None = None
    baseline_sps: float | None = None
    whole_factor: float | None = None
    within_claim: bool | None = None
    outside: str = ""
    reason: str = ""
    moved: tuple[Moved, ...] = ()
    command: str = ""
    runs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "label": self.label,
            "claimed_factor": self.claimed_factor,
            "claimed_low": self.claimed_low,
            "claimed_high": self.claimed_high,
            "real_factor": self.real_factor,
            "real_low": self.real_low,
            "real_high": self.real_high,
            "real_sps": self.real_sps,
            "baseline_sps": self.baseline_sps,
            "whole_factor": self.whole_factor,
            "within_claim": self.within_claim,
            "outside": self.outside,
            "reason": self.reason,
            "moved": [{"part": m.part, "text": m.text} for m in self.moved],
            "command": self.command,
            "runs": self.runs,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TargetCheck:
        within = data.get("within_claim")
        return cls(
            target=text(data.get("target"), "?"),
            label=text(data.get("label")),
            claimed_factor=number(data.get("claimed_factor")),
            claimed_low=number(data.get("claimed_low")),
            claimed_high=number(data.get("claimed_high")),
            real_factor=number(data.get("real_factor")),
            real_low=number(data.get("real_low")),
            real_high=number(data.get("real_high")),
            real_sps=number(data.get("real_sps")),
            baseline_sps=number(data.get("baseline_sps")),
            whole_factor=number(data.get("whole_factor")),
            within_claim=within if isinstance(within, bool) else None,
            outside=text(data.get("outside")),
            reason=text(data.get("reason")),
            moved=tuple(
                Moved(part=text(m.get("part"), "?"), text=text(m.get("text")))
                for m in as_list(data.get("moved"))
                if isinstance(m, Mapping)
            ),
            command=text(data.get("command")),
            runs=count(data.get("runs")) or 0,
        )


@dataclass(frozen=True, kw_only=True)
class Verified:
    """A verify of a session: each target's check, what it could not run, and how it ran.

    Attributes:
        skipped: (target, why) of each target it did not run.
        box, probe_box: the box sides the runs read and those the probes read.
        data: where the runs' data came from, in words (with the fallback, if any).
        seconds: each configuration's measured time after warm-up; rounds: A B B A blocks.
        command: the command that reproduces this verify.
        stopped: why it ended before its last run (None: it ran them all).
        when: its start, local time.
    """

    targets: tuple[TargetCheck, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    box: tuple[int, int] | None = None
    probe_box: tuple[int, int] | None = None
    data: str = ""
    seconds: float = 0.0
    rounds: int = 0
    command: str = ""
    stopped: str | None = None
    when: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "targets": [t.to_dict() for t in self.targets],
            "skipped": [{"target": t, "why": why} for t, why in self.skipped],
            "box": list(self.box) if self.box else None,
            "probe_box": list(self.probe_box) if self.probe_box else None,
            "data": self.data,
            "seconds": self.seconds,
            "rounds": self.rounds,
            "command": self.command,
            "stopped": self.stopped,
            "when": self.when,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Verified | None:
        """The summary's `verify` block; None where there is none (no verify ran)."""
        if not isinstance(data, Mapping):
            return None
        stopped = data.get("stopped")
        return cls(
            targets=tuple(
                TargetCheck.from_dict(t)
                for t in as_list(data.get("targets"))
                if isinstance(t, Mapping)
            ),
            skipped=tuple(
                (text(s.get("target"), "?"), text(s.get("why")))
                for s in as_list(data.get("skipped"))
                if isinstance(s, Mapping)
            ),
            box=_box(data.get("box")),
            probe_box=_box(data.get("probe_box")),
            data=text(data.get("data")),
            seconds=finite(data.get("seconds")) or 0.0,
            rounds=count(data.get("rounds")) or 0,
            command=text(data.get("command")),
            stopped=stopped if isinstance(stopped, str) else None,
            when=text(data.get("when")),
        )


def _box(value: Any) -> tuple[int, int] | None:
    sides = [count(v) for v in as_list(value)]
    if len(sides) == 2 and sides[0] is not None and sides[1] is not None:
        return sides[0], sides[1]
    return None
