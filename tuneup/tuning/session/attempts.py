"""When a probe is measured again: a failed attempt in this session, a journaled failure
on a resume (the journal as a resume replays it), and which figures a decision may use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuneup.probe.describe import variant_text
from tuneup.probe.types import BASELINE_STAGE, ProbeResult, Status, probe_key


def measure_again(result: ProbeResult, retry_all: bool) -> str:
    """Why a journaled probe is measured again on a resume ("" to replay it).

    Always: a failed baseline (nothing is decided without it) and a failure that need not
    happen again (killed by a signal, an NCCL timeout). With `retry_all`
    (`--retry-failed`): every failure but a diverged loss or the user's skip, and a probe
    that ran contended or under a steady load.
    """
    if result.ok and retry_all and result.under_load:  # its verdict said so: a quiet one now
        return "it ran under load"
    if result.ok:
        return "it ran contended" if retry_all and result.contended else ""
    if result.status in (Status.SKIPPED, Status.DIVERGED):
        return ""
    said = f"{result.status.value}{f': {result.reason}' if result.reason else ''}"
    if result.stage == BASELINE_STAGE or result.transient or retry_all:
        return said
    return ""


def ran_uncontended(result: ProbeResult) -> bool:
    """It ran ok with nothing else loading the machine: a figure a decision may use."""
    return result.ok and not result.contended


BASELINE_ATTEMPTS = 3  # the baseline is given up only when it fails the same way twice


def attempt_again(stage: str, attempts: list[ProbeResult]) -> bool:
    """Whether a failed probe is run again: once after a transient failure (killed by a
    signal, an NCCL timeout); the baseline, which every decision needs, until it fails
    the same way twice."""
    last = attempts[-1]
    if last.ok or last.status in (Status.SKIPPED, Status.UNSUPPORTED):
        return False
    if stage == "baseline":
        earlier = {(a.status, a.reason) for a in attempts[:-1]}
        return len(attempts) < BASELINE_ATTEMPTS and (last.status, last.reason) not in earlier
    return len(attempts) == 1 and last.transient


Place = tuple[str, str]
"""A journaled probe's place: its stage and its identity (types.probe_key)."""


def place_of(stage: str, values: dict[str, Any], ranks: int) -> Place:
    return stage, probe_key(values, ranks)


@dataclass
class Replay:
    """What a resume does with its journal: the probes it replays, by place, in order;
    why each probe it measures again failed, by place; and those, in words."""

    journaled: dict[Place, list[ProbeResult]] = field(default_factory=dict)
    replacing: dict[Place, list[str]] = field(default_factory=dict)
    again: list[str] = field(default_factory=list)
    failures_kept: bool = False  # failures replayed as they were
    baselines_again: int = 0  # journaled baselines measured again in a changed setting (the
    # resume's alert says so)

    def note(self, retry_all: bool) -> str:
        """The line that says so ("" when nothing is measured again and none is kept)."""
        if self.again:
            more = f"; and {len(self.again) - 4} more" if len(self.again) > 4 else ""
            return (
                f"measuring again {len(self.again)} journaled probe(s) that failed"
                f"{' or ran contended' if retry_all else ''}: " + "; ".join(self.again[:4]) + more
            )
        if self.failures_kept and not retry_all:
            return (
                "journaled failures are replayed as they were: --retry-failed measures them again"
            )
        return ""


def replay_plan(results: list[ProbeResult], retry_all: bool, changed: str = "") -> Replay:
    """The journal's probes (`results`, in order) as a resume replays them.

    A failed attempt that was run again at once (`retried`) is skipped; a probe measured
    again on an earlier resume (`replaces`) takes its failure's place, else that of a
    probe measured in another setting (the machine changed: `ProbeResult.setting`); the
    probes to measure again now (measure_again, and with `changed`, why the setting
    differs, the baseline's) are left out of the replay, with why.
    """
    replay = Replay()
    for result in results:
        if result.retried:  # a failed attempt the next line of its probe replaces
            continue
        found = replay.journaled.setdefault(place_of(result.stage, result.config, result.ranks), [])
        spot = _replaced(found, result)
        if result.replaces and spot is not None:
            found[spot] = result  # measured again on an earlier resume: in the failure's place
        else:
            found.append(result)
    for place, found in replay.journaled.items():
        keep = []
        for result in found:
            why = measure_again(result, retry_all)
            if changed and result.stage == BASELINE_STAGE and not why:
                replay.replacing.setdefault(place, []).append(changed)
                replay.baselines_again += 1
                continue
            if why:
                replay.replacing.setdefault(place, []).append(why)
                replay.again.append(f"{result.stage} {variant_text(result)} ({why})")
            else:
                keep.append(result)
                kept_failure = not ran_uncontended(result) and result.status is not Status.SKIPPED
                replay.failures_kept |= kept_failure
        found[:] = keep
    return replay


def _replaced(found: list[ProbeResult], result: ProbeResult) -> int | None:
    """Where in `found` a probe measured again belongs: the first failure (or contended
    run, or one under a steady load), else the first probe of another setting than its
    own; None: nowhere."""
    spot = next((i for i, r in enumerate(found) if not ran_uncontended(r) or r.under_load), None)
    if spot is None and result.setting:
        spot = next((i for i, r in enumerate(found) if r.setting != result.setting), None)
    return spot
