"""The profile reads the device: each part is the GPU work it launched (issue 48).

The committed H200 session (bench/results/gpu-h200-2026-11-27d) is the evidence:
its recommendation's host spans said "data 31%" while the device spent 5% there.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tuneup.probe.device_time import device_time
from tuneup.probe.timeline import breakdown, complete
from tuneup.probe.trace_file import read_events, trace_breakdown
from tuneup.probe.types import Contention, ProbeResult, Status

ROOT = Path(__file__).resolve().parents[1]
SESSION_D = ROOT / "bench/results/gpu-h200-2026-11-27d/speed/00"  # kept bf16, batch 128
KEPT = ROOT / "bench/results/gpu-h200-2026-11-27/speed/00"  # kept the baseline
TRACE_0020 = SESSION_D / "probes/0020-batch_size.trace.json.gz"  # the recommendation's
TRACE_0011 = SESSION_D / "probes/0011-amp.trace.json.gz"


def tuneup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneup", *args], capture_output=True, text=True, timeout=120
    )


def shares(parts: dict[str, float]) -> dict[str, float]:
    total = sum(parts.values())
    return {name: value / total for name, value in parts.items()}


def test_profile_trace_json_says_where_the_device_spent_the_recommendations_step() -> None:
    done = tuneup("profile", "--trace", str(TRACE_0020), "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["basis"] == "device" and said["steps"] == 7
    share = shares(said["parts"])
    assert share["backward"] == pytest.approx(0.50, abs=0.02)
    assert share["forward"] == pytest.approx(0.42, abs=0.02)
    assert share["data"] == pytest.approx(0.05, abs=0.01)
    assert share["h2d"] == pytest.approx(0.015, abs=0.005)
    assert share["optimizer"] == pytest.approx(0.015, abs=0.005)
    assert sum(said["parts"].values()) == pytest.approx(65.9, abs=0.2)  # ms of device work
    assert said["gpu"]["busy_ms"] / said["step_ms"] == pytest.approx(0.95, abs=0.01)
    # the host's view stays beside it, labelled: there the data range held 31% of the step
    assert said["host_parts"]["data"] / said["step_ms"] == pytest.approx(0.31, abs=0.01)
    assert "data_wait" not in {f["rule"] for f in said["findings"]}
    assert "compute_bound" in {f["rule"] for f in said["findings"]}


def test_the_amp_probes_trace_reads_the_same_way() -> None:
    figures, span = trace_breakdown(read_events(TRACE_0011))
    share = shares(figures["parts_s"])
    assert span.steps == 13 and figures["basis"] == "device"
    assert share["backward"] == pytest.approx(0.48, abs=0.02)
    assert share["forward"] == pytest.approx(0.40, abs=0.02)
    assert share["data"] == pytest.approx(0.04, abs=0.01)


# HTA 0.5.0's figures for the same traces (TraceAnalysis.get_temporal_breakdown and
# get_idle_time_breakdown, run 2026-11-28), in microseconds over the whole trace. HTA
# floors each event's start and length to whole microseconds: its busy time may lose up
# to 1 us per event against the trace's own fractions, and its gaps gain as much.
HTA = {
    TRACE_0020: {"kernel_time": 483384, "idle": 25480, "host_wait": 17905},
    TRACE_0011: {"kernel_time": 482139, "idle": 18671, "host_wait": 6744},
}


@pytest.mark.parametrize("trace", list(HTA), ids=["0020", "0011"])
def test_busy_and_idle_agree_with_hta_on_the_same_trace(trace: Path) -> None:
    hta = HTA[trace]
    seen = device_time(complete(read_events(trace)))
    assert seen is not None
    span = seen.last_us - seen.first_us
    assert span == pytest.approx(hta["kernel_time"], abs=2)
    lost = seen.busy_us - (hta["kernel_time"] - hta["idle"])  # HTA's flooring
    assert 0 <= lost <= seen.work * 1.0
    assert seen.idle_host_us == pytest.approx(hta["host_wait"], rel=0.03)


def event(name: str, ts: float, dur: float, cat: str = "user_annotation", **extra: Any) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, "pid": 1, "tid": 1, **extra}


def launched(name: str, ts: float, dur: float, at: float, corr: int, tid: int = 1) -> list[dict]:
    """A kernel on the GPU and its launch on the host's thread `tid`, matched by correlation."""
    return [
        event(name, ts, dur, cat="kernel", pid=0, tid=7, args={"correlation": corr}),
        event("cudaLaunchKernel", at, 5, cat="cuda_runtime", tid=tid, args={"correlation": corr}),
    ]


