"""A probe's profile breakdown in findings that name the next move, with their numbers.

Like torch-tb-profiler's rules, HTA and `nsys analyze`, each rule compares a measured
share of the step with a threshold; unlike their generic tips, a finding names the tuneup
stage that addresses the cause and quotes what this ladder did there. Pure (no torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tuneup.config.loaders import loader
from tuneup.probe.jsonvalues import EMPTY, as_list, count, number, number_map, text

DATA_WAIT = 0.05  # torch-tb-profiler's DataLoader rule
H2D = 0.05
TENSOR_CORE = 0.01
CONV_ELIGIBLE = 0.10
GAPS = 0.20
SHORT_KERNEL_US = 20.0
GPU_BUSY = 0.50
ALLREDUCE = 0.10


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


@dataclass(frozen=True)
class GpuTimes:
    """The GPU's side of one profiled step, in seconds per step (None: not measured)."""

    busy_s: float | None = None
    idle_host_s: float | None = None
    idle_gaps_s: float | None = None
    tensor_core_s: float | None = None
    kernels_per_step: float | None = None
    mean_kernel_us: float | None = None
    pageable_copies: float | None = None


@dataclass(frozen=True)
class Breakdown:
    """A journaled profile breakdown, parsed once so the rules read attributes."""

    steps: int | None = None
    step_s: float | None = None
    parts_s: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    device: str = ""
    gpu: GpuTimes | None = None
    top: tuple[tuple[str, float], ...] = ()
    tflops: float | None = None
    mfu: float | None = None
    conv_share: float | None = None

    @property
    def cuda_gpu(self) -> GpuTimes | None:
        """The GPU's times of a CUDA profile; None elsewhere, so the GPU rules stay quiet."""
        return self.gpu if self.device == "cuda" else None

    def share(self, seconds: float | None) -> float | None:
        """Seconds as a share of the measured step; None when either is unknown."""
        return None if seconds is None or not self.step_s else seconds / self.step_s

    def part(self, name: str) -> float | None:
        return self.share(self.parts_s.get(name))


def parse_breakdown(raw: Mapping[str, Any]) -> Breakdown:
    """The breakdown as journaled; a missing or mistyped field reads as not measured."""
    step_s = number(raw.get("step_s"))
    gpu_raw = raw.get("gpu")
    times = number_map(gpu_raw)
    gpu = GpuTimes(**{name: times.get(name) for name in GpuTimes.__dataclass_fields__})
    top = tuple(
        (text(item.get("name"), "?"), share)
        for item in as_list(raw.get("top"))
        if isinstance(item, Mapping) and (share := number(item.get("share"))) is not None
    )
    return Breakdown(
        steps=count(raw.get("steps")),
        step_s=step_s if step_s is not None and step_s > 0 else None,
        parts_s=number_map(raw.get("parts_s")),
        device=text(raw.get("device")),
        gpu=gpu if isinstance(gpu_raw, dict) else None,
        top=top,
        tflops=number(raw.get("tflops")),
        mfu=number(raw.get("mfu")),
        conv_share=number(raw.get("conv_share")),
    )


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


def _finding(fired: _Fired, stages: Stages) -> Finding:
    outcomes = [(name, stages.get(name)) for name in fired.names]
    said = "; ".join(_said(name, outcome) for name, outcome in outcomes)
    line = fired.what
    if fired.names:
        many = len(fired.names) > 1
        line += f": the {' and '.join(fired.names)} stage{'s address' if many else ' addresses'} it"
        line += f" ({fired.note})" if fired.note else ""
        line += f"; this ladder: {said}"
    elif fired.note:
        line += f"; {fired.note}"
    stage = fired.names[0] if fired.names else ""
    tried = any(outcome is not None and outcome.tried for _, outcome in outcomes)
    return Finding(fired.rule, fired.measured, fired.threshold, line, stage, tried, said)


def _data_wait(b: Breakdown, config: Config) -> _Fired | None:
    share = b.part("data")
    if share is None or share <= DATA_WAIT:
        return None
    what = f"data wait is {share:.0%} of the step (rule: above {DATA_WAIT:.0%})"
    note = _config_says(config, "num_data_workers", "data_loader_config")
    return _Fired(share, "data_wait", share, DATA_WAIT, what, ("workers", "data"), note)


