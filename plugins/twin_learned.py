"""What recorded ladders say beyond costs and rates: the failures a configuration met, and
how per-sample speed grew with the batch where a ladder measured both batches.

The third H200 ladder (bench/results/gpu-h200-2026-11-27c) is why: torch.compile failed
on bf16 + channels_last 19 s into its probe (torch 2.11's Inductor), which the twin had
priced as a 60 s compile that worked; and batch 256 ran no faster than 128 (1885 against
1862-1899 samples/s), where the twin's assumed (batch / 64)^0.05 had 256 winning and the
rest of the ladder priced at 256's cuDNN searches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuneup.probe.costmodel import conv_row
from tuneup.probe.stats import median

from .twin_rates import Row, with_defaults

BATCH = "global_batch_size"


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
    """Every crashed probe of a journal (an OOM or an unsupported knob the sim models)."""
    failures = []
    for line in lines:
        variant = dict(line.get("variant") or {})
        if line.get("status") != "crash" or not variant or not line.get("wall_s"):
            continue
        reason = str(line.get("reason") or "")
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


def batch_gains(rows: Sequence[Row], base_batch: int = 64) -> dict[int, float]:
    """Per-sample speed at each batch a ladder measured, over the same configuration's at the
    base batch: the median over configurations."""
    gains: dict[int, list[float]] = defaultdict(list)
    for change, ratio in _paired(rows, BATCH, base_batch):
        gains[int(change[BATCH])].append(ratio)
    return {batch: median(values) for batch, values in sorted(gains.items())}


def knob_gain(rows: Sequence[Row], knob: str, value: Any, default: Any) -> float | None:
    """Speed with `knob` set to `value` over the same configuration without it, where a
    ladder measured both (the H200's: TorchScript +0.3%, CUDA graphs -0.3%, fused Adam
    +4.0%, where the twin assumed +2%, +2.7% and +4%); None where none did."""
    ratios = [r for change, r in _paired(rows, knob, default) if change.get(knob) == value]
    return median(ratios) if ratios else None


def _paired(rows: Sequence[Row], knob: str, default: Any) -> list[tuple[Mapping[str, Any], float]]:
    """Each row that sets `knob`, with its rate over the row that differs from it by that knob
    alone (at its default): SYNTHETIC where both measured it, else FULL. A batch's
    learning-rate change travels with it."""

    def rest(change: Mapping[str, Any]) -> str:
        kept = {k: v for k, v in change.items() if k != knob and not (knob == BATCH and "lr" in k)}
        return repr(sorted(kept.items(), key=lambda item: item[0]))

    plain = {rest(row.change): row for row in rows if row.change.get(knob, default) == default}
    pairs = []
    for row in rows:
        if row.change.get(knob, default) == default or rest(row.change) not in plain:
            continue
        other = plain[rest(row.change)]
        for phase in ("synthetic", "full"):
            if row.rates.get(phase) and other.rates.get(phase):
                pairs.append((row.change, median(row.rates[phase]) / median(other.rates[phase])))
                break
    return pairs


# The twin's gains (twin.GAINS) and the knob each is the speed-up of.
GAIN_KNOBS: dict[str, tuple[str, Any]] = {
    "fused": ("optimizer_impl", "fused"),
    "script": ("jit", "script"),
    "compile": ("jit", "compile"),
    "graphs": ("cuda_graphs", True),
}


def measured_gains(rows: Sequence[Row]) -> dict[str, float]:
    """Each of the twin's gains that a ladder measured (knob_gain), by GAIN_KNOBS' name."""
    defaults = with_defaults({})
    gains = {}
    for name, (knob, value) in GAIN_KNOBS.items():
        gain = knob_gain(rows, knob, value, defaults.get(knob))
        if gain is not None:
            gains[name] = gain
    return gains
