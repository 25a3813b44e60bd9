"""A probe's profile breakdown in findings that name the next move, with their numbers.

Like torch-tb-profiler's rules, HTA and `nsys analyze`, each rule compares a measured
share with a threshold; unlike their generic tips, a finding names the tuneup stage
that addresses the cause and quotes what this ladder did there. On a GPU the rules fire
on the device's facts (probe/breakdown.py, `basis` "device"): data-bound is the GPU
idle waiting on input, or input work taking much of its time; compute-bound is the
GPU busy, in forward and backward. A profile on the host's basis (a CPU's, or one
journaled before the device was read) is judged on its ranges' spans, as before;
there a GPU's data wait counts only where the GPU also idled on the host. Pure (no torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from tuneup.config.loaders import loader
from tuneup.probe.breakdown import (
    COMPUTE_PARTS,
    INPUT_PARTS,
    Breakdown,
    as_breakdown,
    idle_causes,
    short_name,
)

DATA_WAIT = 0.05  # torch-tb-profiler's DataLoader rule
H2D = 0.05
TENSOR_CORE = 0.01
CONV_ELIGIBLE = 0.10
GAPS = 0.20
SHORT_KERNEL_US = 20.0
GPU_BUSY = 0.50
ALLREDUCE = 0.10
INPUT_WORK = 0.20  # input work (data, h2d) as a share of the GPU's time
COMPUTE_BUSY = 0.80  # compute-bound: the GPU busy above this share of the step,
COMPUTE_SHARE = 0.80  # and forward and backward above this share of its time


@dataclass(frozen=True)
class StageOutcome:
    """What the ladder did at one stage, in its own words: the rules quote it, never infer it."""

    tried: bool
    summary: str


@dataclass(frozen=True)
class Finding:
    """One rule that fired: what it measured against its threshold, and who addresses it.

    Attributes:
        rule: the rule's name ("data_wait", "h2d_copies", "tensor_cores", ...).
        measured: the value it compared (a share of the step, or pageable copies counted).
        threshold: the value it compared it with.
        text: one line with the numbers, for the CLI and the app.
        stage: the first stage that addresses the cause ("" where the profile cannot say).
        tried: whether this ladder tried any stage that addresses it.
        ladder_said: what the ladder said at those stages, quoted.
    """

    rule: str
    measured: float
    threshold: float
    text: str
    stage: str
    tried: bool
    ladder_said: str


Stages = Mapping[str, StageOutcome]
Config = Mapping[str, Any]


class _Fired(NamedTuple):
    weight: float  # how much of the step it concerns: the order of the findings
    rule: str
    measured: float
    threshold: float
    what: str
    names: tuple[str, ...] = ()
    note: str = ""


def _config_says(config: Config, *names: str) -> str:
    said = []
    for name in names:
        value = config.get(name)
        if isinstance(value, bool):
            said.append(f"{name} {'on' if value else 'off'}")
        elif value is not None:
            said.append(f"{name}={value}")
    return f"this config has {', '.join(said)}" if said else ""


def _said(name: str, outcome: StageOutcome | None) -> str:
    if outcome is None:
        return f"[{name}] not in this ladder"
    return f"[{name}] {outcome.summary or ('tried' if outcome.tried else 'not tried')}"


def _finding(fired: _Fired, stages: Stages | None) -> Finding:
    """The finding in words; `stages` None: no ladder ran (a trace read alone), so none is
    quoted."""
    line = fired.what
    stage = fired.names[0] if fired.names else ""
    many = len(fired.names) > 1
    who = f"{' and '.join(fired.names)} stage{'s address' if many else ' addresses'} it"
    if stages is None:
        line += f": tuneup's {who}" if fired.names else ""
        line += f" ({fired.note})" if fired.note else ""
        return Finding(fired.rule, fired.measured, fired.threshold, line, stage, False, "")
    outcomes = [(name, stages.get(name)) for name in fired.names]
    said = "; ".join(_said(name, outcome) for name, outcome in outcomes)
    if fired.names:
        line += f": the {who}"
        line += f" ({fired.note})" if fired.note else ""
        line += f"; this ladder: {said}"
    elif fired.note:
        line += f"; {fired.note}"
    tried = any(outcome is not None and outcome.tried for _, outcome in outcomes)
    return Finding(fired.rule, fired.measured, fired.threshold, line, stage, tried, said)


def _data_wait(b: Breakdown, config: Config) -> _Fired | None:
    """Data-bound: on the device, the GPU idle waiting on input or input work taking much
    of its time; on the host's spans, the wait in `data` (on a GPU only where it idled on
    the host too: a host waiting in `data` while the GPU works is no data wait)."""
    note = _config_says(config, "num_data_workers", "data_loader_config")
    names = ("workers", "data")
    if b.on_device:
        return _input_bound(b, note)
    share = b.part("data")
    if share is None or share <= DATA_WAIT:
        return None
    g = b.cuda_gpu
    idle = b.share(g.idle_host_s) if g is not None else None
    if idle is None:
        what = f"data wait is {share:.0%} of the step (rule: above {DATA_WAIT:.0%})"
        return _Fired(share, "data_wait", share, DATA_WAIT, what, names, note)
    if idle <= DATA_WAIT:
        return None
    what = (
        f"data wait is {share:.0%} of the step on the host's spans and the GPU idles "
        f"{idle:.0%} of it waiting on the host (rule: both above {DATA_WAIT:.0%})"
    )
    return _Fired(min(share, idle), "data_wait", min(share, idle), DATA_WAIT, what, names, note)


def _input_bound(b: Breakdown, note: str) -> _Fired | None:
    g = b.cuda_gpu
    waiting = b.share(g.idle_input_s) if g is not None else None
    work = b.parts(*INPUT_PARTS)
    names = ("workers", "data")
    if waiting is not None and waiting > DATA_WAIT:
        what = (
            f"the GPU waits on input {waiting:.0%} of the step, idle until the host launches "
            f"the next batch's work (rule: above {DATA_WAIT:.0%})"
        )
        return _Fired(waiting, "data_wait", waiting, DATA_WAIT, what, names, note)
    if work > INPUT_WORK:
        what = (
            f"input work (data and h2d) is {work:.0%} of the GPU's time "
            f"(rule: above {INPUT_WORK:.0%})"
        )
        weight = work * (b.share(g.busy_s if g is not None else None) or 1.0)
        return _Fired(weight, "data_wait", work, INPUT_WORK, what, names, note)
    return None


def _h2d_copies(b: Breakdown, config: Config) -> _Fired | None:
    """Copies on the step's path, or from pageable memory (which cannot overlap compute)."""
    if b.device == "cpu":
        return None
    share = b.part("h2d")
    of = "of the GPU's time" if b.on_device else "of the step"
    pageable = b.gpu.pageable_copies if b.gpu is not None else None
    slow = share is not None and share > H2D
    unpinned = pageable is not None and pageable > 0
    if not (slow or unpinned):
        return None
    facts = [f"host-to-device copies take {share:.0%} {of}"] if slow else []
    facts += [f"{pageable:g} pageable copies in the profile"] if unpinned else []
    what = "; ".join(facts) + f" (rule: copies above {H2D:.0%} {of}, or any pageable)"
    note = _config_says(config, "pin_memory", "non_blocking", "data_loader_config")
    name = config.get("data_loader_config")
    if isinstance(name, str) and not loader(name).on_gpu:
        note += " (not the GPU-resident loader)"
    measured, threshold = (share, H2D) if slow and share is not None else (pageable or 0.0, 0.0)
    return _Fired(share or 0.0, "h2d_copies", measured, threshold, what, ("data",), note)