def _h2d_copies(b: Breakdown, config: Config) -> _Fired | None:
    """Copies on the step's path, or from pageable memory (which cannot overlap compute)."""
    if b.device == "cpu":
        return None
    share = b.part("h2d")
    pageable = b.gpu.pageable_copies if b.gpu is not None else None
    slow = share is not None and share > H2D
    unpinned = pageable is not None and pageable > 0
    if not (slow or unpinned):
        return None
    facts = [f"host-to-device copies take {share:.0%} of the step"] if slow else []
    facts += [f"{pageable:g} pageable copies in the profile"] if unpinned else []
    what = "; ".join(facts) + f" (rule: copies above {H2D:.0%} of the step, or any pageable)"
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
    """Many short kernels leave the GPU waiting on launches; graphs and fusion cut them."""
    g = b.cuda_gpu
    share = b.share(g.idle_gaps_s) if g is not None else None
    if g is None or share is None or share <= GAPS:
        return None
    if g.mean_kernel_us is None or g.mean_kernel_us >= SHORT_KERNEL_US:
        return None
    many = f", {g.kernels_per_step:,.0f} per step" if g.kernels_per_step is not None else ""
    what = (
        f"gaps between kernels are {share:.0%} of the step, kernels {g.mean_kernel_us:.1f} us "
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
    host, gaps = b.share(g.idle_host_s) or 0.0, b.share(g.idle_gaps_s) or 0.0
    if not (host or gaps):
        note = "the profile does not split its idle time"
        return _Fired(1 - busy, "gpu_busy", busy, GPU_BUSY, what, (), note)
    cause, share, names = (
        ("waiting on the host", host, ("workers", "data"))
        if host >= gaps
        else ("gaps between kernels", gaps, ("cuda_graphs",))
    )
    what += f"; the biggest idle cause is {cause}, {share:.0%} of the step"
    return _Fired(1 - busy, "gpu_busy", busy, GPU_BUSY, what, names)


def _allreduce(b: Breakdown, config: Config) -> _Fired | None:
    """Gradient all-reduce the backward pass did not hide."""
    share = b.part("allreduce")
    if share is None or share <= ALLREDUCE:
        return None
    what = f"gradient all-reduce is {share:.0%} of the step, not overlapped (rule: above 10%)"
    note = _config_says(config, "bucket_cap_mb", "gradient_as_bucket_view")
    return _Fired(share, "allreduce", share, ALLREDUCE, what, ("ddp",), note)


RULES = (_data_wait, _h2d_copies, _tensor_cores, _launch_bound, _gpu_busy, _allreduce)


def findings(
    breakdown: Mapping[str, Any] | Breakdown, stages: Stages, config: Config
) -> list[Finding]:
    """The rules that fired, the one concerning most of the step first.

    Args:
        breakdown: the profile as journaled (or already parsed).
        stages: what the ladder did at each stage it planned; a missing one was not in it.
        config: the probed config's knobs, quoted where a rule names one.
    """
    b = breakdown if isinstance(breakdown, Breakdown) else parse_breakdown(breakdown)
    fired = [hit for rule in RULES if (hit := rule(b, config)) is not None]
    return [_finding(hit, stages) for hit in sorted(fired, key=lambda hit: -hit.weight)]


def whats_left(breakdown: Mapping[str, Any] | Breakdown) -> str:
    """What the step still spends its time on, measured facts only, for a recommendation."""
    b = breakdown if isinstance(breakdown, Breakdown) else parse_breakdown(breakdown)
    said: list[str] = []
    if b.conv_share is not None:
        where = {"cuda": "GPU time", "cpu": "CPU time"}.get(b.device, "device time")
        said.append(f"convolutions {b.conv_share:.0%} of {where}")
    elif b.top:
        said.append(f"top op {b.top[0][0]} {b.top[0][1]:.0%}")
    rate = [f"{b.tflops:,.3g} TFLOP/s"] if b.tflops is not None else []
    rate += [f"{b.mfu:.0%} of peak"] if b.mfu is not None else []
    if rate:
        said.append(", ".join(rate))
    busy = b.share(b.gpu.busy_s) if b.gpu is not None else None
    if busy is not None:
        said.append(f"GPU busy {busy:.0%} of the step")
    parts = sorted(b.parts_s.items(), key=lambda part: -part[1])
    if parts and b.step_s:
        said.append("by part: " + ", ".join(f"{n} {s / b.step_s:.0%}" for n, s in parts))
    elif parts:
        said.append("by part: " + ", ".join(f"{n} {s * 1e3:.1f} ms" for n, s in parts))
    if b.step_s:
        over = f"{b.steps} profiled steps" if b.steps else "profiled steps"
        said.append(f"{over} of {b.step_s * 1e3:.1f} ms")
    return "; ".join(said) if said else "the profile measured nothing to report"
