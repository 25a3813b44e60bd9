"""tuneup's built-in probe stages: the tutorial's tuning path, one knob at a time.

Each stage is a module-level `Stage` value registered under the entry-point
group ``tuneup.stages`` (see pyproject.toml), exactly as a third-party package
would register its own. The search keeps a variant only when it beats the
incumbent by more than the noise margin, so a stage may propose a variant that
is expected to lose: it measures what a switch is worth.

The ``ddp`` stage needs a multi-rank session (--nproc or --nodes of 2 or
more). Besides its variants it measures two reference runs that are never
adopted: ``noddp`` (the same ranks with no gradient exchange) and ``1 rank``
(one GPU with the same per-rank batch), from which the summary gives the
communication overhead and the weak scaling efficiency (verdicts.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.config import GRAPHING_COMPILE_MODES, LOADERS, loader
from tuneup.hardware.machine import compile_blocked
from tuneup.hardware.types import MachineInfo
from tuneup.probe.stages import Proposal, Stage, current, runs_on_cuda
from tuneup.probe.types import Candidate

# Each stage declares the phase its knobs move (judged_on: IO for the loader, SYNTHETIC for
# the model's arithmetic, FULL for the batch and DDP, which move both) and the gain it
# typically brings (expected_gain), what a time budget keeps first. The gains are priors
# from the tutorial's A100 figures (unet-workload.md: 2 -> 8 workers +217%, DALI +44%,
# AMP +57% SYNTHETIC, fused Adam +4%, JIT +7% SYNTHETIC, DDP buffers and buckets +3.5%)
# and the first H200 run (channels_last +3.5% SYNTHETIC); TF32 off is measured for what
# TF32 is worth and is expected to lose. Each declares its place in the default ladder
# (order: the tutorial's order), so a preset that does not list stages runs them all.


def _cpu_run_reason(machine: MachineInfo, base: Mapping[str, Any], what: str) -> str | None:
    """A CUDA-only switch on an incumbent that trains on the CPU: nothing to measure."""
    if runs_on_cuda(machine, base):
        return None
    return f"the incumbent trains on the CPU (device=cpu), where {what} does not apply"


@dataclass(frozen=True)
class WorkersStage(Stage):
    """Loader workers, capped by the CPUs each rank may use (each rank has its own loader)."""

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        cap = machine.cpus_per_rank
        return [c for c in self.candidates if c.values.get("num_data_workers", 0) <= cap]

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        if self.candidates_for(machine, base):
            return None
        share = ""
        if machine.ranks_per_node > 1:
            share = f" ({machine.cpus_usable} usable over {machine.ranks_per_node} ranks per node)"
        return (
            f"CPUs per GPU/rank: only {machine.cpus_per_rank}{share}; "
            "no room for more loader workers"
        )


WORKERS = WorkersStage(
    name="workers",
    order=10,
    title="Data loader workers",
    description=(
        "More DataLoader worker processes per rank, as the tutorial's first step (2 -> 4 -> 8 "
        "-> 16). Counts above the CPUs per GPU/rank (this process's affinity shared among "
        "the ranks of its node) are not tried."
    ),
    knobs=("num_data_workers",),
    judged_on="io",
    expected_gain=1.0,
    candidates=tuple(Candidate(f"{n} workers", {"num_data_workers": n}) for n in (2, 4, 8, 16)),
)


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


@dataclass(frozen=True)
class BatchSizeStage(Stage):
    """The batch size scaled relative to the incumbent's."""

    factors: tuple[float, ...] = (0.5, 2.0)

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        if self.candidates:  # a preset's explicit batch sizes win over the factors
            return list(self.candidates)
        # local_batch_size, when set, overrides the global one: scale what is in force.
        local = current(base, "local_batch_size")
        knob, size = (
            ("local_batch_size", local)
            if local is not None
            else ("global_batch_size", current(base, "global_batch_size"))
        )
        ranks = 1 if knob == "local_batch_size" else max(1, machine.world_size)
        rule = _lr_rule(base, size * (max(1, machine.world_size) if local is not None else 1))
        proposed = []
        for factor in self.factors:
            new = round(size * factor)
            if new < ranks or new == size or new % ranks:
                continue  # every rank needs an equal, non-empty share
            proposed.append(Candidate(f"batch x{factor:g} ({knob} {new})", {knob: new, **rule}))
        return proposed

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        if self.candidates_for(machine, base):
            return None
        return f"the batch cannot be scaled by {list(self.factors)} into equal shares per rank"


