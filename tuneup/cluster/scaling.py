"""Weak-scaling estimate: what 2 to 64 nodes would give, from what one node measured.

An estimate, never a measurement: every table and dict it produces says so.
Weak scaling keeps each rank's local batch b, so the compute per step stays
b / r (r: one GPU's samples/s at that batch) and only the gradient all-reduce
grows with the job. The model, per training step:

    S       gradient bytes: parameters x 4 B (DDP all-reduces fp32 gradients,
            AMP or not)
    k       all-reduce calls (buckets) per step: DDP's packing of the tensors
            (`ddp_bucket_count`), or ceil(S / bucket_cap_mb MiB) without them
    g, n    ranks per node, nodes (p = g n ranks)
    B, L    the network: GB/s per GPU (its share of the node's NICs) and the
            latency of one ring step, in us
    B_node  the ring inside a node (NVLink); B when it is not known

    The all-reduce is a two-level ring: reduce-scatter inside the node, an
    all-reduce of each GPU's 1/g shard across the nodes over its own NIC,
    all-gather inside the node.
      node(g)    = 2(g-1)/g * S / B_node + 2(g-1) * L * k
      network(n) = 2(n-1)/n * S / (g B) + 2(n-1) * L * k
    With B_node = B the bandwidth terms add up to exactly the flat ring's
    2(p-1)/p * S / B. Latency is paid on 2(g-1) + 2(n-1) steps, not the flat
    ring's 2(p-1): NCCL's own ring cost model likewise charges the network
    latency only on its 2(nNodes-1) inter-node steps (NVIDIA/nccl,
    src/graph/tuning.cc).
    When one node was measured with g ranks, node(g) is the measured overhead
    instead, b g / node_sps - b / r: it already holds what NCCL, NVLink and
    DDP's overlap with backward really did, so the estimate reproduces the
    measured node and adds the network.

    exposed    = (1 - overlap) * (modelled terms) + measured node overhead
    step(n)    = b / r + exposed
    throughput = p b / step(n);  efficiency = (b / r) / step(n)

`overlap` (the share of the modelled communication hidden behind backward) is
0 unless the caller knows better: no constant here is fitted to a published
figure. What the model leaves out (stragglers, jitter, network contention,
achieved bandwidth below line rate) makes it optimistic; treating NVLink as
slow as the NIC (no B_node) and overlap 0 make it pessimistic.

S, k and the network figures come from :mod:`tuneup.cluster.allreduce`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuneup.cluster.allreduce import (
    DEFAULT_BUCKET_MB,
    GB,
    HINT_GBS,
    Interconnect,
    bucket_count,
    measured_interconnect,
)
from tuneup.errors import UsageError

DEFAULT_NODES = (1, 2, 4, 8, 16, 32, 64)


def node_overhead_seconds(
    per_gpu_sps: float, node_sps: float, local_batch: int, ranks_per_node: int
) -> float:
    """Exposed communication per step on one node: its step time less one GPU's.

    Negative when the node measured faster than its GPUs alone (noise): the caller clamps.
    """
    return local_batch * ranks_per_node / node_sps - local_batch / per_gpu_sps


@dataclass(frozen=True)
class ScalingRow:
    """One predicted point: `nodes` nodes of the measured node's ranks."""

    nodes: int
    gpus: int
    samples_per_s: float
    efficiency: float
    step_s: float
    comm_s: float  # exposed communication per step

    @property
    def comm_fraction(self) -> float:
        """Share of the step spent in exposed communication."""
        return self.comm_s / self.step_s


