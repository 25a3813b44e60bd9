"""The scaling estimate of a finished session: from its ddp figures to many nodes.

Pure glue between the `ddp` block of summary.json (tuneup.tuning.results.verdicts) and
the ring all-reduce model (tuneup.cluster.scaling): the 1-rank reference probe
gives one GPU's samples/s at the session's local batch, the recommended knobs
give the model's size and the bucket size, the preset's hints give the
interconnect (or, without them, the measured node does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneup.cluster.allreduce import (
    ddp_bucket_count,
    gradient_bytes,
    interconnect_from_hints,
)
from tuneup.cluster.scaling import estimate_scaling, scaling_lines
from tuneup.errors import UsageError
from tuneup.probe.stages import current
from tuneup.unet.flops import unet_gradient_tensors, unet_parameter_count


def _knob(values: Mapping[str, Any], name: str) -> Any:
    return current(values, name)


def scaling_summary(
    ddp: Mapping[str, Any] | None,
    values: Mapping[str, Any],
    hints: Mapping[str, Any] | None,
    *,
    nodes: int,
    ranks_per_node: int,
) -> dict[str, Any] | None:
    """The `scaling` block of summary.json; None when the session has no 1-rank reference.

    Args:
        ddp: summary.json's `ddp` block (None when the ddp stage did not run).
        values: the recommended knob values (model size, batch, bucket size).
        hints: the preset's hints (`interconnect_gbs`, `interconnect_latency_us`, ...).
        nodes: nodes the session's probes spanned.
        ranks_per_node: ranks per node of those probes.

    Returns:
        The estimate's rows (`ScalingEstimate.to_dict()`), the measured point, the
        text table under `lines`; or {"error": ...} when the model cannot be run.
    """

    if not ddp:
        return None
    figures = ddp.get("figures") or {}
    per_gpu = figures.get("reference_full_sps")
    measured = figures.get("full_sps")
    if not per_gpu or figures.get("reference_ranks") != 1 or not measured:
        return None
    ranks = nodes * ranks_per_node
    local = _knob(values, "local_batch_size") or max(
        1, int(_knob(values, "global_batch_size")) // ranks
    )
    levels = _knob(values, "levels") or (6 if _knob(values, "full_scale") else 5)
    width, levels = int(_knob(values, "width")), int(levels)
    tensors = [4 * n for n in unet_gradient_tensors(width, levels)]
    bucket_mb = float(_knob(values, "bucket_cap_mb"))
    try:
        estimate = estimate_scaling(
            per_gpu_sps=float(per_gpu),
            local_batch=int(local),
            ranks_per_node=ranks_per_node,
            grad_bytes=gradient_bytes(unet_parameter_count(width, levels)),
            interconnect=interconnect_from_hints(hints or {}),
            node_sps=float(measured) if nodes == 1 else None,
            bucket_cap_mb=bucket_mb,
            buckets=ddp_bucket_count(tensors, bucket_mb),
        )
    except UsageError as exc:
        return {"kind": "estimate", "error": str(exc)}
    seen = {nodes: float(measured)}
    return {
        **estimate.to_dict(),
        "measured": {str(k): v for k, v in seen.items()},
        "lines": scaling_lines(estimate, seen),
    }