def _lr_rule(base: Mapping[str, Any], global_batch: int) -> dict[str, Any]:
    """The knobs that make the learning rate follow the batch: none when the config has a rule.

    A config that scales by no rule (`lr_schedule.scaling: none`) would run a
    bigger batch at the same learning rate; the candidate then carries the
    tutorial's rule, sqrt of global/base batch, anchored at the incumbent's
    batch so the incumbent's own learning rate is unchanged.
    """
    schedule = dict(current(base, "lr_schedule") or {})
    if schedule.get("scaling", "sqrt") != "none":
        return {}
    return {
        "lr_schedule": {**schedule, "scaling": "sqrt"},
        "base_batch_size": int(global_batch),
    }


BATCH_SIZE = BatchSizeStage(
    name="batch_size",
    order=90,
    title="Batch size",
    description=(
        "Half and double the incumbent's batch (per rank when local_batch_size is set). "
        "Samples/s is compared, and the learning rate follows lr_schedule.scaling (sqrt by "
        "default) of global/base batch; a config that scales by no rule gets the tutorial's "
        "sqrt rule from the incumbent's batch. The loss is compared at equal samples seen, "
        "and the verdict says to check time-to-accuracy. A batch too big for memory ends as "
        "oom."
    ),
    knobs=("global_batch_size", "local_batch_size", "lr_schedule", "base_batch_size"),
    judged_on="full",
    expected_gain=0.05,
)


# --- data: which loader feeds the model -------------------------------------------------

_DALI_REASON = "needs NVIDIA DALI (pip install 'tuneup[dali]')"
_GPU_ON_CPU_REASON = "same as inmem without CUDA"


@dataclass(frozen=True)
class DataStage(Stage):
    """The loader kind; lowmem is tried with the incumbent's worker count."""

    def candidate_reason(
        self, cand: Candidate, machine: MachineInfo, base: Mapping[str, Any]
    ) -> str | None:
        """Why this machine cannot try ``cand``; None when it can."""
        kind = loader(str(cand.values.get("data_loader_config")))
        if kind.dali and not machine.dali:
            return _DALI_REASON
        if kind.on_gpu and not runs_on_cuda(machine, base):
            return _GPU_ON_CPU_REASON
        return None

    def skipped_candidates(
        self, machine: MachineInfo, base: Mapping[str, Any]
    ) -> list[tuple[str, str]]:
        """(label, reason) of each declared candidate this machine cannot try."""
        skipped = []
        for cand in self.candidates:
            reason = self.candidate_reason(cand, machine, base)
            if reason is not None:
                skipped.append((cand.label, reason))
        return skipped

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        if not loader(str(current(base, "data_loader_config"))).reads_files:
            return "the incumbent trains on synthetic data: there is no file to load"
        return None

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        if self.incumbent_reason(machine, base) is not None:
            return []
        workers = current(base, "num_data_workers")
        proposed = []
        for cand in self.candidates:
            if self.candidate_reason(cand, machine, base) is not None:
                continue
            if cand.values.get("data_loader_config") == "lowmem":
                # The workers stage's winner, kept: lowmem is compared at its best.
                cand = Candidate(cand.label, {**cand.values, "num_data_workers": workers})
            proposed.append(cand)
        return proposed


DATA = DataStage(
    name="data",
    order=20,
    title="Data loader",
    description=(
        "Where crops are cut: from the HDF5 file per sample (lowmem, with the incumbent's "
        "workers), from the box in host memory (inmem), by NVIDIA DALI (dali-lowmem), or "
        "from the box resident in GPU memory (gpu). The gpu loader needs both boxes to fit "
        "in free GPU memory."
    ),
    knobs=("data_loader_config", "num_data_workers"),
    judged_on="io",
    expected_gain=0.4,
    candidates=tuple(
        Candidate(kind.name, {"data_loader_config": kind.name}) for kind in LOADERS if kind.proposed
    ),
)


