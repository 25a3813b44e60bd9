"""The DDP stage: gradient exchange across ranks, with its two reference runs.

It needs a multi-rank session (--nproc or --nodes of 2 or more). Besides its
variants it measures two reference runs that are never adopted: ``noddp``
(the same ranks with no gradient exchange) and ``1 rank`` (one GPU with the
same per-rank batch), from which the summary gives the communication overhead
and the weak scaling efficiency (verdicts.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.hardware.types import MachineInfo
from tuneup.probe.stages import Proposal, Stage, current
from tuneup.probe.types import Candidate

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
