"""The weak-scaling estimate: the model's arithmetic, its inputs, and the published figures."""

from __future__ import annotations

from typing import Any

import pytest

from tuneup.cluster.allreduce import (
    HINT_GBS,
    HINT_LATENCY_US,
    HINT_NODE_GBS,
    Interconnect,
    bucket_count,
    ddp_bucket_count,
    effective_bandwidth_gbs,
    gradient_bytes,
    interconnect_from_hints,
)
from tuneup.cluster.scaling import ScalingEstimate, estimate_scaling, scaling_lines
from tuneup.errors import UsageError
from tuneup.unet.flops import unet_gradient_tensors, unet_parameter_count

# Facts from docs/unet-workload.md: the full-scale model, the tuned A100 rate at
# batch 64, Perlmutter's 4 GPUs per node.
UNET_PARAMETERS = 116_977_029
A100_SPS = 540.0
GPUS = 4
# Perlmutter's Slingshot-11: 4 NICs x 25 GB/s (200 Gb/s) per GPU node, one per
# A100, i.e. 25 GB/s per GPU (NERSC, "Perlmutter architecture"). Latency "a few
# us": 5 us, within NCCL's own 2.7-9.6 us per network ring step (tuning.cc).
PERLMUTTER = Interconnect(gbs=25.0, latency_us=5.0)
# How far from a published efficiency a model without fitted constants may land.
TOLERANCE_POINTS = 8.0


def unet_grads() -> tuple[int, int]:
    tensors = [4 * n for n in unet_gradient_tensors()]
    return sum(tensors), ddp_bucket_count(tensors)


def unet_estimate(**overrides: Any) -> ScalingEstimate:
    """The full U-Net on Perlmutter-like nodes, with `overrides` applied."""
    grad_bytes, buckets = unet_grads()
    args: dict[str, Any] = {
        "per_gpu_sps": A100_SPS,
        "local_batch": 64,
        "ranks_per_node": GPUS,
        "grad_bytes": grad_bytes,
        "interconnect": PERLMUTTER,
        "buckets": buckets,
    }
    return estimate_scaling(**{**args, **overrides})


def test_the_model_shape_gives_the_published_parameter_count() -> None:
    assert unet_parameter_count() == UNET_PARAMETERS
    assert gradient_bytes(UNET_PARAMETERS) == 4 * UNET_PARAMETERS  # fp32, AMP or not


def test_parameter_count_matches_the_torch_model_for_other_shapes() -> None:
    torch = pytest.importorskip("torch")
    from tuneup.unet.model import UNet, count_parameters

    for width, levels in ((4, 3), (8, 5)):
        with torch.device("meta"):
            model = UNet(width=width, levels=levels, init_scale=None)
        assert unet_parameter_count(width, levels) == count_parameters(model)


def test_ddp_packing_gives_the_tutorials_nccl_calls_per_step() -> None:
    tensors = [4 * n for n in unet_gradient_tensors()]
    # The tutorial counted 8 NCCL calls per step at bucket_cap_mb 25, 5 at 100.
    assert ddp_bucket_count(tensors, 25) == 8
    assert ddp_bucket_count(tensors, 100) == 5
    assert bucket_count(sum(tensors), 100) == 5  # ceil(468 MB / 100 MiB)
    assert bucket_count(sum(tensors), 25) > ddp_bucket_count(tensors, 25)


@pytest.mark.parametrize(("local_batch", "published"), [(64, 0.78), (128, 0.89)])
def test_perlmutter_weak_scaling_to_32_nodes_is_near_the_published_efficiency(
    local_batch: int, published: float
) -> None:
    at_32 = unet_estimate(local_batch=local_batch).row(32)
    assert at_32.gpus == 128
    assert abs(100 * (at_32.efficiency - published)) <= TOLERANCE_POINTS


def test_a_bigger_local_batch_scales_better() -> None:
    small = unet_estimate(local_batch=64).row(32)
    large = unet_estimate(local_batch=128).row(32)
    assert large.efficiency > small.efficiency
    # The published communication overhead falls too (25% -> 12%).
    assert large.comm_fraction < small.comm_fraction


def test_bandwidth_terms_add_up_to_the_flat_ring() -> None:
    grad_bytes = 400_000_000
    net = Interconnect(gbs=20.0, latency_us=0.0)
    estimate = estimate_scaling(
        per_gpu_sps=100.0, local_batch=10, ranks_per_node=4, grad_bytes=grad_bytes, interconnect=net
    )
    for row in estimate.rows:
        p = row.gpus
        assert row.comm_s == pytest.approx(2 * (p - 1) / p * grad_bytes / 20e9)
        assert row.step_s == pytest.approx(0.1 + row.comm_s)
        assert row.efficiency == pytest.approx(0.1 / row.step_s)
        assert row.samples_per_s == pytest.approx(p * 10 / row.step_s)


