"""What a machine's probes cost, priced from its evidence (evidence.Measured): each
cost the worker pays (costs/one_time.WorkerCosts) measured where a journal recorded it,
else assumed, with its source, a low, likely and high value, and what would settle it.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence

from tuneup.costs.one_time import DEFAULT_BATCH_EXPONENT, Cost, WorkerCosts
from tuneup.errors import UsageError
from tuneup.probe.stats import median
from tuneup.probe.types import PHASES

from .evidence import Measured


def _measured_or(values: Sequence[float], source: str, otherwise: Cost) -> Cost:
    return Cost.of(list(values), source) if values else otherwise


def batch_exponent(measured: Measured, base_batch: int = 64) -> Cost | None:
    """How a new key's first step grows with the batch, where journals searched one row at
    two batches or more: the slope of log(first step) on log(batch) within each row, pooled
    over rows; its range, the exponents of each batch over the base. (The H200's bf16 +
    channels_last row: 32.5-33.1 s at 64, 66.2-66.7 s at 128, 162.2 s at 256: 1.00 from 64
    to 128, 1.15 from 64 to 256; the slope 1.13, where the median of the pairs said 1.02.)"""
    by_row: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for first in measured.first_keys():
        if first.batch > 0 and first.seconds > 0:
            by_row[first.row].append((math.log(first.batch), math.log(first.seconds)))
    sxy = sxx = 0.0
    for points in by_row.values():
        mean_x = statistics.fmean(x for x, _ in points)
        mean_y = statistics.fmean(y for _, y in points)
        sxy += sum((x - mean_x) * (y - mean_y) for x, y in points)
        sxx += sum((x - mean_x) ** 2 for x, _ in points)
    at_base: dict[str, list[float]] = defaultdict(list)
    for first in measured.first_keys():
        if first.batch == base_batch:
            at_base[first.row].append(first.seconds)
    exponents = [
        math.log(first.seconds / median(at_base[first.row])) / math.log(first.batch / base_batch)
        for first in measured.first_keys()
        if first.batch > base_batch and at_base.get(first.row) and first.seconds > 0
    ]
    if not exponents or sxx <= 0:
        return None
    slope = sxy / sxx
    source = "the slope of first steps on the batch within each conv row (journals)"
    return Cost(slope, min(*exponents, slope), max(*exponents, slope), source, True)


def _keyed_rows(
    measured: Measured, fresh: bool, exponent: float, base: int
) -> dict[str, list[float]]:
    """Journals' first steps of new conv keys by row, fresh or warm, brought to the base batch."""
    rows: dict[str, list[float]] = defaultdict(list)
    for first in measured.first_keys():
        if first.fresh == fresh and first.batch > 0:
            rows[first.row].append(first.seconds / (first.batch / base) ** exponent)
    return rows


def fresh_first_steps(measured: Measured, exponent: float = 0.5, base: int = 64) -> dict[str, Cost]:
    """A fresh process's first step by conv row: knobs.json's fresh rows, and the journals'
    fresh probes of a row (at the base batch)."""
    rows: dict[str, list[float]] = defaultdict(list)
    for name, row in measured.knob_rows.items():
        if row.get("first_step_s") and row.get("process", "fresh") in ("fresh", None):
            rows[name].append(float(row["first_step_s"]))
    for name, values in _keyed_rows(measured, True, exponent, base).items():
        rows[name] += values
    return {
        name: Cost.of(values, f"a fresh process's first step, {name} (knobs.json, journals)")
        for name, values in rows.items()
        if values
    }


def warm_new_keys(measured: Measured, exponent: float, base: int = 64) -> dict[str, Cost]:
    """A warm worker's first step of a conv key new to it, by row (at the base batch)."""
    return {
        name: Cost.of(values, f"a warm worker's first step of a new {name} key (journals)")
        for name, values in _keyed_rows(measured, False, exponent, base).items()
    }