def test_each_kernel_counts_in_the_range_that_launched_it_not_where_the_host_waited() -> None:
    """A 1000 us step: the host waits 600 us in `data` (a sync) while the GPU runs the
    forward it queued earlier; autograd's own thread launches the backward."""
    events = [
        event("forward", 0, 100),
        event("data", 100, 600),
        event("backward", 700, 250),
        event("optimizer", 950, 50),
        *launched("fprop_kernel", 20, 500, at=10, corr=1),
        *launched("crop_kernel", 530, 40, at=120, corr=2),
        # the host launches the backward from autograd's thread, inside the main `backward`
        *launched("dgrad_kernel", 720, 200, at=710, corr=3, tid=2),
        *launched("ncclDevKernel_AllReduce_Sum", 925, 20, at=720, corr=4, tid=2),
        *launched("adam_kernel", 960, 30, at=955, corr=5),
        event("stray_kernel", 995, 5, cat="kernel", pid=0, tid=7, args={"correlation": 99}),
    ]
    figures = breakdown(events, steps=1, step_s=0.001, device="cuda")
    assert figures["basis"] == "device"
    parts = {name: round(1e6 * s) for name, s in figures["parts_s"].items()}
    assert parts == {
        "data": 40,
        "forward": 500,
        "backward": 200,
        "optimizer": 30,
        "allreduce": 20,
        "other": 5,  # no launch found for it
    }
    host = {name: round(1e6 * s) for name, s in figures["host_parts_s"].items()}
    assert host["data"] == 600 and host["forward"] == 100  # the host's view, as before
    gpu = figures["gpu"]
    # a gap whose next kernel was launched after the GPU went idle waited on the host: the
    # lead (0-20), before the dgrad (570-720) and before the adam (945-960)
    assert 1e6 * gpu["idle_host_s"] == pytest.approx(20 + 150 + 15)
    assert gpu["idle_input_s"] == 0.0  # none of them ended with input work
    assert 1e6 * gpu["idle_gaps_s"] == pytest.approx(10 + 5 + 5)  # queued, under 30 us apart
    assert 1e6 * gpu["busy_s"] == pytest.approx(795)
    assert gpu["busy_s"] + gpu["idle_s"] == pytest.approx(0.001)


