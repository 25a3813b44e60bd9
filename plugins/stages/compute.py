"""The model's arithmetic, judged on SYNTHETIC: precision, optimizer, JIT, graphs, layout."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.config import GRAPHING_COMPILE_MODES
from tuneup.hardware.machine import compile_blocked
from tuneup.hardware.types import MachineInfo
from tuneup.probe.stages import Proposal, Stage, current, runs_on_cuda
from tuneup.probe.types import Candidate


def _cpu_run_reason(machine: MachineInfo, base: Mapping[str, Any], what: str) -> str | None:
    """A CUDA-only switch on an incumbent that trains on the CPU: nothing to measure."""
    if runs_on_cuda(machine, base):
        return None
    return f"the incumbent trains on the CPU (device=cpu), where {what} does not apply"


@dataclass(frozen=True)
class CudaOnlyStage(Stage):
    """A switch that only exists on the GPU: skipped when the incumbent trains on the CPU."""

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        return _cpu_run_reason(machine, base, self.title)


TF32 = CudaOnlyStage(
    name="tf32",
    order=30,
    title="TF32",
    description=(
        "Turns TF32 off (NVIDIA_TF32_OVERRIDE=0 before CUDA starts) to show what it is worth: "
        "on Ampere and newer it is expected to lose, and the search keeps TF32 on unless "
        "off is faster."
    ),
    knobs=("tf32",),
    needs=("cuda",),
    judged_on="synthetic",
    expected_gain=0.0,
    candidates=(Candidate("tf32 off", {"tf32": False}),),
)


@dataclass(frozen=True)
class AmpStage(Stage):
    """Mixed precision; fp16 is tried on the GPU only."""

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        if runs_on_cuda(machine, base):
            if current(base, "channels_last"):
                return [c for c in self.candidates if not c.values.get("channels_last")]
            # Tensor-core convolutions want both half precision and channels_last: tried
            # together here, since each may lose alone on the GPU (bf16 on the default
            # layout, channels_last in float32) and a later stage would never pair them.
            return list(self.candidates)
        # On the CPU, bf16 autocast works (and wins on CPUs with bf16 units); fp16
        # autocast with a GradScaler has few fast CPU kernels, so it is not tried.
        return [
            c
            for c in self.candidates
            if c.values.get("amp_mode") != "fp16" and not c.values.get("channels_last")
        ]


AMP = AmpStage(
    name="amp",
    order=40,
    title="Mixed precision",
    description=(
        "Autocast to bf16 (no loss scaling) or fp16 (with a GradScaler), and on the GPU bf16 "
        "with channels_last too, the pair tensor cores want. On the CPU only bf16 is tried. "
        "The fixed-seed loss is checked against the baseline's."
    ),
    knobs=("amp_mode", "channels_last"),
    judged_on="synthetic",
    expected_gain=0.5,
    candidates=(
        Candidate("bf16", {"amp_mode": "bf16"}),
        Candidate("fp16", {"amp_mode": "fp16"}),
        Candidate("bf16 + channels_last", {"amp_mode": "bf16", "channels_last": True}),
    ),
)


@dataclass(frozen=True)
class OptimizerStage(Stage):
    """Fused Adam; NVIDIA apex's only where it is importable and can run."""

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        apex_ok = machine.apex and runs_on_cuda(machine, base) and not current(base, "cuda_graphs")
        return [c for c in self.candidates if apex_ok or c.values.get("optimizer_impl") != "apex"]


OPTIMIZER = OptimizerStage(
    name="optimizer",
    order=50,
    title="Fused Adam",
    description=(
        "torch.optim.Adam(fused=True), and apex.optimizers.FusedAdam when NVIDIA apex is "
        "importable on a GPU (it cannot run inside a CUDA graph)."
    ),
    knobs=("optimizer_impl",),
    judged_on="synthetic",
    expected_gain=0.04,
    candidates=(
        Candidate("fused Adam", {"optimizer_impl": "fused"}),
        Candidate("apex FusedAdam", {"optimizer_impl": "apex"}),
    ),
)


