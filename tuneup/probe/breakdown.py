"""A profile's breakdown (probe/timeline.py) parsed once, and what its step still spends.

The rules (probe/profile_rules.py), the tables and the report read these attributes,
never the journaled mapping. A breakdown says the basis of its parts: "device", the
GPU's time in the work each part launched, or "host", the ranges' spans on the host
(a CPU's profile, and every profile journaled before the device was read). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tuneup.probe.jsonvalues import EMPTY, as_list, count, number, number_map, text

DEVICE = "device"
HOST = "host"
INPUT_PARTS = ("data", "h2d")
COMPUTE_PARTS = ("forward", "backward", "graph")
SMALL = 0.005  # a share that rounds to 0%: not worth a word
NAME_CHARS = 48  # a kernel's name in a line of text: cuDNN's run to 200


@dataclass(frozen=True)
class GpuTimes:
    """The GPU's side of one profiled step, in seconds per step (None: not measured).

    `idle_s` is the step less the busy time; HTA's split of it: waiting on the host
    (`idle_host_s`, of which on input `idle_input_s`), on launches (`idle_gaps_s`) and
    other (`idle_other_s`). A profile journaled before that split holds only the first
    two, then the long and the short gaps between kernels.
    """

    busy_s: float | None = None
    idle_s: float | None = None
    idle_host_s: float | None = None
    idle_input_s: float | None = None
    idle_gaps_s: float | None = None
    idle_other_s: float | None = None
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
    basis: str = HOST
    host_parts_s: Mapping[str, float] = field(default_factory=lambda: EMPTY)
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

    @property
    def on_device(self) -> bool:
        """Its parts are the device's work (a CUDA profile read from its launches)."""
        return self.basis == DEVICE and self.cuda_gpu is not None

    @property
    def device_s(self) -> float:
        """The device work of every part, per step (0 on the host's basis)."""
        return sum(self.parts_s.values()) if self.basis == DEVICE else 0.0

    def share(self, seconds: float | None) -> float | None:
        """Seconds as a share of the measured step; None when either is unknown."""
        return None if seconds is None or not self.step_s else seconds / self.step_s

    def part(self, name: str) -> float | None:
        """A part's share: of the device's time on its basis, of the step on the host's."""
        seconds = self.parts_s.get(name)
        if self.basis == DEVICE:
            total = self.device_s
            return None if seconds is None or not total else seconds / total
        return self.share(seconds)

    def parts(self, *names: str) -> float:
        """The summed share of `names` (a part not measured counts 0)."""
        return sum(self.part(name) or 0.0 for name in names)


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
        basis=DEVICE if raw.get("basis") == DEVICE else HOST,
        host_parts_s=number_map(raw.get("host_parts_s")),
        device=text(raw.get("device")),
        gpu=gpu if isinstance(gpu_raw, dict) else None,
        top=top,
        tflops=number(raw.get("tflops")),
        mfu=number(raw.get("mfu")),
        conv_share=number(raw.get("conv_share")),
    )


def as_breakdown(breakdown: Mapping[str, Any] | Breakdown) -> Breakdown:
    return breakdown if isinstance(breakdown, Breakdown) else parse_breakdown(breakdown)


def short_name(name: str) -> str:
    """A kernel's or an operator's name, short enough for a line: its template arguments
    and parameters dropped, its length capped."""
    bare = name
    if name.startswith("void ") or "<" in name:  # a C++ signature, not a copy's "(Pinned -> ..)"
        bare = re.split(r"[<(]", re.sub(r"^void\s+", "", name), maxsplit=1)[0] or name
    return bare if len(bare) <= NAME_CHARS else bare[: NAME_CHARS - 1] + "…"


def idle_causes(b: Breakdown) -> list[tuple[str, float]]:
    """The GPU's idle time by cause, as shares of the step, the largest first (HTA's split:
    on input, on the host otherwise, on launches, other); [] where not measured."""
    g = b.cuda_gpu
    if g is None:
        return []
    host = b.share(g.idle_host_s) or 0.0
    waiting_input = b.share(g.idle_input_s)
    causes = [("launches", b.share(g.idle_gaps_s) or 0.0), ("other", b.share(g.idle_other_s))]
    if waiting_input is None:
        causes.append(("the host", host))
    else:
        causes += [("input", waiting_input), ("the host", max(0.0, host - waiting_input))]
    return sorted(((c, s) for c, s in causes if s and s >= SMALL), key=lambda cause: -cause[1])


def whats_left(breakdown: Mapping[str, Any] | Breakdown) -> str:
    """What the step still spends its time on, measured facts only, for a recommendation:
    on the device's basis its largest parts and kernels first."""
    b = as_breakdown(breakdown)
    said: list[str] = []
    if b.on_device:
        said += _device_left(b)
    if b.conv_share is not None:
        where = {"cuda": "GPU time", "cpu": "CPU time"}.get(b.device, "device time")
        said.append(f"convolutions {b.conv_share:.0%} of {where}")
    elif b.top and not b.on_device:
        said.append(f"top op {b.top[0][0]} {b.top[0][1]:.0%}")
    rate = [f"{b.tflops:,.3g} TFLOP/s"] if b.tflops is not None else []
    rate += [f"{b.mfu:.0%} of peak"] if b.mfu is not None else []
    if rate:
        said.append(", ".join(rate))
    busy = b.share(b.gpu.busy_s) if b.gpu is not None else None
    if busy is not None:
        idle = ", ".join(f"{cause} {share:.0%}" for cause, share in idle_causes(b)[:2])
        said.append(f"GPU busy {busy:.0%} of the step" + (f" (idle on {idle})" if idle else ""))
    if not b.on_device:
        said += _host_left(b)
    if b.step_s:
        over = f"{b.steps} profiled steps" if b.steps else "profiled steps"
        said.append(f"{over} of {b.step_s * 1e3:.1f} ms")
    return "; ".join(said) if said else "the profile measured nothing to report"


def _device_left(b: Breakdown) -> list[str]:
    parts = sorted(b.parts_s.items(), key=lambda part: -part[1])
    said = ["GPU time by part: " + ", ".join(f"{n} {b.part(n) or 0:.0%}" for n, _s in parts)]
    if b.top:
        said.append("top kernels: " + ", ".join(f"{short_name(n)} {s:.0%}" for n, s in b.top[:3]))
    return said


def _host_left(b: Breakdown) -> list[str]:
    parts = sorted(b.parts_s.items(), key=lambda part: -part[1])
    if parts and b.step_s:
        return ["by part: " + ", ".join(f"{n} {s / b.step_s:.0%}" for n, s in parts)]
    if parts:
        return ["by part: " + ", ".join(f"{n} {s * 1e3:.1f} ms" for n, s in parts)]
    return []