def test_efficiency_falls_and_throughput_grows_with_nodes() -> None:
    estimate = unet_estimate()
    assert [r.nodes for r in estimate.rows] == [1, 2, 4, 8, 16, 32, 64]
    effs = [r.efficiency for r in estimate.rows]
    sps = [r.samples_per_s for r in estimate.rows]
    assert effs == sorted(effs, reverse=True) and sps == sorted(sps)
    assert estimate.kind == "estimate" and estimate.to_dict()["kind"] == "estimate"


def test_knobs_that_cut_communication_raise_the_estimate() -> None:
    plain = unet_estimate(buckets=None).row(32)  # ceil(S / 25 MiB) = 18 calls
    bigger = unet_estimate(buckets=None, bucket_cap_mb=100).row(32)
    hidden = unet_estimate(overlap=0.5).row(32)
    nvlink = unet_estimate(interconnect=Interconnect(25.0, 5.0, node_gbs=100.0)).row(32)
    assert bigger.efficiency > plain.efficiency
    for better in (hidden, nvlink):
        assert better.efficiency > unet_estimate().row(32).efficiency


def test_a_measured_node_is_reproduced_and_the_network_added() -> None:
    estimate = unet_estimate(node_sps=2000.0)
    assert estimate.node_measured
    assert estimate.row(1).samples_per_s == pytest.approx(2000.0)
    assert estimate.row(2).comm_s > estimate.row(1).comm_s


def test_without_hints_the_network_is_derived_from_the_node_and_flagged() -> None:
    estimate = unet_estimate(interconnect=None, node_sps=2000.0)
    net = estimate.interconnect
    assert net.source == "measured"
    overhead = 64 * GPUS / 2000.0 - 64 / A100_SPS
    grad_bytes, buckets = unet_grads()
    assert net.gbs == pytest.approx(
        effective_bandwidth_gbs(overhead, grad_bytes, GPUS, buckets, net.latency_us)
    )
    assert any("optimistic" in note for note in estimate.notes)
    assert "derived from the measured node" in "\n".join(scaling_lines(estimate))


def test_effective_bandwidth_inverts_the_node_ring() -> None:
    grad_bytes, ranks, buckets, latency = 300_000_000, 4, 6, 3.0
    overhead = 2 * 3 / 4 * grad_bytes / 50e9 + 2 * 3 * latency * 1e-6 * buckets
    assert effective_bandwidth_gbs(overhead, grad_bytes, ranks, buckets, latency) == (
        pytest.approx(50.0)
    )
    assert effective_bandwidth_gbs(0.0, grad_bytes, ranks, buckets, latency) is None
    assert effective_bandwidth_gbs(overhead, grad_bytes, 1, buckets, latency) is None


def test_no_figures_at_all_is_one_clear_error() -> None:
    with pytest.raises(UsageError, match=HINT_GBS):
        unet_estimate(interconnect=None)
    with pytest.raises(UsageError, match="too little communication"):
        unet_estimate(interconnect=None, node_sps=GPUS * A100_SPS)
    with pytest.raises(UsageError, match="overlap"):
        unet_estimate(overlap=1.0)


def test_interconnect_hints_are_read_by_their_documented_names() -> None:
    net = interconnect_from_hints({HINT_GBS: 25, HINT_LATENCY_US: 2, HINT_NODE_GBS: 100})
    assert net == Interconnect(gbs=25.0, latency_us=2.0, node_gbs=100.0, source="hints")
    assert interconnect_from_hints({HINT_GBS: 12.5}).latency_us > 0  # type: ignore[union-attr]
    assert interconnect_from_hints({"gpus_per_node": 4}) is None
    assert interconnect_from_hints(None) is None
    with pytest.raises(UsageError, match=HINT_GBS):
        interconnect_from_hints({HINT_GBS: "fast"})


def test_the_table_says_estimate_and_puts_measured_points_beside_it() -> None:
    estimate = unet_estimate(node_sps=2000.0, nodes=(1, 2, 32))
    lines = scaling_lines(estimate, measured={1: 2000.0, 128: 200_000.0})
    assert "ESTIMATE" in lines[0] and "not a measurement" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines if line.split()[0].isdigit()}
    assert set(rows) == {"1", "2", "32", "128"}
    assert rows["1"][-2] == "2,000" and rows["1"][-1] == f"{100 * 2000 / (4 * A100_SPS):.0f}%"
    assert rows["2"][-2:] == ["-", "-"]  # predicted only
    assert f"{100 * estimate.row(32).efficiency:.0f}%" in rows["32"]
    assert rows["128"][2] == "-"  # measured only