def _tensor_cores(b: Breakdown, config: Config) -> _Fired | None:
    """Convolutions are tensor-core work in bf16/fp16 (or TF32); none of it means FP32 math."""
    g, conv = b.cuda_gpu, b.conv_share or 0.0
    base = (g.busy_s or b.step_s) if g is not None else None
    if g is None or g.tensor_core_s is None or not base or conv <= CONV_ELIGIBLE:
        return None
    share = g.tensor_core_s / base
    if share >= TENSOR_CORE:
        return None
    of = "GPU busy time" if g.busy_s else "the step"
    what = (
        f"tensor cores ran {share:.1%} of {of} while convolutions are {conv:.0%} of GPU time "
        f"(rule: under {TENSOR_CORE:.0%} where convolutions exceed {CONV_ELIGIBLE:.0%})"
    )
    names = ("amp", "tf32") if config.get("tf32") is False else ("amp",)
    note = _config_says(config, "amp_mode", "tf32")
    weight = conv * (b.share(g.busy_s) or 1.0)
    return _Fired(weight, "tensor_cores", share, TENSOR_CORE, what, names, note)


def _launch_bound(b: Breakdown, config: Config) -> _Fired | None:
    """Many short kernels leave the GPU waiting on launches; graphs and fusion cut them.
    The wait is the gaps between queued kernels and, where the profile tells input apart,
    the host's own launching too slowly (HTA's host wait, less the wait on input)."""
    g = b.cuda_gpu
    share = b.share(g.idle_gaps_s) if g is not None else None
    if g is not None and share is not None and g.idle_input_s is not None:
        share += max(0.0, (b.share(g.idle_host_s) or 0.0) - (b.share(g.idle_input_s) or 0.0))
    if g is None or share is None or share <= GAPS:
        return None
    if g.mean_kernel_us is None or g.mean_kernel_us >= SHORT_KERNEL_US:
        return None
    many = f", {g.kernels_per_step:,.0f} per step" if g.kernels_per_step is not None else ""
    what = (
        f"gaps between kernels are {share:.0%} of the step, the GPU waiting on their launches; "
        f"kernels {g.mean_kernel_us:.1f} us "
        f"on average{many} (rule: gaps above {GAPS:.0%}, kernels under {SHORT_KERNEL_US:g} us)"
    )
    note = _config_says(config, "cuda_graphs", "jit")
    return _Fired(share, "launch_bound", share, GAPS, what, ("cuda_graphs", "jit"), note)


