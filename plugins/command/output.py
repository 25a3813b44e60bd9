"""What a command printed: samples/s, losses and benchy's lines, read into ProbeResult fields.

The defaults read the NERSC tutorial's own ``train.py``:

- its epoch line, ``Time taken for epoch N is X sec, avg Y samples/sec``
  (the first epoch is slow, so ``skip: 1`` drops it as warm-up), and its
  ``Avg train loss=L`` line for the loss guard;
- benchy's lines when it runs with ``--enable_benchy`` (as benchy prints
  them, on rank 0): one ``BENCHY::FULL_0::Trial Throughput: Y`` per timed
  trial (warm-up trials are labelled ``FULL_WARMUP_0``), and at the end
  ``BENCHY::SUMMARY::IO average trial throughput: Y +/- S`` (also
  ``SUMMARY:: SYNTHETIC`` and ``SUMMARY::FULL``), which give the
  IO/SYNTHETIC/FULL split.

Pure: lines in, facts and fields out.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tuneup.probe.stats import iqr_pct, median

from .section import (
    DEFAULT_LOSS_PATTERN,
    DEFAULT_PATTERN,
    NUMBER,
    CommandSpec,
    RateRule,
)

# benchy's summary: the mean and standard deviation of its trials' throughputs (its
# README's older example says "average throughput", without "trial").
_BENCHY_SUMMARY = re.compile(
    rf"BENCHY::SUMMARY::\s*(?P<phase>IO|SYNTHETIC|FULL) average (?:trial )?throughput:\s*"
    rf"(?P<sps>{NUMBER})(?:\s*\+/-\s*(?P<std>{NUMBER}))?"
)
# One timed trial: its batches over its wall time. Warm-up trials (IO_WARMUP_0, ...)
# do not match; nor do the per-iteration lines ("Iteration Throughput", "Average
# Iteration Throughput"), which leave out the time between trials' batches.
_BENCHY_TRIAL = re.compile(
    rf"BENCHY::(?P<phase>IO|SYNTHETIC|FULL)_\d+::Trial Throughput:\s*(?P<sps>{NUMBER})"
)
# A normal distribution's interquartile range is 1.349 standard deviations.
_IQR_PER_STD = 1.349


@dataclass(frozen=True)
class OutputFacts:
    """What a run printed that tuneup can use, in order."""

    sps: tuple[float, ...] = ()  # every pattern match
    seconds: tuple[float | None, ...] = ()  # the matches' `seconds` group, when there is one
    losses: tuple[float, ...] = ()
    benchy_summary: dict[str, float] = field(default_factory=dict)  # io/synthetic/full
    benchy_trials: dict[str, tuple[float, ...]] = field(default_factory=dict)
    benchy_std: dict[str, float] = field(default_factory=dict)  # the summary's +/- S

    @property
    def benchy(self) -> bool:
        return bool(self.benchy_summary or self.benchy_trials)


def parse_output(
    lines: Iterable[str],
    pattern: re.Pattern[str] = re.compile(DEFAULT_PATTERN),
    loss_pattern: re.Pattern[str] | None = re.compile(DEFAULT_LOSS_PATTERN),
) -> OutputFacts:
    """Throughput, loss and benchy lines found in the output, searched line by line."""
    sps: list[float] = []
    seconds: list[float | None] = []
    losses: list[float] = []
    summary: dict[str, float] = {}
    std: dict[str, float] = {}
    trials: dict[str, list[float]] = {}
    for line in lines:
        if "BENCHY::" in line:
            found = _BENCHY_SUMMARY.search(line)
            if found:
                summary[found["phase"].lower()] = float(found["sps"])
                if found["std"] is not None:
                    std[found["phase"].lower()] = float(found["std"])
                continue
            found = _BENCHY_TRIAL.search(line)
            if found:
                trials.setdefault(found["phase"].lower(), []).append(float(found["sps"]))
            continue
        match = pattern.search(line)
        if match:
            rate = _float(match.group("sps"))
            if rate is not None:
                sps.append(rate)
                secs = match.groupdict().get("seconds")
                seconds.append(_float(secs) if secs is not None else None)
        if loss_pattern is not None:
            found = loss_pattern.search(line)
            if found:
                loss = _float(found.group("loss"))
                if loss is not None:
                    losses.append(loss)
    return OutputFacts(
        tuple(sps),
        tuple(seconds),
        tuple(losses),
        summary,
        {phase: tuple(values) for phase, values in trials.items()},
        std,
    )


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def measurements(facts: OutputFacts, skip: int) -> dict[str, Any]:
    """ProbeResult fields from the output; no `full_sps` when it has no throughput.

    With benchy's lines, IO/SYNTHETIC/FULL come from benchy and the epoch
    lines are ignored (under benchy the epochs are benchy's own trials): each
    phase is the median of its `Trial Throughput` lines, as tuneup's own
    phases are, and FULL's trials are the trials. A phase with a summary but
    no trial line (a log cut short, an older benchy) takes the summary's mean,
    and FULL's spread is the summary's +/- as an interquartile range; its one
    figure stands as one trial, so the noise it has is not claimed as known.
    """
    fields: dict[str, Any] = {}
    if facts.losses:
        fields["losses"] = list(facts.losses)
        fields["loss_start"], fields["loss_end"] = facts.losses[0], facts.losses[-1]
    if facts.benchy:
        return {**fields, **_benchy_fields(facts)}
    trials = [t for t in facts.sps[skip:] if math.isfinite(t)]
    if trials:
        fields["full_sps"] = median(trials)
        fields["full_sps_trials"] = trials
        fields["iqr_pct"] = iqr_pct(trials)
    warm = [s for s in facts.seconds[:skip] if s is not None]
    if warm:
        fields["warmup_s"] = sum(warm)
    return fields


def _benchy_fields(facts: OutputFacts) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for phase in ("io", "synthetic", "full"):
        trials = list(facts.benchy_trials.get(phase, ()))
        value = median(trials) if trials else facts.benchy_summary.get(phase)
        if value is not None:
            fields[f"{phase}_sps"] = value
    full_trials = list(facts.benchy_trials.get("full", ()))
    if full_trials:
        fields["full_sps_trials"] = full_trials
        fields["iqr_pct"] = iqr_pct(full_trials)
    elif "full_sps" in fields:
        fields["full_sps_trials"] = [fields["full_sps"]]
        std = facts.benchy_std.get("full")
        if std is not None and fields["full_sps"] > 0:
            fields["iqr_pct"] = 100.0 * _IQR_PER_STD * std / fields["full_sps"]
    return fields


def no_throughput_reason(facts: OutputFacts, spec: CommandSpec) -> str:
    """Why a run that ended cleanly has no throughput, saying what to change."""
    if facts.benchy:
        return (
            "benchy printed no FULL throughput (its full benchmark did not run; "
            "check benchy's configuration)"
        )
    pattern = spec.pattern.pattern
    if facts.sps:
        return (
            f"only {len(facts.sps)} throughput line(s), all skipped as warm-up "
            f"(command.skip is {spec.skip}): run more epochs or lower skip"
        )
    if pattern == DEFAULT_PATTERN:
        return (
            "no throughput found in the output (looked for the tutorial's 'avg Y samples/sec' "
            "epoch lines and benchy's BENCHY::SUMMARY lines; set command.pattern to match "
            "this script's)"
        )
    return f"no throughput found in the output (pattern {pattern!r})"


def timed_measurements(
    stamped: list[tuple[float, str]], rule: RateRule, skip: int
) -> dict[str, Any]:
    """ProbeResult fields from the times a script's progress lines came (`rate`): each
    interval between two lines is a trial, its samples over its seconds; the first `skip`
    intervals are warm-up. A running count that falls (a new epoch) starts over: that
    interval is left out. No `full_sps` when fewer than two lines came."""
    counts: list[tuple[float, int | None]] = []
    for when, line in stamped:
        found = rule.pattern.search(line)
        if found is None:
            continue
        group = found.groupdict().get("samples")
        counts.append((when, int(group) if group and group.isdigit() else None))
    trials: list[float] = []
    for (t0, c0), (t1, c1) in itertools.pairwise(counts):
        samples = c1 - c0 if c1 is not None and c0 is not None else rule.samples
        if samples is None or samples <= 0 or t1 <= t0:
            continue
        trials.append(samples / (t1 - t0))
    trials = trials[skip:]
    if not trials:
        return {}
    return {"full_sps": median(trials), "full_sps_trials": trials, "iqr_pct": iqr_pct(trials)}


def no_timed_rate_reason(stamped: list[tuple[float, str]], spec: CommandSpec) -> str:
    """Why a run timed by its lines (`rate`) has no throughput, saying what to change."""
    rule = spec.rate
    pattern = rule.pattern.pattern if rule is not None else "?"
    if len(stamped) < 2:
        return (
            f"{len(stamped)} line(s) matched command.rate.pattern {pattern!r}: two at least "
            "time an interval (run longer, or match a line the script prints more often)"
        )
    return (
        f"{len(stamped)} line(s) matched command.rate.pattern, but every interval was "
        f"warm-up (command.skip is {spec.skip}) or counted no samples: lower skip, or check "
        "the samples group or command.rate.samples"
    )