# Each one-time cost a journal can measure: where it is read from, and the assumption taken
# where no journal measured it (its source, its range, the measurement that would settle it).
MEASURED_FROM: dict[str, str] = {
    "spawn": "one_time_s.spawn of fresh probes (journals)",
    "setup": "one_time_s.setup of warm probes (journals)",
    "warm_first": "first_steps of warm probes whose conv key was not new (journals)",
    "compile_cold": "first_steps of jit=compile probes with compile_cache cold (journals)",
    "compile_cached": "first_steps of jit=compile probes with compile_cache warm (journals)",
    "script": "jit=script probes' set-up beyond a plain probe's (journals)",
    "capture": "one_time_s.graph_capture (journals)",
}
ASSUMED_COSTS: dict[str, Cost] = {
    "spawn": Cost.assumed(
        8.0,
        low=5.0,
        high=45.0,
        source="a GPU node's process start",
        settle="a fresh probe's one_time_s.spawn",
    ),
    "setup": Cost.assumed(
        2.0,
        low=1.0,
        high=5.0,
        source="the spawn's 7.7 s less the interpreter, torch's import and CUDA's context "
        "(the first H200 run)",
        settle="a warm probe's one_time_s.setup (a ladder journal, or --gather)",
    ),
    "warm_first": Cost.assumed(
        0.3,
        low=0.1,
        high=1.0,
        source="a warm probe's first step beyond steady, besides a CPU loader's first batch "
        "(priced apart: the batch over one worker's rate): its loader's workers fork, the "
        "allocator's first blocks",
        settle="first_steps of warm probes of a seen conv key (a ladder journal)",
    ),
    "compile_cold": Cost.assumed(
        60.0,
        low=30.0,
        high=120.0,
        source="a cold torch.compile of the U-Net (gpu-ladder.md's time box)",
        settle="a jit=compile probe on an empty compile cache (gather)",
    ),
    "compile_cached": Cost.assumed(
        5.0,
        low=2.0,
        high=15.0,
        source="the CPU: 0.46 s after a release against 16.8 s cold (2.7%: the FX-graph and "
        "AOTAutograd caches hit; bench/results/compile_release_cpu.json); a GPU also loads "
        "Triton's kernels; at most a quarter of a cold compile",
        settle="a second jit=compile probe in a warm worker (gather on the GPU)",
    ),
    "script": Cost.assumed(
        5.0,
        low=2.0,
        high=10.0,
        source="the jit knob's declared first use",
        settle="a jit=script probe's set-up (gather)",
    ),
    "capture": Cost.assumed(
        2.0,
        low=1.0,
        high=5.0,
        source="gpu-ladder.md: a capture of the step",
        settle="a cuda_graphs probe's one_time_s.graph_capture (gather)",
    ),
}
CONV_WARM = Cost.assumed(
    1.0,
    low=0.8,
    high=1.0,
    source="the first H200 run's trace: the GPU 87-97% busy through the baseline's first "
    "step (cuDNN trying algorithms), which a new key pays again",
    settle="the first step of a new conv key in a warm worker (gather on the GPU)",
)


def base_batch(measured: Measured) -> int:
    """The batch the evidence's rows were measured at: its baseline's (a gather's first),
    64 where no journal says (knobs.json's rows)."""
    journals = [measured.gathered] if measured.gathered else list(measured.journals.values())
    for figures in journals:
        if figures is not None and figures.baseline.get("global_batch_size"):
            return int(figures.baseline["global_batch_size"])
    return 64


