"""What recorded ladders say beyond costs and rates: the failures a configuration met, and
how per-sample speed grew with the batch where a ladder measured both batches.

The third H200 ladder (bench/results/gpu-h200-2026-11-27c) is why: torch.compile failed
on bf16 + channels_last 19 s into its probe (torch 2.11's Inductor), which the twin had
priced as a 60 s compile that worked; and batch 256 ran no faster than 128 (1885 against
1862-1899 samples/s), where the twin's assumed (batch / 64)^0.05 had 256 winning and the
rest of the ladder priced at 256's cuDNN searches.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuneup.costs.one_time import conv_row
from tuneup.probe.stats import median

from .rates import Row, with_defaults

BATCH = "global_batch_size"
# a reason that is an exception the probe raised: "AssertionError: ...", "compile error:
# AssertionError: ...", not "worker exited with status 3" or "interrupted by user"
_RAISED = re.compile(r"^(compile error: |CUDA error: )?[A-Za-z_.]*(Error|Exception)\b")


@dataclass(frozen=True)
class RecordedFailure:
    """A probe that crashed in a recorded ladder: what set it off (its candidate's own knobs
    and the conv row it ran in), its wall time, its reason, and whether today's worker
    serves on after such a failure (worker/serve.sound_after: torch.compile's own)."""

    variant: Mapping[str, Any]
    row: str
    wall_s: float
    reason: str
    survived: bool

    def matches(self, knobs: Mapping[str, Any]) -> bool:
        """The same candidate knobs in the same conv row fail the same way."""
        if conv_row(knobs) != self.row:
            return False
        return all(knobs.get(name) == value for name, value in self.variant.items())


def recorded_failures(lines: Iterable[Mapping[str, Any]]) -> tuple[RecordedFailure, ...]:
    """Every crash of a journal that its configuration would meet again: an exception it
    raised (not a transient fault, a signal, an interrupt; an OOM or an unsupported knob
    the sim models itself)."""
    failures = []
    for line in lines:
        variant = dict(line.get("variant") or {})
        if line.get("status") != "crash" or not variant or not line.get("wall_s"):
            continue
        reason = str(line.get("reason") or "")
        if line.get("transient") or not _RAISED.match(reason):
            continue
        config = with_defaults(line.get("config") or {})
        failures.append(
            RecordedFailure(
                variant, conv_row(config), float(line["wall_s"]), reason, compile_failure(line)
            )
        )
    return tuple(failures)


def compile_failure(line: Mapping[str, Any]) -> bool:
    """torch.compile's own failure: a reason the runner labels so, or, in journals from
    before a failure raised in compiled code was labelled so, a failed jit=compile probe that
    was no CUDA error."""
    reason = str(line.get("reason") or "")
    if reason.startswith("compile error:"):
        return True
    jit = dict(line.get("variant") or {}).get("jit")
    return jit == "compile" and not reason.startswith(("CUDA error", "out of memory"))


Ladder = tuple[Mapping[str, Any], Sequence[Row]]
"""One journal: its baseline's configuration, and its rows (changes from that baseline)."""


def batch_gains(ladders: Sequence[Ladder], base_batch: int = 64) -> dict[int, float]:
    """Per-sample speed at each batch a ladder measured, over the same configuration's at the
    base batch in the same ladder: the median over configurations and ladders."""
    gains: dict[int, list[float]] = defaultdict(list)
    for baseline, rows in ladders:
        for change, ratio in _paired(rows, BATCH, base_batch, baseline):
            gains[int(change[BATCH])].append(ratio)
    return {batch: median(values) for batch, values in sorted(gains.items())}


def knob_gain(ladders: Sequence[Ladder], knob: str, value: Any) -> float | None:
    """Speed with `knob` set to `value` over the same configuration without it (at the
    baseline's), where a ladder measured both (the H200's: TorchScript +0.1%, CUDA graphs
    -0.1%, fused Adam +4.1%, where the twin assumed +2%, +2.7% and +4%); None: none did."""
    ratios = [
        ratio
        for baseline, rows in ladders
        for change, ratio in _paired(rows, knob, with_defaults(baseline).get(knob), baseline)
        if change.get(knob) == value
    ]
    return median(ratios) if ratios else None


def _paired(
    rows: Sequence[Row], knob: str, plain_value: Any, baseline: Mapping[str, Any]
) -> list[tuple[Mapping[str, Any], float]]:
    """Each row that sets `knob` otherwise than `plain_value`, with its rate over the row of
    the same ladder that differs from it by that knob alone: SYNTHETIC where both measured
    it, else FULL. A row's change is from `baseline`, where the knob is at its own value. A
    batch's learning-rate change travels with it."""
    at_baseline = with_defaults(baseline).get(knob, plain_value)

    def value(change: Mapping[str, Any]) -> Any:
        return change.get(knob, at_baseline)

    def rest(change: Mapping[str, Any]) -> str:
        kept = {k: v for k, v in change.items() if k != knob and not (knob == BATCH and "lr" in k)}
        return repr(sorted(kept.items(), key=lambda item: item[0]))

    plain = {rest(row.change): row for row in rows if value(row.change) == plain_value}
    pairs: list[tuple[Mapping[str, Any], float]] = []
    for row in rows:
        if value(row.change) == plain_value or rest(row.change) not in plain:
            continue
        other = plain[rest(row.change)]
        for phase in ("synthetic", "full"):
            if row.rates.get(phase) and other.rates.get(phase):
                pairs.append(
                    ({**row.change, knob: value(row.change)},
                     median(row.rates[phase]) / median(other.rates[phase]))
                )  # fmt: skip
                break
    return pairs


# The twin's gains (twin.GAINS) and the knob each is the speed-up of.
GAIN_KNOBS: dict[str, tuple[str, Any]] = {
    "fused": ("optimizer_impl", "fused"),
    "script": ("jit", "script"),
    "compile": ("jit", "compile"),
    "graphs": ("cuda_graphs", True),
}


def measured_gains(ladders: Sequence[Ladder]) -> dict[str, float]:
    """Each of the twin's gains that a ladder measured (knob_gain), by GAIN_KNOBS' name."""
    gains = {}
    for name, (knob, value) in GAIN_KNOBS.items():
        gain = knob_gain(ladders, knob, value)
        if gain is not None:
            gains[name] = gain
    return gains