def test_a_users_own_ranges_keep_their_names_and_torchs_own_read_as_parts(
    tmp_path: Path,
) -> None:
    """Two ProfilerStep#N steps of a user's loop: its DataLoader, its `model_fwd`, its
    optimizer step as torch names them."""
    events: list[dict] = []
    for step, base in enumerate((0, 1000)):
        events += [
            event(f"ProfilerStep#{step + 3}", base, 1000),
            event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", base, 300),
            event("model_fwd", base + 300, 300),
            event("Optimizer.step#AdamW.step", base + 700, 200),
            *launched("fwd", base + 320, 250, at=base + 310, corr=10 * step + 1),
            *launched("bwd", base + 600, 250, at=base + 650, corr=10 * step + 2),
            *launched("adam", base + 900, 50, at=base + 710, corr=10 * step + 3),
        ]
    trace = tmp_path / "mine.json"  # a user's export_chrome_trace, not gzipped
    trace.write_text(json.dumps({"traceEvents": events}))
    done = tuneup("profile", "--trace", str(trace), "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["steps"] == 2 and said["step_ms"] == pytest.approx(1.0)
    assert said["parts"] == {
        "optimizer": pytest.approx(0.05),
        "model_fwd": pytest.approx(0.25),
        "other": pytest.approx(0.25),  # launched between the ranges: the user's backward
    }
    assert said["host_parts"]["data"] == pytest.approx(0.3)  # torch's DataLoader range
    text = tuneup("profile", "--trace", str(trace))
    assert text.returncode == 0 and "model_fwd" in text.stdout
    assert "basis: device" in text.stdout and "the host's view" in text.stdout


def cpu_events() -> list[dict]:
    return [
        event("data", 0, 400),
        event("h2d", 400, 20),
        event("optimizer", 420, 30),
        event("Optimizer.zero_grad#Adam.zero_grad", 425, 20),
        event("forward", 450, 250),
        event("aten::convolution", 460, 200, cat="cpu_op"),
        event("backward", 700, 250),
        event("aten::convolution_backward", 710, 220, cat="cpu_op", tid=2),
        event("optimizer", 950, 40),
    ]


def test_a_cpu_trace_breaks_down_as_before_on_the_hosts_spans(tmp_path: Path) -> None:
    figures = breakdown(cpu_events(), steps=1, step_s=0.001, device="cpu")
    assert figures["basis"] == "host" and "host_parts_s" not in figures
    assert figures["parts_s"] == pytest.approx(
        {
            "data": 400e-6,
            "h2d": 20e-6,
            "forward": 250e-6,
            "backward": 250e-6,
            "optimizer": 70e-6,  # zero_grad's own range inside it counts once
            "other": 10e-6,
        }
    )
    assert figures["covered"] == pytest.approx(0.99)
    assert figures["gpu"] is None and figures["conv_share"] == pytest.approx(1.0)
    assert [t["name"] for t in figures["top"]] == [
        "aten::convolution_backward",
        "aten::convolution",
    ]
    trace = tmp_path / "cpu.trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps({"traceEvents": cpu_events()}).encode()))
    done = tuneup("profile", "--trace", str(trace), "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["basis"] == "host" and said["gpu"] is None and said["steps"] == 1
    assert said["parts"]["data"] == pytest.approx(0.4) and said["parts"]["optimizer"] == 0.07


def test_a_trace_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not json")
    for args in (
        ("--trace", str(text)),
        ("--trace", str(tmp_path / "gone.json.gz")),
        (str(tmp_path), "--trace", str(TRACE_0020)),
        ("--json",),
    ):
        done = tuneup("profile", *args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, args
        assert "Traceback" not in done.stderr


def session_report(folder: Path) -> str:
    from tuneup.export.session import read_session_export, render_session

    return render_session(read_session_export(folder), "md")


def test_the_md_report_reads_the_recorded_traces_and_no_longer_calls_it_data_bound() -> None:
    report = session_report(SESSION_D)
    section = report.split("## Where a step's time goes")[1].split("## Traces")[0]
    assert "data wait" not in section and "waits on input" not in section
    assert "compute-bound: the GPU is busy 95% of the step" in section
    assert "basis: device" in section and "the host's view" in section
    forward = next(line for line in section.splitlines() if line.strip().startswith("forward"))
    assert forward.split()[-1] == "42%"  # the recommendation's device time
    assert "recommended: backward 32%, data 31%" in section  # the host's spans, labelled
    # the journal's own figures stay as they were computed (host spans, old findings)
    recorded = json.loads((SESSION_D / "summary.json").read_text())["profile"]
    assert recorded["findings"][0]["rule"] == "data_wait"


def test_a_keep_the_baseline_sessions_report_has_no_before_and_after() -> None:
    section = session_report(KEPT).split("## Where a step's time goes")[1].split("## ")[0]
    table = section.split("```")[1]
    assert "the baseline kept: one configuration, one profile" in table
    header = next(line for line in table.splitlines() if "step part" in line)
    assert header.split() == ["step", "part", "baseline,", "kept"]
    assert "recommended" not in table


def profiled(config: dict[str, Any], step_s: float, others: float, stage: str) -> ProbeResult:
    load = Contention(other_cpus=others, usable_cpus=16)
    profile = {"steps": 3, "step_s": step_s, "parts_s": {"data": step_s * 0.9}, "device": "cpu"}
    return ProbeResult(stage, {}, config, Status.OK, profile=profile, contention=load)


def test_one_configuration_profiled_twice_is_a_repeat_with_both_loads() -> None:
    from tuneup.tuning.results.profiles import profile_lines, profiles_block
    from tuneup.tuning.search.search_records import SearchOutcome

    config = {"global_batch_size": 64}
    loaded = profiled(config, 0.929, 12.0, "baseline")
    quiet = profiled(config, 0.096, 0.1, "baseline")
    outcome = SearchOutcome(
        baseline=loaded,
        best_values=config,
        best=quiet,
        probes=[loaded, quiet],
        stage_decisions=[],
        margin=0.02,
        confirmation=None,
        base_values=config,
    )
    block = profiles_block(outcome)
    assert block is not None and block["same_config"] is True
    lines = profile_lines(block)
    assert "one configuration profiled twice: a repeat, not a before and after" in lines[1]
    header = next(line for line in lines if "step part" in line)
    assert header.split() == ["step", "part", "profiled", "repeat"]
    load = next(line for line in lines if line.strip().startswith("load"))
    assert "others 12.0/16 CPUs" in load and "others 0.1/16 CPUs" in load
    assert max(len(line) for line in lines if not line.startswith(("finding", "left"))) <= 80


def test_the_app_shows_the_device_story_of_a_recorded_session(tmp_path: Path) -> None:
    pytest.importorskip("textual")
    import asyncio

    from textual.app import App
    from textual.widgets import Static

    from tuneup.tui.screens.probe import ProbeScreen
    from tuneup.tui.screens.results import ResultsScreen, load_results

    folder = tmp_path / "run"
    shutil.copytree(SESSION_D, folder)

    class Review(App[None]):
        def on_mount(self) -> None:
            summary, probes = load_results(folder)
            self.push_screen(ResultsScreen(summary, probes, folder))

    app = Review()

    async def go() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            found = ""
            for _ in range(60):  # the traces are read on a worker's thread
                await pilot.pause(0.05)
                found = str(app.screen.query_one("#results-findings", Static).content)
                if "compute-bound" in found:
                    break
            assert "compute-bound" in found and "data wait" not in found
            bars = app.screen.query_one("#results-breakdown", Static).content
            assert "basis: device" in str(getattr(bars, "caption", ""))
            # a probe's own breakdown, opened from its row, reads its trace too
            best = next(
                p for p in load_results(folder)[1] if p.profile.get("trace", "")[:4] == "0020"
            )
            app.push_screen(ProbeScreen(best, None, folder))
            for _ in range(60):
                await pilot.pause(0.05)
                found = str(app.screen.query_one("#probe-findings", Static).content)
                if "compute-bound" in found:
                    break
            assert "compute-bound" in found and "data wait" not in found

    asyncio.run(go())