def worker_costs(measured: Measured, on_gpu: bool) -> WorkerCosts:
    """The cost model's figures for this evidence: measured where it has them, else the
    assumption (with its source, its range and what would settle it). Rows are kept at the
    baseline's batch, so a row measured there is its own price at every end of the
    exponent's range."""
    base = base_batch(measured)
    exponent = batch_exponent(measured, base)
    grow = (exponent or DEFAULT_BATCH_EXPONENT).likely
    first = fresh_first_steps(measured, grow, base)
    if "baseline" not in first:
        raise UsageError(f"{measured.folder}: no fresh process's first step was recorded")
    figures = {
        name: _measured_or(measured.all_of(name), MEASURED_FROM[name], ASSUMED_COSTS[name])
        for name in MEASURED_FROM
    }
    floor_high = min(c.likely for c in first.values())
    conv_new = measured.all_of("conv_new")
    return WorkerCosts(
        first_fresh=first,
        conv_new=(
            Cost.of(conv_new, "first_steps of warm probes of a new conv key")
            if conv_new and not on_gpu  # a GPU's new keys differ by row: priced from them
            else None
        ),
        conv_new_rows=warm_new_keys(measured, grow, base) if on_gpu else {},
        batch_exponent=exponent or DEFAULT_BATCH_EXPONENT,
        base_batch=base,
        conv_warm=CONV_WARM,
        conv_floor=Cost.assumed(
            2.0,
            low=0.0,
            high=floor_high,
            source="lazily loaded kernels a fresh process loads once; at most the least "
            f"fresh first step of a row ({floor_high:.1f} s)",
            settle="the first step of a new conv key in a warm worker (gather on the GPU)",
        ),
        unsettled={phase: _share_unsettled(measured, phase, on_gpu) for phase in PHASES},
        warm_windows=_warm_windows(measured),
        scale=_scale(measured),
        spawn=figures["spawn"],
        setup=figures["setup"],
        warm_first=figures["warm_first"],
        compile_cold=figures["compile_cold"],
        compile_cached=figures["compile_cached"],
        script=figures["script"],
        capture=figures["capture"],
    )


def _scale(measured: Measured) -> Cost:
    """What a warm probe's running part (its wall less its set-up and first steps) really
    took over what the model says of that part (its quartiles)."""
    ratios = sorted(measured.all_of("ratios"))
    if len(ratios) < 2:
        return Cost.assumed(
            1.0,
            high=1.05,
            source="on the CPU, warm probes took 7% over the model (0.07 s a probe: the "
            "release of the probe before, the runner's events); 5% at most",
            settle="a gather's repeats of the baseline (their walls against the model)",
        )
    quartiles = statistics.quantiles(ratios, n=4)
    return Cost(
        median(ratios),
        min(quartiles[0], median(ratios)),
        max(quartiles[2], median(ratios)),
        f"{len(ratios)} warm probes' running parts over the model's (median, quartiles)",
        True,
    )


def _warm_windows(measured: Measured) -> dict[str, Cost]:
    """Per phase, the windows a settling warm-up took (the estimate assumes two)."""
    found: dict[str, Cost] = {}
    for phase in PHASES:
        counts = [c for j in measured.journals.values() for c in j.windows.get(phase, ())]
        if counts:
            found[phase] = Cost.of(counts, f"{phase} warm-ups' windows after the first step")
    return found


def _share_unsettled(measured: Measured, phase: str, on_gpu: bool) -> Cost:
    """The share of `phase`'s warm-ups that ran to their cap, where journals recorded it;
    else an assumption: loader-bound phases wander on a GPU node's CPU loader."""
    flags = [flag for j in measured.journals.values() for flag in j.stable.get(phase, ())]
    if flags:
        share = sum(1 for f in flags if not f) / len(flags)
        return Cost(share, share, share, f"plan.stable of {len(flags)} {phase} warm-ups", True)
    if not on_gpu or phase == "synthetic":
        return Cost.assumed(
            0.0,
            high=0.1 if phase == "synthetic" else 0.5,
            source=f"no {phase} warm-up recorded whether it settled",
            settle="plan.stable in a ladder journal",
        )
    return Cost.assumed(
        0.5,
        low=0.0,
        high=1.0,
        source="the first H200 run: its second baseline probe's loader-bound warm-up never "
        "settled and ran to its cap",
        settle=f"plan.stable of {phase} warm-ups in a GPU ladder journal",
    )
