"""What ladders and cold compiles cost, kept on this machine for later estimates and probes."""

from __future__ import annotations

from pathlib import Path

from tuneup.hardware.types import MachineInfo
from tuneup.probe.compile_costs import ColdCompileCosts
from tuneup.probe.estimate import Habits, ProbeCosts
from tuneup.probe.types import ProbeResult, Status
from tuneup.tuning.clock.ladder_record import LadderCosts, LadderRecord, machine_tag

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