@dataclass(frozen=True)
class JitStage(Stage):
    """TorchScript and torch.compile; compile only where its toolchain is there."""

    def propose(self, machine: MachineInfo, base: Mapping[str, Any]) -> Proposal:
        proposal = super().propose(machine, base)
        blocked = compile_blocked(machine, runs_on_cuda(machine, base))
        if blocked is None or proposal.skipped:
            return proposal
        # Skipped before it starts, with the reason: not a failure after a minute of work.
        compiling = [c for c in proposal.candidates if c.values.get("jit") == "compile"]
        kept = tuple(c for c in proposal.candidates if c not in compiling)
        rejected = proposal.rejected + tuple((c.label, blocked) for c in compiling)
        if not kept:
            return Proposal(self.name, reason=blocked, rejected=rejected)
        return dataclasses.replace(proposal, candidates=kept, rejected=rejected)


JIT = JitStage(
    name="jit",
    order=60,
    title="JIT compilation",
    description=(
        "torch.jit.script of the model and loss (the tutorial's JIT), and torch.compile. "
        "Compile time is reported as a one-time cost with its break-even step count; on a "
        "CPU torch.compile needs a C++ compiler."
    ),
    knobs=("jit", "compile_mode"),
    judged_on="synthetic",
    expected_gain=0.05,
    candidates=(
        Candidate("TorchScript", {"jit": "script"}),
        Candidate("torch.compile", {"jit": "compile"}),
    ),
)


@dataclass(frozen=True)
class CudaGraphsStage(Stage):
    """CUDA graphs, adjusted to what the incumbent can capture."""

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        mode = current(base, "compile_mode")
        if current(base, "jit") == "compile" and mode in GRAPHING_COMPILE_MODES:
            return f"the incumbent's torch.compile mode {mode} already captures CUDA graphs"
        return _cpu_run_reason(machine, base, "CUDA graph capture")

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        if self.incumbent_reason(machine, base) is not None:
            return []
        proposed = []
        for cand in self.candidates:
            values = dict(cand.values)
            notes = []
            if values.get("cuda_graphs") and current(base, "amp_mode") == "fp16":
                # fp16's GradScaler checks for overflow on the host: not capturable.
                values["amp_mode"] = "bf16"
                notes.append("bf16: fp16's scaler cannot be captured")
            if values.get("cuda_graphs") and current(base, "optimizer_impl") == "apex":
                values["optimizer_impl"] = "fused"
                notes.append("torch fused Adam: apex's cannot be captured")
            label = f"{cand.label} ({'; '.join(notes)})" if notes else cand.label
            proposed.append(Candidate(label, values))
        return proposed


CUDA_GRAPHS = CudaGraphsStage(
    name="cuda_graphs",
    order=70,
    title="CUDA graphs",
    description=(
        "Captures forward, backward and the optimizer step in one CUDA graph after warm-up. "
        "From an fp16 incumbent it is tried with bf16, and from apex with torch's fused Adam, "
        "since neither fp16's scaler nor apex can be captured."
    ),
    knobs=("cuda_graphs", "amp_mode", "optimizer_impl"),
    needs=("cuda",),
    judged_on="synthetic",
    expected_gain=0.03,
    candidates=(Candidate("cuda_graphs", {"cuda_graphs": True}),),
)


CHANNELS_LAST = Stage(
    name="channels_last",
    order=80,
    title="Channels-last memory",
    description=(
        "The channels_last_3d memory format for the model and batches, which lets cuDNN "
        "(and oneDNN on the CPU) pick tensor-core friendly convolution kernels."
    ),
    knobs=("channels_last",),
    judged_on="synthetic",
    expected_gain=0.035,
    candidates=(Candidate("channels_last", {"channels_last": True}),),
)


CUDNN_BENCHMARK = CudaOnlyStage(
    name="cudnn_benchmark",
    order=82,
    title="cuDNN benchmark",
    description=(
        "Turns cuDNN's algorithm benchmarking off to show what it is worth: with the fixed "
        "crop shapes of this model it is expected to lose, and the search keeps it on "
        "unless off is faster. Its probes run in a process of their own (cuDNN's choices "
        "outlive a probe)."
    ),
    knobs=("cudnn_benchmark",),
    needs=("cuda",),
    judged_on="synthetic",
    expected_gain=0.0,
    candidates=(Candidate("cudnn benchmark off", {"cudnn_benchmark": False}),),
)