# --- ddp: gradient exchange across ranks ------------------------------------------------

BUCKET_SIZES_MB = (10, 25, 50, 100, 200)
NODDP = "noddp"
ONE_RANK = "1 rank"


def per_rank_batch(machine: MachineInfo, base: Mapping[str, Any]) -> int | None:
    """The incumbent's batch on each rank: local_batch_size, else the global one shared out.

    None when the global batch is smaller than the ranks (no valid share).
    """
    local = current(base, "local_batch_size")
    if local is not None:
        return int(local)
    ranks = max(1, machine.world_size)
    share = int(current(base, "global_batch_size")) // ranks
    return share if share >= 1 else None


@dataclass(frozen=True)
class DdpStage(Stage):
    """DDP's knobs on the session's ranks, plus the noddp and single-rank reference runs."""

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        if current(base, "noddp"):
            return "the incumbent trains without gradient exchange (noddp=true): no DDP to tune"
        if per_rank_batch(machine, base) is None:
            return (
                f"global_batch_size {current(base, 'global_batch_size')} is smaller than the "
                f"{machine.world_size} ranks"
            )
        return None

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        if self.incumbent_reason(machine, base) is not None:
            return []
        batch = per_rank_batch(machine, base)
        proposed = []
        for cand in self.candidates:
            fewer = cand.ranks is not None and cand.ranks < machine.world_size
            if fewer and "local_batch_size" not in cand.values:
                # Weak scaling: the fewer ranks keep each rank's batch, not the global one.
                cand = dataclasses.replace(cand, values={**cand.values, "local_batch_size": batch})
            proposed.append(cand)
        return proposed

    def propose(self, machine: MachineInfo, base: Mapping[str, Any]) -> Proposal:
        # Stage.propose drops a variant whose knob values all equal the incumbent's, but
        # a run on fewer ranks is another probe even then (the 1-rank reference of an
        # incumbent that already sets local_batch_size): put such runs back, in order.
        proposal = super().propose(machine, base)
        if self.unavailable_reason(machine) or self.incumbent_reason(machine, base):
            return proposal
        offered = self.candidates_for(machine, base)
        kept = [
            c
            for c in offered
            if c in proposal.candidates
            or (c.ranks is not None and all(current(base, k) == v for k, v in c.values.items()))
        ]
        if not kept:
            return proposal
        return Proposal(self.name, candidates=tuple(kept), rejected=proposal.rejected)


DDP = DdpStage(
    name="ddp",
    order=85,
    title="DDP gradient exchange",
    description=(
        "DistributedDataParallel's knobs on the session's ranks: gradient bucket sizes "
        f"({', '.join(str(b) for b in BUCKET_SIZES_MB)} MB; PyTorch's default is 25), "
        "broadcast_buffers off (the model has no buffers) and gradient_as_bucket_view on. "
        "Two reference runs are measured and never adopted: noddp (no gradient exchange) "
        "gives the communication overhead, and 1 rank (one GPU, same per-rank batch) the "
        "weak scaling efficiency."
    ),
    knobs=(
        "bucket_cap_mb",
        "broadcast_buffers",
        "gradient_as_bucket_view",
        "noddp",
        "local_batch_size",
    ),
    needs=("multi_rank",),
    judged_on="full",
    expected_gain=0.03,
    candidates=(
        *(Candidate(f"bucket {mb} MB", {"bucket_cap_mb": mb}) for mb in BUCKET_SIZES_MB),
        Candidate("broadcast_buffers off", {"broadcast_buffers": False}),
        Candidate("gradient_as_bucket_view on", {"gradient_as_bucket_view": True}),
        Candidate(NODDP, {"noddp": True}, reference=True),
        Candidate(ONE_RANK, {}, ranks=1, reference=True),
    ),
)
