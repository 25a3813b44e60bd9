"""What the gradient all-reduce carries and over which links, for the scaling estimate.

The payload: the U-Net's gradient tensors (from its shape alone, no torch),
their fp32 bytes and how DDP packs them into buckets (all-reduce calls per
step). The links: the interconnect figures a preset gives as hints, or the
bandwidth one measured node implies. The model that turns these into a
weak-scaling estimate is :mod:`tuneup.cluster.scaling`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuneup.errors import UsageError

# Preset hint names (`probe: hints:`); each machine's preset documents its values.
HINT_GBS = "interconnect_gbs"  # network GB/s per GPU: the node's NIC bandwidth / its GPUs
HINT_LATENCY_US = "interconnect_latency_us"  # latency of one network ring step, us
HINT_NODE_GBS = "intra_node_gbs"  # ring bandwidth inside a node (NVLink) per GPU, GB/s

# DDP reduces fp32 gradients even under autocast: the parameters stay fp32.
GRAD_BYTES_PER_PARAM = 4
# torch.nn.parallel.DistributedDataParallel's default bucket_cap_mb (MiB).
DEFAULT_BUCKET_MB = 25.0
# DDP's first bucket is capped at 1 MiB (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES).
FIRST_BUCKET_MB = 1.0
# Used only when no latency is given: NCCL's ring cost model charges 2.7 to
# 9.6 us per network step depending on the protocol (src/graph/tuning.cc).
DEFAULT_LATENCY_US = 5.0

GB = 1e9
_MIB = 1024 * 1024


def gradient_bytes(parameters: int) -> int:
    """Bytes each rank all-reduces per step: fp32 gradients of every parameter."""
    if parameters < 1:
        raise UsageError(f"the model must have parameters to scale, got {parameters}")
    return parameters * GRAD_BYTES_PER_PARAM


def bucket_count(grad_bytes: int, bucket_cap_mb: float = DEFAULT_BUCKET_MB) -> int:
    """All-reduce calls per step, as if gradients filled buckets of this many MiB exactly.

    A lower bound on DDP's calls when tensors are small; `ddp_bucket_count` packs
    real tensors (for the U-Net, 8 calls at 25 MiB where this says 18).
    """
    if bucket_cap_mb <= 0:
        raise UsageError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
    return max(1, math.ceil(grad_bytes / (bucket_cap_mb * _MIB)))


def ddp_bucket_count(
    tensor_bytes: Sequence[int],
    bucket_cap_mb: float = DEFAULT_BUCKET_MB,
    first_bucket_mb: float = FIRST_BUCKET_MB,
) -> int:
    """All-reduce calls per step as DDP packs its buckets.

    DDP fills buckets in the order gradients become ready (the reverse of
    registration), never splits a tensor, and closes a bucket once it reaches
    its cap; the first bucket's cap is small so the last layers' gradients go
    out early. For the U-Net this gives the 8 -> 5 calls the tutorial counted
    when bucket_cap_mb went from 25 to 100.

    Args:
        tensor_bytes: gradient bytes of each parameter, in registration order.
        bucket_cap_mb: DDP's bucket_cap_mb (MiB).
        first_bucket_mb: the first bucket's cap (MiB).
    """
    if bucket_cap_mb <= 0 or first_bucket_mb <= 0:
        raise UsageError(f"bucket sizes must be positive, got {bucket_cap_mb}, {first_bucket_mb}")
    count = 0
    filled = 0
    cap = first_bucket_mb * _MIB
    for size in reversed(tensor_bytes):
        filled += size
        if filled >= cap:
            count += 1
            filled = 0
            cap = bucket_cap_mb * _MIB
    return max(1, count + (1 if filled else 0))


@dataclass(frozen=True)
class Interconnect:
    """The links the all-reduce crosses.

    Attributes:
        gbs: network bandwidth per GPU, GB/s (a node's NICs shared by its GPUs).
        latency_us: latency of one ring step, microseconds.
        node_gbs: ring bandwidth inside a node (NVLink), GB/s; None: as slow as `gbs`.
        source: where the figures come from: "hints" or "measured" (one node's
            ring, which is usually faster than the network: optimistic).
    """

    gbs: float
    latency_us: float = DEFAULT_LATENCY_US
    node_gbs: float | None = None
    source: str = "hints"

    def __post_init__(self) -> None:
        for name in ("gbs", "node_gbs"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UsageError(f"interconnect {name} must be positive GB/s, got {value}")
        if not self.latency_us >= 0:
            raise UsageError(f"interconnect latency must be 0 us or more, got {self.latency_us}")


def _positive_number(hints: Mapping[str, Any], key: str) -> float | None:
    value = hints.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UsageError(f"preset hint '{key}' must be a positive number, got {value!r}")
    return float(value)


def interconnect_from_hints(hints: Mapping[str, Any] | None) -> Interconnect | None:
    """The preset's interconnect figures, or None when it gives no bandwidth.

    Raises:
        UsageError: a figure that is not a positive number.
    """
    if not hints:
        return None
    gbs = _positive_number(hints, HINT_GBS)
    latency = hints.get(HINT_LATENCY_US)
    if latency is not None and (
        isinstance(latency, bool) or not isinstance(latency, (int, float)) or latency < 0
    ):
        raise UsageError(f"preset hint '{HINT_LATENCY_US}' must be 0 or more, got {latency!r}")
    node_gbs = _positive_number(hints, HINT_NODE_GBS)
    if gbs is None:
        return None
    return Interconnect(
        gbs=gbs,
        latency_us=DEFAULT_LATENCY_US if latency is None else float(latency),
        node_gbs=node_gbs,
        source="hints",
    )


def effective_bandwidth_gbs(
    overhead_s: float, grad_bytes: int, ranks: int, buckets: int, latency_us: float
) -> float | None:
    """The ring bandwidth that explains a measured one-node overhead.

    Inverts node(g) = 2(g-1)/g * S / B + 2(g-1) * L * k for B. The result is
    "effective": it folds in whatever overlap with backward hid. None when the
    overhead is too small to attribute to bandwidth (or there is no ring).
    """
    if ranks < 2:
        return None
    transfer = overhead_s - 2 * (ranks - 1) * latency_us * 1e-6 * buckets
    if transfer <= 0:
        return None
    return 2 * (ranks - 1) / ranks * grad_bytes / transfer / GB


def measured_interconnect(
    node_comm: float | None, grad_bytes: int, ranks: int, buckets: int
) -> Interconnect:
    """The "measured" interconnect: the bandwidth one node's overhead implies.

    Args:
        node_comm: one node's exposed communication per step, seconds; None when
            no node was measured with several ranks.
        grad_bytes: bytes all-reduced per step.
        ranks: ranks in the measured node's ring.
        buckets: all-reduce calls per step.

    Raises:
        UsageError: nothing measured, or too little overhead to derive a bandwidth from.
    """
    if node_comm is None:
        raise UsageError(
            f"no interconnect figures: give '{HINT_GBS}' (and '{HINT_LATENCY_US}') in the "
            "preset's hints, or measure one node with several ranks"
        )
    gbs = effective_bandwidth_gbs(node_comm, grad_bytes, ranks, buckets, DEFAULT_LATENCY_US)
    if gbs is None:
        raise UsageError(
            "the one-node run shows too little communication overhead to derive a bandwidth "
            f"from: give '{HINT_GBS}' in the preset's hints"
        )
    return Interconnect(gbs=gbs, latency_us=DEFAULT_LATENCY_US, source="measured")
