"""What ladders and cold compiles cost, kept on this machine for later estimates and probes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuneup.costs.compile_record import ColdCompileCosts
from tuneup.costs.estimate import Habits, ProbeCosts
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.clock.ladder_record import LadderCosts, LadderRecord, machine_tag
from tuneup.tuning.clock.time_left import LadderClock
from tuneup.tuning.search.search_records import StagePlan

VALUES = {"jit": "compile", "amp_mode": "bf16"}


def compiled(
    cache: str, first_steps: float, ok: bool = True, device: str = "NVIDIA H200"
) -> ProbeResult:
    return ProbeResult(
        "jit",
        {"jit": "compile"},
        VALUES,
        Status.OK if ok else Status.CRASH,
        one_time_s={"spawn": 2.0, "first_steps": first_steps},
        compile_cache=cache,
        device=device,
    )


def test_a_warm_compile_reports_the_cold_cost_this_machine_measured(tmp_path: Path) -> None:
    costs = ColdCompileCosts(tmp_path)
    cold = costs.apply(compiled("cold", 41.5), VALUES)
    warm = costs.apply(compiled("warm", 3.2), VALUES)

    assert cold.compile_cold_s is None  # its own first_steps is the cold cost
    assert warm.compile_cold_s == 41.5 and warm.one_time_s["first_steps"] == 3.2
    # Kept across sessions: a new record on the same folder knows it.
    again = ColdCompileCosts(tmp_path).apply(compiled("warm", 3.0), VALUES)
    assert again.compile_cold_s == 41.5
    # Another kind of GPU sharing the home folder compiled it for itself.
    other = ColdCompileCosts(tmp_path).apply(compiled("warm", 3.0, device="A100"), VALUES)
    assert other.compile_cold_s is None


def test_a_warm_compile_never_measured_cold_here_says_nothing(tmp_path: Path) -> None:
    warm = ColdCompileCosts(tmp_path).apply(compiled("warm", 3.2), VALUES)
    assert warm.compile_cold_s is None
    failed = ColdCompileCosts(tmp_path).apply(compiled("cold", 50.0, ok=False), VALUES)
    assert ColdCompileCosts(tmp_path).cold_s(VALUES, "NVIDIA H200") is None and not failed.ok


def test_a_damaged_cost_file_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / "cold-compile-costs.json").write_text("{not json")
    assert ColdCompileCosts(tmp_path).cold_s(VALUES, "cpu") is None
    ColdCompileCosts(tmp_path).remember(VALUES, "cpu", 12.0)
    assert ColdCompileCosts(tmp_path).cold_s(VALUES, "cpu") == 12.0


def test_the_ladder_record_keeps_each_trainer_and_presets_costs(tmp_path: Path) -> None:
    record = LadderRecord(tmp_path)
    costs = ProbeCosts(
        spawn_s=2.8,
        setup_s=0.6,
        first_s=1.5,
        step_s={"io": 0.01, "synthetic": 0.02, "full": 0.03},
        trials={"io": 4.0, "synthetic": 3.0, "full": 4.0},
        scale=1.1,
        measured=True,
        recorded=True,
    )
    kept = LadderCosts(costs, Habits(4.5, 0.4), "2026-11-26")
    record.remember("unet", "cpu-smoke", "1 x 2 CPUs", kept)

    assert LadderRecord(tmp_path).recall("unet", "cpu-smoke", "1 x 2 CPUs") == kept
    assert record.recall("unet", "h200", "1 x 2 CPUs") is None
    assert record.recall("sim", "cpu-smoke", "1 x 2 CPUs") is None
    assert record.recall("unet", "cpu-smoke", "4 x 2 CPUs") is None  # another layout
    (tmp_path / "ladder-costs.json").write_text('{"unet|cpu-smoke|1 x 2 CPUs": {"fresh_s": 1}}')
    assert record.recall("unet", "cpu-smoke", "1 x 2 CPUs") is None


def test_the_machine_a_ladder_ran_on_is_its_gpu_or_cpus_and_its_ranks() -> None:
    h200 = MachineInfo(cuda=True, gpu_count=1, gpu_names=("NVIDIA H200",), cpus_usable=16)
    assert machine_tag(h200) == "1 x NVIDIA H200"
    assert machine_tag(MachineInfo(cpus_usable=2, world_size=2)) == "2 x 2 CPUs"


KEY = "unet|generic-cuda|1 x 16 CPUs"
GOOD = {
    "spawn_s": 2.8,
    "setup_s": 0.6,
    "first_s": 1.5,
    "step_s": {"io": 0.01, "synthetic": 0.02, "full": 0.03},
    "trials": {"io": 4.0, "synthetic": 3.0, "full": 4.0},
    "pairs_per_stage": 2.0,
    "adopt_rate": 0.5,
    "when": "2026-11-26",
}


@pytest.mark.parametrize(
    ("figure", "value"),
    [
        ("spawn_s", -2517.0),  # what planned "estimated -2517 s"
        ("setup_s", 1e300),
        ("first_s", "3"),
        ("scale", 40.0),
        ("adopt_rate", 5),
        ("loader_round", 0),
        ("step_s", {"full": -0.03}),
        ("trials", {"io": 1e9}),
    ],
)
def test_a_damaged_figure_is_left_out_and_said_once(
    tmp_path: Path, figure: str, value: object
) -> None:
    (tmp_path / "ladder-costs.json").write_text(json.dumps({KEY: {**GOOD, figure: value}}))
    record = LadderRecord(tmp_path)

    assert record.recall("unet", "generic-cuda", "1 x 16 CPUs") is None
    assert record.recall("unet", "generic-cuda", "1 x 16 CPUs") is None  # asked again
    (line,) = record.damage
    assert f"the costs of {KEY} are damaged ({figure}" in line
    assert line.endswith("left out; the next ladder measures afresh")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_file_holding_a_number_json_has_not_is_left_out_and_said(
    tmp_path: Path, token: str
) -> None:
    text = json.dumps({KEY: GOOD}).replace("2.8", token)
    (tmp_path / "ladder-costs.json").write_text(text)
    record = LadderRecord(tmp_path)

    assert record.recall("unet", "generic-cuda", "1 x 16 CPUs") is None
    (line,) = record.damage
    assert line.startswith(f"{tmp_path / 'ladder-costs.json'} holds ")


def test_a_sound_record_and_an_older_layout_say_nothing(tmp_path: Path) -> None:
    (tmp_path / "ladder-costs.json").write_text(json.dumps({KEY: GOOD, "sim|x|y": {"old": 1}}))
    record = LadderRecord(tmp_path)
    assert record.recall("unet", "generic-cuda", "1 x 16 CPUs") is not None
    assert record.recall("sim", "x", "y") is None
    assert record.damage == []


def test_a_damaged_record_is_never_planned(tmp_path: Path) -> None:
    """The ladder's first estimate rests on the trainer's guess, never the damaged figure."""
    (tmp_path / "ladder-costs.json").write_text(json.dumps({KEY: {**GOOD, "spawn_s": -2517.0}}))
    record = LadderRecord(tmp_path)
    plans = [StagePlan("amp", [Candidate("bf16", {"amp_mode": "bf16"})], judged="synthetic")]
    clock = LadderClock(
        load_trainer("unet"), load_preset("generic-cuda"), plans, machine="1 x 16 CPUs",
        record=record,
    )  # fmt: skip

    assert clock.basis == "a guess from the trainer's step model"
    assert clock.costs().spawn_s > 0
    assert len(record.damage) == 1


def test_a_cold_compile_cost_out_of_range_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "cold-compile-costs.json").write_text(
        json.dumps({"a": -5.0, "b": 1e12, "c": True, "d": 41.5})
    )
    assert ColdCompileCosts(tmp_path)._read() == {"d": 41.5}
