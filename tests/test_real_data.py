"""The run's data, weighed (issue 47): a loader that holds the whole box is recommended only
where the real run's boxes fit beside the model's measured peak, and the report says what
the probes' smaller box may have moved."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tuneup.cluster.job import JobEnv
from tuneup.config import TUTORIAL_BOXES, Boxes
from tuneup.errors import UsageError
from tuneup.export.report import render_report
from tuneup.hardware.machine import host_memory_gib, machine_info
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset, parse_preset, preset_to_dict
from tuneup.probe.types import ProbeResult, Status
from tuneup.tuning.results.verdicts import stage_summary
from tuneup.tuning.search.search_records import SearchOutcome, StagePlan
from tuneup.tuning.session.assembly import SessionRequest, assemble_new
from tuneup.tuning.session.datafit import GPU_MARGIN_GIB, weigh
from tuneup.tuning.session.engine import Engine
from tuneup.tuning.session.realdata import RealData
from twin.model import GpuTwin, read_evidence

H200_EVIDENCE = Path(__file__).resolve().parents[1] / "bench" / "results" / "gpu-h200-2026-11-26"
A100_40 = 40.0  # what NVML reports for an A100 40 GB, in GiB (40,960 MiB)
H200 = 140.4  # an H200's 143,771 MiB
GPU_NODE = MachineInfo(cuda=True, gpu_count=1, gpu_names=("GPU",), cpus_usable=16)


def gpu_node(gpu_gib: float | None, host_gib: float | None = 256.0, **more: Any) -> MachineInfo:
    return dataclasses.replace(GPU_NODE, gpu_memory_gib=gpu_gib, host_memory_gib=host_gib, **more)


# --- the preset's key ---------------------------------------------------------------------


def test_gpu_presets_read_the_tutorials_boxes_and_the_smoke_preset_its_own():
    assert load_preset("perlmutter-a100").real_data == TUTORIAL_BOXES == Boxes(1024, 512)
    assert load_preset("h200").real_data == TUTORIAL_BOXES
    assert load_preset("cpu-smoke").real_data == Boxes(64, 32)
    # 4 + 5 float32 channels: 36 GiB + 4.5 GiB
    assert TUTORIAL_BOXES.bytes == 9 * 4 * (1024**3 + 512**3)
    assert round(TUTORIAL_BOXES.bytes / 2**30, 1) == 40.5


def test_a_preset_states_its_own_boxes_and_keeps_them_when_shown_again():
    data = preset_to_dict(load_preset("h200"))
    data["real_data"] = {"box": 512, "val_box": 0}
    preset = parse_preset(data, "mine")
    assert preset.real_data == Boxes(512, 0)
    assert parse_preset(preset_to_dict(preset), "again").real_data == Boxes(512, 0)
    # a preset that probes on no synthetic box (its files are the real ones) states none
    data.pop("synthetic_data"), data.pop("real_data")
    assert parse_preset(data, "files").real_data is None


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"box": 0, "val_box": 512}, "real_data.box: must be a positive whole number, got 0"),
        ({"val_box": 512}, "real_data.box: missing"),
        ({"box": 1024, "val": 512}, "real_data.val: unknown key"),
        (1024, "real_data: must be a mapping (box, val_box"),
    ],
)
def test_a_bad_real_data_is_one_line_naming_the_key(value: Any, said: str):
    data = preset_to_dict(load_preset("h200"))
    data["real_data"] = value
    with pytest.raises(UsageError) as raised:
        parse_preset(data, "mine")
    lines = str(raised.value).splitlines()
    assert len(lines) == 2 and said in lines[1]


# --- the machine's memory ---------------------------------------------------------------------


def test_the_machine_knows_its_smallest_gpus_memory_and_the_nodes(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       263808500 kB\nMemFree:        1000 kB\n")
    assert host_memory_gib(meminfo) == 251.6
    assert host_memory_gib(tmp_path / "absent") is None
    info = machine_info(
        gpus=lambda: [("NVIDIA A100-SXM4-40GB", 40.0), ("NVIDIA A100-SXM4-80GB", 80.0)],
        host_memory=lambda: 251.6,
        torch_cuda=lambda: True,
    )
    assert (info.gpu_memory_gib, info.host_memory_gib) == (40.0, 251.6)
    mig = machine_info(gpus=lambda: [("MIG GPU-1", None)], host_memory=lambda: None)
    assert mig.gpu_memory_gib is None and mig.host_memory_gib is None


# --- the arithmetic ---------------------------------------------------------------------------

GPU_AT_64 = {"data_loader_config": "gpu", "global_batch_size": 64, "device": "cuda"}


def test_the_gpu_loader_needs_the_boxes_the_peak_and_the_margin_on_each_gpu():
    weight = weigh(GPU_AT_64, TUTORIAL_BOXES, gpu_node(A100_40), peak_gib=7.9)
    assert weight is not None and weight.where == "device" and not weight.fits
    assert weight.need_gib == pytest.approx(40.5 + 7.9 + GPU_MARGIN_GIB, abs=0.05)
    assert weight.said() == (
        "not for the real data: its boxes (1024^3 + 512^3: 40.5 GiB), the model's peak at "
        "batch 64 (7.9 GiB) and a 4.5 GiB margin need 52.9 GiB of the GPU's 40.0 GiB"
    )
    fits = weigh(GPU_AT_64, TUTORIAL_BOXES, gpu_node(H200), peak_gib=7.9)
    assert fits is not None and fits.fits
    # ranks each hold their own copy on their own GPU: four ranks need no more per GPU
    four = weigh(GPU_AT_64, TUTORIAL_BOXES, gpu_node(H200, world_size=4), peak_gib=7.9)
    assert four is not None and four.need_gib == pytest.approx(fits.need_gib)
    # not measured yet: the boxes and the margin alone
    alone = weigh(GPU_AT_64, TUTORIAL_BOXES, gpu_node(A100_40), peak_gib=None)
    assert alone is not None and alone.need_gib == pytest.approx(45.0, abs=0.05)
    assert "peak" not in alone.text


def test_inmem_holds_a_copy_per_rank_in_the_nodes_memory_with_its_batches_in_flight():
    values = {"data_loader_config": "inmem", "num_data_workers": 8, "global_batch_size": 64}
    one = weigh(values, TUTORIAL_BOXES, gpu_node(A100_40, host_gib=64.0), peak_gib=None)
    assert one is not None and one.where == "host" and one.fits
    four = weigh(values, TUTORIAL_BOXES, gpu_node(A100_40, 64.0, world_size=4), peak_gib=None)
    assert four is not None and not four.fits and "once for each of 4 ranks" in four.text
    assert "of the node's 64.0 GiB" in four.text


def test_what_holds_no_box_or_has_no_known_memory_is_not_weighed():
    lowmem = {"data_loader_config": "lowmem"}
    assert weigh(lowmem, TUTORIAL_BOXES, gpu_node(A100_40), peak_gib=30.0) is None
    assert weigh(GPU_AT_64, TUTORIAL_BOXES, gpu_node(None), peak_gib=30.0) is None
    # the GPU-resident loader on the CPU holds its box in host memory
    on_cpu = weigh({**GPU_AT_64, "device": "cpu"}, TUTORIAL_BOXES, gpu_node(None, 16.0), None)
    assert on_cpu is not None and on_cpu.where == "host" and not on_cpu.fits


def test_a_candidate_is_weighed_after_it_ran_with_its_own_peak_less_its_probe_box():
    real = RealData(TUTORIAL_BOXES, "the tutorial's", Boxes(256, 128), gpu_node(60.0))
    config = {**GPU_AT_64, "global_batch_size": 128, "Nsamples_val": 0}
    ran = ProbeResult(
        "batch_size", {"global_batch_size": 128}, config, Status.OK, full_sps=1900.0,
        mem_peak_mb=11454.0,  # batch 128, bf16 + channels_last, on an H200 (2026-11-27d)
    )  # fmt: skip
    # its 256^3 box (0.56 GiB) is the probe's, not the model's
    assert real.model_peak_gib(ran) == pytest.approx(11454 / 1024 - 0.5625)
    assert real.after("batch_size", ran, config) is None  # 40.5 + 10.6 + 4.5 of 60
    heavy = dataclasses.replace(ran, mem_peak_mb=20770.0)  # batch 256's
    said = real.after("batch_size", heavy, config)
    assert said is not None and said.startswith("not for the real data: its boxes")
    assert "the model's peak at batch 128 (19.7 GiB)" in said
    assert real.after("baseline", heavy, config) is None  # the baseline is never marked
    io_only = dataclasses.replace(heavy, full_sps=None, io_sps=8000.0)
    assert real.after("data", io_only, config) is None  # no model ran: weighed before


# --- ladders on the H200 twin, with another GPU's memory ------------------------------------


def twin_ladder(
    tmp_path: Path, preset: str, gpu_gib: float, host_gib: float = 256.0
) -> tuple[SearchOutcome, dict[str, Any], list[ProbeResult], str]:
    """The preset's whole ladder on the twin of the H200 (its rates), on a GPU of `gpu_gib`
    and a node of `host_gib`: the outcome, summary.json, the journal and the md report."""
    twin = GpuTwin(read_evidence(H200_EVIDENCE), seed=0, gpu_memory_gb=gpu_gib)
    built = assemble_new(
        SessionRequest(preset=preset, trainer="sim"),
        gpu_node(gpu_gib, host_gib),
        out=tmp_path / "run",
        job=JobEnv(source="local", hostname="twin", cpus_usable=16, gpus_on_node=1),
        engine_factory=lambda *_args, **_kwargs: Engine(twin),
    )
    twin.budget = built.session.preset.budget
    try:
        built.session.start(resume=False)
        outcome = built.session.run()
    finally:
        built.close()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    return outcome, summary, built.results.results(), render_report(summary, "run")


def stage_line(outcome: SearchOutcome, stage: str) -> str:
    return next(line for line in stage_summary(outcome) if line.startswith(f"{stage}"))


def test_a_40_gb_gpu_with_the_tutorials_boxes_is_not_recommended_the_gpu_loader(tmp_path):
    outcome, summary, journal, report = twin_ladder(tmp_path, "perlmutter-a100", A100_40)
    assert outcome.best_values["data_loader_config"] != "gpu"
    assert not any(p.config.get("data_loader_config") == "gpu" for p in journal)  # not tried
    line = stage_line(outcome, "data")
    nxt = outcome.best_values["data_loader_config"]
    assert (
        "not tried: gpu: not for the real data: its boxes (1024^3 + 512^3: 40.5 GiB), the "
        "model's peak at batch 64"
    ) in line
    assert f"of the GPU's 40.0 GiB; the next best is {nxt}" in line
    real = summary["real_data"]
    assert real["boxes"] == {"box": 1024, "val_box": 512} and real["probed"]["box"] == 256
    assert real["not_for_it"] and real["not_for_it"][0].startswith("data: gpu: not for")
    assert "IO on a larger file and the first epoch's reads may move" in real["may_move"]
    assert "Real data: the run reads 1024^3 + 512^3 (40.5 GiB, the tutorial's)" in report
    assert "not recommended for them: gpu;" in report


def test_the_same_ladder_on_an_h200_may_recommend_the_gpu_loader(tmp_path: Path):
    outcome, summary, _journal, report = twin_ladder(tmp_path, "perlmutter-a100", H200)
    assert outcome.best_values["data_loader_config"] == "gpu"
    assert "not for the real data" not in "\n".join(stage_summary(outcome))
    assert summary["real_data"]["recommended_fits"] is True
    assert "the recommended gpu loader holds them" in report


def test_inmem_on_a_node_too_small_for_the_boxes_is_not_recommended_either(tmp_path: Path):
    outcome, summary, _journal, _report = twin_ladder(
        tmp_path, "perlmutter-a100", A100_40, host_gib=32.0
    )
    assert outcome.best_values["data_loader_config"] not in ("gpu", "inmem")
    line = stage_line(outcome, "data")
    assert "inmem: not for the real data: its boxes (1024^3 + 512^3: 40.5 GiB)" in line
    assert "of the node's 32.0 GiB" in line and "the next best is lowmem at batch 64" in line
    (refused,) = summary["real_data"]["not_for_it"]  # the stage had none left to try
    assert "gpu: not for the real data" in refused and "inmem: not for the real data" in refused
    assert "not recommended for them: inmem, gpu" in summary["real_data"]["line"]


def test_a_bigger_batch_whose_own_peak_leaves_no_room_is_measured_but_never_adopted(tmp_path):
    """The twin's peaks on an H200 set a GPU between what the data stage's incumbent needs
    beside the boxes (it fits) and what batch 128 needs (it does not)."""
    outcome, _summary, journal, _report = twin_ladder(tmp_path / "h200", "h200", H200)
    real = RealData(TUTORIAL_BOXES, "the tutorial's", Boxes(256, 128), gpu_node(H200))
    first = real.model_peak_gib(outcome.baseline)
    batch = next(p for p in journal if p.stage == "batch_size" and p.variant)
    bigger = real.model_peak_gib(batch)
    assert first is not None and bigger is not None and first < bigger
    room = TUTORIAL_BOXES.bytes / 2**30 + GPU_MARGIN_GIB + (first + bigger) / 2
    outcome, summary, journal, _report = twin_ladder(tmp_path / "between", "h200", room)
    assert outcome.best_values["data_loader_config"] == "gpu"
    assert outcome.best_values["global_batch_size"] == 64
    marked = [p for p in journal if p.stage == "batch_size" and p.variant]
    assert marked and all(p.status is Status.OOM for p in marked)
    assert marked[0].reason.startswith("not for the real data: its boxes")
    line = stage_line(outcome, "batch_size")
    assert "the next best is gpu at batch 64, kept" in line
    assert "not recommended for them: global_batch_size=128" in summary["real_data"]["line"]


# --- the user's files -------------------------------------------------------------------------


def data_plan(tmp_path: Path, data: Path | None) -> tuple[RealData | None, StagePlan]:
    """The h200 ladder's data stage as planned on a 40 GB GPU, with `--data` or without."""
    built = assemble_new(
        SessionRequest(preset="h200", trainer="sim", data_path=data),
        gpu_node(A100_40),
        out=tmp_path,
        job=JobEnv(source="local", hostname="here", cpus_usable=16, gpus_on_node=1),
    )
    built.close()
    return built.session.real_data, next(p for p in built.session.plans if p.name == "data")


def test_data_weighs_the_users_files_which_the_probes_read_too(tmp_path: Path, synthetic_data):
    real, plan = data_plan(tmp_path / "files", synthetic_data.train_path)
    assert real is not None
    assert (real.boxes, real.source, real.probed) == (Boxes(32, 16), "your files", None)
    assert real.note() == ""  # the probes read them: nothing moves
    assert "gpu" in [c.label for c in plan.candidates]  # 32^3 + 16^3 fit a 40 GB GPU
    real, plan = data_plan(tmp_path / "tutorial", None)
    assert real is not None and real.boxes == TUTORIAL_BOXES
    assert "gpu" not in [c.label for c in plan.candidates]  # 40.5 GiB and the margin do not
    assert any(why.startswith("gpu: not for the real data") for why in plan.not_tried)
