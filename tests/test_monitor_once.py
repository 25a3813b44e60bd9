"""`tuneup monitor --once` and `--json`: what a script or a batch job reads."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuneup.commands.monitor import TrainMetricsTail, run_monitor_command
from tuneup.errors import UsageError
from tuneup.hardware.backends import NoneBackend
from tuneup.testing.scripted_backend import ScriptedBackend, busy_rounds, h200s

SLURM_ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,1"}


def two_gpus(rounds: int = 4, start: int = 0) -> tuple[ScriptedBackend, list]:
    devices = h200s(2)
    script = busy_rounds(devices, rounds)[start:]
    return ScriptedBackend(devices, script), script


def monitor(**kwargs: object) -> tuple[int, str]:
    out = io.StringIO()
    kwargs.setdefault("environ", {})
    code = run_monitor_command(out=out, sleep=lambda s: None, **kwargs)  # type: ignore[arg-type]
    return code, out.getvalue()


def test_once_prints_a_row_per_gpu_and_the_slurm_job() -> None:
    backend, script = two_gpus()
    code, text = monitor(once=True, backend=backend, environ=SLURM_ENV)
    assert code == 0
    assert "SLURM job 4242 · GPUs 0,1" in text
    rows = [line for line in text.splitlines() if "NVIDIA H200" in line]
    assert len(rows) == 2
    for row, sample in zip(rows, script[0], strict=True):
        cells = [c.strip() for c in row.strip("│ ").split("│")]
        assert cells[0] == str(sample.index)
        assert cells[2] == f"{sample.util_gpu_pct:.0f} %"
        assert cells[4] == f"{sample.power_w:.0f}/700 W"
    assert "4000" in text and "4001" in text  # the process table
    assert backend.calls == 1  # one reading, then exit


def test_once_names_the_throttle_reason() -> None:
    backend, _ = two_gpus(rounds=4, start=3)  # the script caps GPU 0's power from round 2 on
    _, text = monitor(once=True, backend=backend)
    gpu0 = next(line for line in text.splitlines() if line.startswith("│   0"))
    gpu1 = next(line for line in text.splitlines() if line.startswith("│   1"))
    assert "power_cap" in gpu0
    assert "power_cap" not in gpu1 and "none" in gpu1


@pytest.mark.parametrize(
    "backend",
    [
        ScriptedBackend.without_gpus("NVML: driver not loaded"),
        NoneBackend("no NVIDIA GPU visible (NVML: driver not loaded)"),
    ],
    ids=["reason", "worded"],
)
def test_once_without_a_gpu_says_why_and_succeeds(backend: object) -> None:
    code, text = monitor(once=True, backend=backend)
    assert code == 0
    assert text == "no NVIDIA GPU visible (NVML: driver not loaded)\n"


def test_once_on_this_machine_never_fails() -> None:
    code, text = monitor(once=True)  # the real backend choice: NVML or none
    assert code == 0
    assert text.startswith("no NVIDIA GPU visible (") or "GPU" in text


def test_json_once_is_one_object_with_every_gpu() -> None:
    backend, script = two_gpus()
    code, text = monitor(once=True, as_json=True, backend=backend)
    assert code == 0
    lines = text.splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["time"] == script[0][0].time
    assert [g["index"] for g in record["gpus"]] == [0, 1]
    for gpu, sample in zip(record["gpus"], script[0], strict=True):
        assert gpu["name"] == "NVIDIA H200"
        assert gpu["util_gpu_pct"] == sample.util_gpu_pct
        assert gpu["memory_used_mb"] == sample.memory_used_mb
        assert gpu["processes"][0]["pid"] == sample.processes[0].pid
    assert record["gpus"][1]["energy_mj"] is None  # GPU 1 has no energy counter: null, not 0


def test_json_prints_one_line_per_interval_until_the_trace_ends() -> None:
    backend, script = two_gpus(rounds=3)
    naps: list[float] = []
    out = io.StringIO()
    code = run_monitor_command(
        interval=0.5, as_json=True, backend=backend, environ={}, out=out, sleep=naps.append
    )
    assert code == 0
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["time"] for r in records] == [r[0].time for r in script]
    assert len(naps) == 3 and all(0.0 <= nap <= 0.5 for nap in naps)


def test_json_without_a_gpu_is_one_object_with_the_error() -> None:
    code, text = monitor(as_json=True, backend=ScriptedBackend.without_gpus("NVML: no driver"))
    assert code == 0
    (line,) = text.splitlines()
    record = json.loads(line)
    assert record["gpus"] == []
    assert record["error"] == "no NVIDIA GPU visible (NVML: no driver)"


def test_json_carries_the_newest_training_record(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        json.dumps({"kind": "train", "step": 10, "loss": 0.5, "samples_per_s": 80.0})
        + "\n"
        + json.dumps({"kind": "val", "step": 10, "loss": 0.6})
        + "\n"
    )
    backend, _ = two_gpus()
    _, text = monitor(once=True, as_json=True, backend=backend, attach=metrics)
    assert json.loads(text)["train"]["step"] == 10


def test_a_recorded_trace_replays_the_same_readings(tmp_path: Path) -> None:
    trace = tmp_path / "gpus.jsonl"
    backend, script = two_gpus(rounds=3)
    code, live = monitor(as_json=True, backend=backend, record=trace)
    assert code == 0 and backend.closed
    assert len(live.splitlines()) == len(script)
    code, replayed = monitor(as_json=True, replay=trace)
    assert code == 0
    assert replayed == live


def test_interval_below_a_tenth_of_a_second_is_refused() -> None:
    with pytest.raises(UsageError, match="--interval"):
        monitor(interval=0.05, once=True, backend=ScriptedBackend.without_gpus())


def test_recording_over_the_replayed_trace_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "gpus.jsonl"
    with pytest.raises(UsageError, match="--record"):
        monitor(once=True, replay=trace, record=trace)


def test_metrics_tail_reads_whole_lines_as_they_arrive(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = TrainMetricsTail(path)
    assert tail.read_new() == []  # the run has not started
    with path.open("w") as file:
        file.write('{"kind": "train", "step": 1}\n{"kind": "train", "st')
    assert [r["step"] for r in tail.read_new()] == [1]
    with path.open("a") as file:
        file.write('ep": 2}\nnot json\n')
    assert [r["step"] for r in tail.read_new()] == [2]
    path.write_text('{"kind": "train", "step": 1}\n')  # a new run starts the file again
    assert [r["step"] for r in tail.read_new()] == [1]


def test_once_and_json_do_not_import_textual() -> None:
    code = (
        "import io, sys\n"
        "from tuneup.commands.monitor import run_monitor_command\n"
        "from tuneup.testing.scripted_backend import busy_backend\n"
        "for as_json in (False, True):\n"
        "    run_monitor_command(once=True, as_json=as_json, backend=busy_backend(),"
        " environ={}, out=io.StringIO())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
