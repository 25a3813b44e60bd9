"""Recording GPU readings to a trace and playing them back."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuneup.errors import UsageError
from tuneup.hardware.backends import choose_backend
from tuneup.hardware.nvml import NvmlBackend
from tuneup.hardware.replay import (
    RecordingBackend,
    ReplayBackend,
    TraceRecorder,
    read_trace,
)
from tuneup.hardware.types import GpuDevice, GpuSample
from tuneup.telemetry.once import stream_json
from tuneup.testing import NOT_SUPPORTED, FakeGpu, FakeNvml, FakeProcess, counter


def ticking(start: float = 100.0, step: float = 0.5) -> Iterator[float]:
    value = start
    while True:
        yield value
        value += step


def record(path: Path, rounds: int = 4) -> tuple[list[GpuDevice], list[list[GpuSample]]]:
    """Record `rounds` samples of two scripted GPUs; return what the live backend gave."""
    nvml = FakeNvml(
        devices=[
            FakeGpu(
                util=[10, 55, 90, 97],
                throttle=[0, 0x4, 0x44, 0x1],
                energy_mj=counter(5e6, 3e5),
                processes=[FakeProcess(os.getpid(), 1536.0)],
                sm_active_pct=[20.0, 40.0],
                tensor_active_pct=[5.0, 15.0],
            ),
            FakeGpu(name="NVIDIA A100-SXM4-40GB", power_w=NOT_SUPPORTED, temperature_c=[50, 52]),
        ]
    )
    clock = ticking()
    live = RecordingBackend(NvmlBackend(nvml, clock=lambda: next(clock)), TraceRecorder(path))
    devices = live.devices()
    samples = [live.sample() for _ in range(rounds)]
    live.close()
    return devices, samples


def test_a_replay_gives_back_exactly_what_was_recorded(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    devices, recorded = record(trace)

    replay = ReplayBackend(trace)
    assert replay.available() == (True, "")
    assert replay.devices() == devices
    assert [replay.sample() for _ in recorded] == recorded
    # the recording really varied, so equality above is not trivial
    assert len({s[0].util_gpu_pct for s in recorded}) == 4
    assert recorded[0][0].processes[0].name  # this process's name from /proc


def test_each_line_is_on_disk_as_soon_as_it_is_sampled(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    live = RecordingBackend(
        NvmlBackend(FakeNvml(devices=[FakeGpu()]), clock=lambda: 7.0), TraceRecorder(trace)
    )
    live.sample()
    live.sample()

    lines = trace.read_text().splitlines()  # the recorder is still open
    assert len(lines) == 2
    line = json.loads(lines[0])
    assert set(line) == {"time", "devices", "samples"}
    assert line["time"] == 7.0 and line["devices"][0]["index"] == 0
    live.close()


def test_the_last_frame_repeats_at_the_end_and_loop_starts_over(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    _, recorded = record(trace, rounds=3)

    replay = ReplayBackend(trace)
    played = [replay.sample() for _ in range(5)]
    assert played[3] == played[4] == recorded[-1]

    looping = ReplayBackend(trace, loop=True)
    laps = [looping.sample()[0] for _ in range(6)]
    assert [s.util_gpu_pct for s in laps] == [10, 55, 90, 10, 55, 90]
    times = [s.time for s in laps]
    assert times == sorted(times) and len(set(times)) == 6  # time keeps moving on


def test_with_a_clock_the_replay_follows_elapsed_time_in_the_clocks_time(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    _, recorded = record(trace, rounds=4)  # frames 0.5 s apart
    now = [5000.0]

    replay = ReplayBackend(trace, clock=lambda: now[0])
    picked = []
    for at in (5000.0, 5000.6, 5001.2, 5009.0):
        now[0] = at
        picked.append(replay.sample()[0])

    assert [s.util_gpu_pct for s in picked] == [10, 55, 90, 97]
    assert picked[0].time == 5000.0 and picked[1].time == pytest.approx(5000.5)
    assert picked[2].throttle_reasons == recorded[2][0].throttle_reasons


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ("{not json", "Expecting"),
        ("[1, 2]", "not a JSON object"),
        ('{"time": 1.0, "devices": []}', '"samples" must be a list'),
        ('{"time": "noon", "devices": [], "samples": []}', '"time" must be a number'),
        ('{"time": 1.0, "devices": [], "samples": [{"time": 1.0}]}', "integer index"),
        (
            '{"time": 1.0, "devices": [], "samples": [{"index": 0, "time": 1.0, "bogus": 1,'
            ' "processes": [{"pid": 1, "colour": "red"}]}]}',
            "colour",
        ),
    ],
)
def test_a_malformed_trace_names_the_line(tmp_path: Path, bad_line: str, problem: str) -> None:
    trace = tmp_path / "trace.jsonl"
    record(trace, rounds=1)
    with trace.open("a") as handle:
        handle.write(bad_line + "\n")

    with pytest.raises(UsageError, match=r"trace\.jsonl:2: ") as error:
        ReplayBackend(trace)
    assert problem in str(error.value)


def test_missing_or_empty_traces_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the GPU trace"):
        choose_backend(replay=tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(UsageError, match="is empty"):
        read_trace(empty)
    with pytest.raises(UsageError, match="--record"):
        TraceRecorder(tmp_path / "no-such-dir" / "trace.jsonl")


def test_choose_backend_prefers_the_replay(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    devices, _ = record(trace, rounds=2)
    chosen = choose_backend(replay=trace, nvml_module=FakeNvml(devices=[FakeGpu()] * 3))
    assert chosen.name == "replay"
    assert chosen.devices() == devices


def test_a_monitor_json_stream_replays_gzipped_or_not(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    devices, recorded = record(trace)
    stream = io.StringIO()
    stream_json(ReplayBackend(trace), interval_s=0.0, out=stream, sleep=lambda _s: None)
    error = '{"time":99.0,"gpus":[],"error":"NVML: driver not loaded"}\n'  # a GPU gone a while
    lines = stream.getvalue().splitlines(keepends=True)
    text = lines[0] + error + "".join(lines[1:])
    plain = tmp_path / "monitor.jsonl"
    plain.write_text(text)
    packed = tmp_path / "monitor.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    for path in (plain, packed):
        replay = ReplayBackend(path)
        assert replay.devices() == devices
        assert [replay.sample() for _ in recorded] == recorded


def test_a_damaged_gzip_trace_is_one_line(tmp_path: Path) -> None:
    cut = tmp_path / "monitor.jsonl.gz"
    cut.write_bytes(gzip.compress(b'{"time": 1.0, "gpus": []}\n' * 50)[:30])
    with pytest.raises(UsageError, match=r"cannot read the GPU trace .*damaged gzip"):
        read_trace(cut)


def test_the_readmes_replay_example_names_a_trace_in_the_repo() -> None:
    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text()
    named = re.findall(r"tuneup tui [^\n]*--replay (\S+)", readme)
    assert named, "the README shows the app on a recorded trace"
    for path in named:
        frames = read_trace(root / path)
        assert frames[0].devices and frames[0].devices[0].name
        assert max(s.util_gpu_pct or 0 for f in frames for s in f.samples) > 50  # it worked


def test_the_app_refuses_a_file_that_is_not_a_trace_before_it_opens(tmp_path: Path, capsys) -> None:
    from tuneup.cli import main

    notes = tmp_path / "notes.txt"
    notes.write_text("not a trace\n")
    assert main(["tui", "--replay", str(notes)]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "notes.txt:1: not a GPU trace line" in said[0]
