"""The `data` stage (which loader feeds the model) and loader verdicts in GB/s."""

from __future__ import annotations

import pytest
from tuneup_plugins.stages import DATA

from tuneup.config import LOADERS, loader
from tuneup.hardware.types import MachineInfo
from tuneup.tuning.results.datarate import data_rate_sentence, io_bytes_per_s
from tuneup.unet.loaders import loader_bytes_per_sample

LAPTOP = MachineInfo(cpus_usable=2)
GPU_NODE = MachineInfo(cuda=True, gpu_count=4, cpus_usable=32)
GPU_NODE_DALI = MachineInfo(cuda=True, gpu_count=4, cpus_usable=32, dali=True)


def kinds(candidates) -> list[str]:
    return [c.values["data_loader_config"] for c in candidates]


PROPOSED = [kind.name for kind in LOADERS if kind.proposed]


def test_cpu_machine_tries_lowmem_and_inmem_and_says_why_not_the_others():
    on_host = [name for name in PROPOSED if not loader(name).dali and not loader(name).on_gpu]
    assert kinds(DATA.candidates_for(LAPTOP, {})) == on_host
    assert on_host[:2] == ["lowmem", "inmem"]
    assert dict(DATA.skipped_candidates(LAPTOP, {})) == {
        "dali-lowmem": "needs NVIDIA DALI (pip install 'tuneup[dali]')",
        "gpu": "same as inmem without CUDA",
    }


def test_gpu_node_with_dali_tries_every_loader():
    assert kinds(DATA.candidates_for(GPU_NODE_DALI, {})) == PROPOSED
    assert PROPOSED[:4] == ["lowmem", "inmem", "dali-lowmem", "gpu"]
    assert DATA.skipped_candidates(GPU_NODE_DALI, {}) == []
    without_dali = [name for name in PROPOSED if not loader(name).dali]
    assert kinds(DATA.candidates_for(GPU_NODE, {})) == without_dali


def test_gpu_loader_is_skipped_when_the_incumbent_trains_on_the_cpu():
    base = {"device": "cpu"}
    assert "gpu" not in kinds(DATA.candidates_for(GPU_NODE_DALI, base))
    assert ("gpu", "same as inmem without CUDA") in DATA.skipped_candidates(GPU_NODE_DALI, base)


def test_lowmem_keeps_the_workers_the_incumbent_found_best():
    base = {"data_loader_config": "inmem", "num_data_workers": 8}
    lowmem = DATA.candidates_for(GPU_NODE, base)[0]
    assert lowmem.values == {"data_loader_config": "lowmem", "num_data_workers": 8}
    assert all("num_data_workers" not in c.values for c in DATA.candidates_for(GPU_NODE, base)[1:])


def test_plan_drops_the_incumbent_and_every_variant_is_a_valid_config():
    plan = DATA.propose(GPU_NODE_DALI, {"num_data_workers": 4})  # lowmem by default
    assert plan.rejected == ()
    assert kinds(plan.candidates) == [name for name in PROPOSED if name != "lowmem"]


def test_synthetic_incumbent_skips_the_stage():
    plan = DATA.propose(GPU_NODE_DALI, {"data_loader_config": "synthetic"})
    assert plan.skipped and "synthetic" in plan.reason


def test_bytes_per_second_counts_nine_float32_channels_per_sample():
    assert io_bytes_per_s(10.0, 64) == 10.0 * loader_bytes_per_sample(64)
    assert io_bytes_per_s(1.0, 2) == 9 * 8 * 4


def test_rate_sentence_names_both_rates_in_gb_per_s():
    # 64^3 crops are 9.4 MB a sample.
    sentence = data_rate_sentence(300.0, 700.0, 64)
    assert sentence == "data path delivers 2.83 GB/s, the model needs 6.61 GB/s"
    # below 1 GB/s the sentence switches to MB/s rather than print 0.00
    assert data_rate_sentence(10.0, 20.0, 64) == (
        "data path delivers 94.4 MB/s, the model needs 188.7 MB/s"
    )
    assert data_rate_sentence(None, 250.0, 64) is None
    assert data_rate_sentence(100.0, 0.0, 64) is None


@pytest.mark.parametrize("machine", [LAPTOP, GPU_NODE, GPU_NODE_DALI])
def test_every_candidate_sets_only_the_stage_knobs(machine):
    for cand in DATA.candidates_for(machine, {}):
        assert set(cand.values) <= set(DATA.knobs)