@dataclass(frozen=True)
class ScalingEstimate:
    """Predicted weak scaling; `kind` is always "estimate", whatever prints it."""

    rows: tuple[ScalingRow, ...]
    per_gpu_sps: float
    local_batch: int
    ranks_per_node: int
    grad_bytes: int
    buckets: int
    bucket_cap_mb: float
    interconnect: Interconnect
    overlap: float
    node_comm_s: float
    node_measured: bool
    notes: tuple[str, ...] = field(default=())
    kind: str = "estimate"

    def row(self, nodes: int) -> ScalingRow:
        for row in self.rows:
            if row.nodes == nodes:
                return row
        raise KeyError(nodes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON for summary.json or a report."""
        return {
            "kind": self.kind,
            "per_gpu_sps": self.per_gpu_sps,
            "local_batch": self.local_batch,
            "ranks_per_node": self.ranks_per_node,
            "grad_bytes": self.grad_bytes,
            "buckets": self.buckets,
            "bucket_cap_mb": self.bucket_cap_mb,
            "interconnect": {
                "gbs": self.interconnect.gbs,
                "latency_us": self.interconnect.latency_us,
                "node_gbs": self.interconnect.node_gbs,
                "source": self.interconnect.source,
            },
            "overlap": self.overlap,
            "node_comm_s": self.node_comm_s,
            "node_measured": self.node_measured,
            "notes": list(self.notes),
            "rows": [
                {
                    "nodes": r.nodes,
                    "gpus": r.gpus,
                    "samples_per_s": r.samples_per_s,
                    "efficiency": r.efficiency,
                    "step_s": r.step_s,
                    "comm_s": r.comm_s,
                }
                for r in self.rows
            ],
        }


def _check_inputs(
    per_gpu_sps: float,
    local_batch: int,
    ranks_per_node: int,
    grad_bytes: int,
    overlap: float,
    nodes: Sequence[int],
    node_sps: float | None,
) -> None:
    if not per_gpu_sps > 0:
        raise UsageError(f"per-GPU samples/s must be positive, got {per_gpu_sps}")
    if local_batch < 1 or ranks_per_node < 1:
        raise UsageError(
            f"local batch and ranks per node must be at least 1, got {local_batch} "
            f"and {ranks_per_node}"
        )
    if grad_bytes < 1:
        raise UsageError(f"gradient bytes must be positive, got {grad_bytes}")
    if not 0 <= overlap < 1:
        raise UsageError(f"overlap is the hidden share of communication, 0 to <1; got {overlap}")
    if not nodes or any(n < 1 for n in nodes):
        raise UsageError(f"node counts must be 1 or more, got {list(nodes)}")
    if node_sps is not None and not node_sps > 0:
        raise UsageError(f"the one-node samples/s must be positive, got {node_sps}")


def estimate_scaling(
    *,
    per_gpu_sps: float,
    local_batch: int,
    ranks_per_node: int,
    grad_bytes: int,
    interconnect: Interconnect | None = None,
    node_sps: float | None = None,
    bucket_cap_mb: float = DEFAULT_BUCKET_MB,
    buckets: int | None = None,
    overlap: float = 0.0,
    nodes: Sequence[int] = DEFAULT_NODES,
) -> ScalingEstimate:
    """Predict throughput and efficiency at each node count (the model: module docstring).

    Args:
        per_gpu_sps: one GPU's samples/s at `local_batch` (the 1-rank reference probe).
        local_batch: samples per rank per step, kept at every node count.
        ranks_per_node: ranks (GPUs) per node.
        grad_bytes: bytes all-reduced per step (`gradient_bytes(parameters)`).
        interconnect: network figures (`interconnect_from_hints`); None derives
            them from the measured node ("measured", optimistic across nodes).
        node_sps: all ranks' samples/s measured on one node, if there is one.
        bucket_cap_mb: DDP's bucket size (MiB).
        buckets: all-reduce calls per step (`ddp_bucket_count`); default
            ceil(grad_bytes / bucket_cap_mb).
        overlap: share of the modelled communication hidden behind backward.
        nodes: node counts to predict.

    Raises:
        UsageError: bad inputs, or no interconnect figures and nothing to derive them from.
    """
    _check_inputs(per_gpu_sps, local_batch, ranks_per_node, grad_bytes, overlap, nodes, node_sps)
    g = ranks_per_node
    buckets = _resolve_buckets(grad_bytes, bucket_cap_mb, buckets)
    node = _node_model(
        per_gpu_sps=per_gpu_sps,
        local_batch=local_batch,
        ranks_per_node=g,
        grad_bytes=grad_bytes,
        interconnect=interconnect,
        node_sps=node_sps,
        buckets=buckets,
        overlap=overlap,
    )
    compute = local_batch / per_gpu_sps
    rows = [
        _row(n, g, local_batch, compute, grad_bytes, node, buckets, overlap)
        for n in sorted(set(nodes))
    ]
    return ScalingEstimate(
        rows=tuple(rows),
        per_gpu_sps=per_gpu_sps,
        local_batch=local_batch,
        ranks_per_node=g,
        grad_bytes=grad_bytes,
        buckets=buckets,
        bucket_cap_mb=bucket_cap_mb,
        interconnect=node.interconnect,
        overlap=overlap,
        node_comm_s=node.comm_s,
        node_measured=node.measured,
        notes=node.notes,
    )


def _resolve_buckets(grad_bytes: int, bucket_cap_mb: float, buckets: int | None) -> int:
    """The all-reduce calls per step given, or as many as full buckets of the cap."""
    if buckets is None:
        return bucket_count(grad_bytes, bucket_cap_mb)
    if buckets < 1:
        raise UsageError(f"a step makes at least one all-reduce call, got {buckets}")
    return buckets


@dataclass(frozen=True)
class _NodeModel:
    """One node's exposed communication, the interconnect used, and what was assumed."""

    comm_s: float
    measured: bool
    interconnect: Interconnect
    notes: tuple[str, ...]


def _node_model(
    *,
    per_gpu_sps: float,
    local_batch: int,
    ranks_per_node: int,
    grad_bytes: int,
    interconnect: Interconnect | None,
    node_sps: float | None,
    buckets: int,
    overlap: float,
) -> _NodeModel:
    """node(g): measured when one node ran several ranks, else modelled; the network's figures."""
    g = ranks_per_node
    notes: list[str] = []
    measured_node = node_sps is not None and g > 1
    node_comm = 0.0
    if node_sps is not None and g > 1:
        node_comm = node_overhead_seconds(per_gpu_sps, node_sps, local_batch, g)
        if node_comm < 0:
            notes.append("the node measured faster than its GPUs alone (noise): overhead 0")
            node_comm = 0.0
    if interconnect is None:
        interconnect = measured_interconnect(
            node_comm if measured_node else None, grad_bytes, g, buckets
        )
        notes.append(
            f"network assumed as fast as the measured node's ring ({interconnect.gbs:.0f} GB/s "
            f"effective per GPU; no '{HINT_GBS}' hint): optimistic across nodes"
        )
    if not measured_node and g > 1:
        node_comm = (1 - overlap) * _ring_seconds(
            g, grad_bytes, interconnect.node_gbs or interconnect.gbs, interconnect, buckets
        )
        if interconnect.node_gbs is None:
            notes.append("no NVLink figure: the node's ring is taken as slow as the network")
    return _NodeModel(node_comm, measured_node, interconnect, tuple(notes))


def _row(
    n: int,
    g: int,
    local_batch: int,
    compute: float,
    grad_bytes: int,
    node: _NodeModel,
    buckets: int,
    overlap: float,
) -> ScalingRow:
    """The predicted point at `n` nodes of `g` ranks."""
    net = node.interconnect
    # Each GPU all-reduces its 1/g shard across the nodes over its own NIC.
    network = _ring_seconds(n, grad_bytes / g, net.gbs, net, buckets)
    comm = node.comm_s + (1 - overlap) * network
    step = compute + comm
    return ScalingRow(
        nodes=n,
        gpus=n * g,
        samples_per_s=n * g * local_batch / step,
        efficiency=compute / step,
        step_s=step,
        comm_s=comm,
    )


def _ring_seconds(members: int, size: float, gbs: float, net: Interconnect, buckets: int) -> float:
    """Ring all-reduce of `size` bytes over `members`, in `buckets` calls."""
    transfer = 2 * (members - 1) / members * size / (gbs * GB)
    return transfer + 2 * (members - 1) * net.latency_us * 1e-6 * buckets


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def scaling_lines(
    estimate: ScalingEstimate, measured: Mapping[int, float] | None = None
) -> list[str]:
    """A text table of the estimate, with measured samples/s (by node count) beside it.

    Args:
        estimate: from `estimate_scaling`.
        measured: samples/s actually measured at some node counts (e.g. {1: 2110.0}).
    """
    measured = dict(measured or {})
    net = estimate.interconnect
    where = "preset hints" if net.source == "hints" else "derived from the measured node"
    node = "measured" if estimate.node_measured else "modelled"
    lines = [
        "Scaling ESTIMATE (a model, not a measurement): weak scaling at local batch "
        f"{estimate.local_batch}, {estimate.ranks_per_node} ranks per node",
        f"  ring all-reduce of {estimate.grad_bytes / 1e6:,.0f} MB fp32 gradients in "
        f"{estimate.buckets} buckets of {estimate.bucket_cap_mb:g} MiB; network "
        f"{net.gbs:.1f} GB/s per GPU, {net.latency_us:g} us per step ({where}); "
        f"node overhead {node} ({1e3 * estimate.node_comm_s:.1f} ms/step)",
        *(f"  note: {note}" for note in estimate.notes),
        f"{'nodes':>5} {'GPUs':>5} {'est. samples/s':>15} {'est. eff.':>9} "
        f"{'comm/step':>10} {'measured samples/s':>19} {'meas. eff.':>10}",
    ]
    single = estimate.per_gpu_sps
    for row in estimate.rows:
        seen = measured.pop(row.nodes, None)
        meas_sps = "-" if seen is None else f"{seen:,.0f}"
        meas_eff = "-" if seen is None else _pct(seen / (row.gpus * single))
        lines.append(
            f"{row.nodes:>5} {row.gpus:>5} {row.samples_per_s:>15,.0f} "
            f"{_pct(row.efficiency):>9} {1e3 * row.comm_s:>7.1f} ms {meas_sps:>19} {meas_eff:>10}"
        )
    for count, seen in sorted(measured.items()):
        gpus = count * estimate.ranks_per_node
        lines.append(
            f"{count:>5} {gpus:>5} {'-':>15} {'-':>9} {'-':>10} {seen:>19,.0f} "
            f"{_pct(seen / (gpus * single)):>10}"
        )
    return lines