def _gpu_busy(b: Breakdown, config: Config) -> _Fired | None:
    """A mostly idle GPU, with the biggest idle cause the profile measured (HTA's split)."""
    g = b.cuda_gpu
    busy = b.share(g.busy_s) if g is not None else None
    if g is None or busy is None or busy >= GPU_BUSY:
        return None
    what = f"the GPU is busy {busy:.0%} of the step (rule: below {GPU_BUSY:.0%})"
    causes = idle_causes(b)
    if not causes:
        note = "the profile does not split its idle time"
        return _Fired(1 - busy, "gpu_busy", busy, GPU_BUSY, what, (), note)
    cause, share = causes[0]
    names = IDLE_NAMES.get(cause, ())
    if cause == "the host" and g.idle_input_s is None:  # journaled before input was told apart
        names = ("workers", "data")
    words = "gaps between kernels" if cause == "launches" else f"waiting on {cause}"
    what += f"; the biggest idle cause is {words}, {share:.0%} of the step"
    note = "" if names else "a wait the trace does not explain: a synchronisation or an event"
    return _Fired(1 - busy, "gpu_busy", busy, GPU_BUSY, what, names, note)


IDLE_NAMES = {
    "input": ("workers", "data"),
    "the host": ("cuda_graphs", "jit"),  # the host launches too slowly: fewer, fused launches
    "launches": ("cuda_graphs",),
}


def _compute_bound(b: Breakdown, config: Config) -> _Fired | None:
    """The GPU busy, in forward and backward: what is left is the kernels' own speed."""
    g = b.cuda_gpu
    busy = b.share(g.busy_s) if g is not None and b.on_device else None
    compute = b.parts(*COMPUTE_PARTS)
    if busy is None or busy < COMPUTE_BUSY or compute < COMPUTE_SHARE:
        return None
    what = (
        f"compute-bound: the GPU is busy {busy:.0%} of the step, {compute:.0%} of its time "
        f"in forward and backward (rule: busy above {COMPUTE_BUSY:.0%}, forward and backward "
        f"above {COMPUTE_SHARE:.0%} of it)"
    )
    note = _config_says(config, "amp_mode", "channels_last", "jit")
    if b.top:
        kernel = f"the top kernel is {short_name(b.top[0][0])}, {b.top[0][1]:.0%} of GPU time"
        note = f"{note}; {kernel}" if note else kernel
    return _Fired(
        busy * compute, "compute_bound", compute, COMPUTE_SHARE, what, ("amp", "jit"), note
    )


def _allreduce(b: Breakdown, config: Config) -> _Fired | None:
    """Gradient all-reduce the backward pass did not hide (on the device: its kernels'
    share of the GPU's time)."""
    share = b.part("allreduce")
    if share is None or share <= ALLREDUCE:
        return None
    what = (
        f"gradient all-reduce kernels are {share:.0%} of the GPU's time (rule: above 10%)"
        if b.on_device
        else f"gradient all-reduce is {share:.0%} of the step, not overlapped (rule: above 10%)"
    )
    note = _config_says(config, "bucket_cap_mb", "gradient_as_bucket_view")
    return _Fired(share, "allreduce", share, ALLREDUCE, what, ("ddp",), note)


RULES = (
    _data_wait,
    _h2d_copies,
    _tensor_cores,
    _launch_bound,
    _gpu_busy,
    _compute_bound,
    _allreduce,
)


def findings(
    breakdown: Mapping[str, Any] | Breakdown, stages: Stages | None, config: Config
) -> list[Finding]:
    """The rules that fired, the one concerning most of the step first.

    Args:
        breakdown: the profile as journaled (or already parsed).
        stages: what the ladder did at each stage it planned; a missing one was not in it.
            None: no ladder ran (a trace read alone): the findings quote none.
        config: the probed config's knobs, quoted where a rule names one.
    """
    b = as_breakdown(breakdown)
    fired = [hit for rule in RULES if (hit := rule(b, config)) is not None]
    return [_finding(hit, stages) for hit in sorted(fired, key=lambda hit: -hit.weight)]
