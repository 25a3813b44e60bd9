"""A probe's profile: its steady steps under torch.profiler, where their time goes, the trace."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tuneup.probe.events import ResultEvent, parse_events
from tuneup.probe.plan import plan_probe
from tuneup.probe.timeline import breakdown
from tuneup.probe.types import ProbeBudget

BUDGET = ProbeBudget(trial_s=0.05, min_trials=2, max_trials=3, warmup_cap_s=0.5, loss_steps=0)
PARTS = ("data", "h2d", "forward", "backward", "optimizer")


def profiled_probe(tmp_path: Path, config: dict[str, Any], **plan: Any) -> tuple[dict, Path]:
    spec = tmp_path / "0001-baseline.json"
    measured = plan_probe(BUDGET, **plan)
    spec.write_text(json.dumps({"config": config, "plan": measured.to_dict()}))
    proc = subprocess.run(
        [sys.executable, "-m", "tuneup.worker", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    events = parse_events(proc.stdout.splitlines())
    result = next(e for e in events if isinstance(e, ResultEvent))
    return dict(result.profile), tmp_path / "0001-baseline.trace.json.gz"


def test_a_profiled_probe_splits_its_step_into_the_tutorials_parts(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    profile, trace = profiled_probe(tmp_path, tiny_values, profile=True)
    assert profile["device"] == "cpu" and 3 <= profile["steps"] <= 30
    parts = profile["parts_s"]
    assert set(PARTS) <= set(parts)
    # the named parts cover the measured step: what no range holds is small
    named = sum(parts[p] for p in PARTS)
    assert named == pytest.approx(profile["step_s"], rel=0.10)
    assert profile["covered"] >= 0.9
    assert profile["top"] and profile["top"][0]["share"] > 0
    assert "conv" in " ".join(t["name"] for t in profile["top"]).lower()
    assert profile["tflops"] > 0 and profile["mfu"] is None  # a CPU has no datasheet peak
    assert profile["overhead"] > -0.5
    # the trace opens as Chrome trace JSON, its ranges named as the tutorial reads them
    assert profile["trace"] == trace.name
    document = json.loads(gzip.decompress(trace.read_bytes()))
    names = {e.get("name") for e in document["traceEvents"] if e.get("cat") == "user_annotation"}
    assert set(PARTS) <= names


def test_a_probe_not_asked_for_a_profile_takes_none(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    profile, trace = profiled_probe(tmp_path, tiny_values)
    assert profile == {} and not trace.exists()


def event(name: str, ts: float, dur: float, cat: str = "user_annotation", **extra: Any) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, "tid": 1, **extra}


def test_the_breakdown_reads_gpu_idle_as_host_wait_and_kernel_gaps():
    """A step of 1000 us: a 400 us data wait, then kernels with short gaps between them."""
    events = [
        event("data", 0, 400),
        event("forward", 400, 300),
        event("backward", 700, 250),
        event("optimizer", 950, 50),
        event("aten::convolution", 400, 200, cat="cpu_op"),
        # the GPU: idle through the data wait, then three kernels 10 us apart
        event("sm80_xmma_fprop_implicit_gemm_bf16", 420, 180, cat="kernel"),
        event("elementwise_kernel", 610, 20, cat="kernel"),
        event("sm80_xmma_dgrad_bf16", 640, 300, cat="kernel"),
    ]
    figures = breakdown(events, steps=1, step_s=0.001, device="cuda")
    assert figures["parts_s"]["data"] == pytest.approx(0.0004)
    assert figures["covered"] == pytest.approx(1.0)
    gpu = figures["gpu"]
    assert gpu["busy_s"] == pytest.approx(0.0005)
    assert gpu["idle_gaps_s"] == pytest.approx(0.00002)  # two 10 us gaps between kernels
    assert gpu["tensor_core_s"] == pytest.approx(0.00048)
    assert gpu["kernels_per_step"] == 3
    assert figures["conv_share"] == pytest.approx(480 / 500)
    assert figures["top"][0]["name"] == "sm80_xmma_dgrad_bf16"


def test_nested_operators_count_their_own_time_once():
    events = [
        event("aten::linear", 0, 100, cat="cpu_op"),
        event("aten::addmm", 10, 80, cat="cpu_op"),
        event("aten::relu", 100, 50, cat="cpu_op"),
    ]
    figures = breakdown(events, steps=1, step_s=0.00015, device="cpu")
    own = {t["name"]: t["self_s"] for t in figures["top"]}
    assert own == pytest.approx({"aten::addmm": 80e-6, "aten::relu": 50e-6, "aten::linear": 20e-6})
    assert figures["gpu"] is None


@pytest.mark.slow
def test_a_real_ladder_profiles_its_baseline_and_prints_where_the_step_goes(tmp_path: Path):
    out = tmp_path / "ladder"
    argv = [sys.executable, "-m", "tuneup", "probe", "--preset", "cpu-smoke"]
    done = subprocess.run(
        [*argv, "--stages", "amp", "--out", str(out)],  # bf16 loses on a CPU in a few probes
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 4), done.stderr  # 4: the machine's noise left it open
    summary = json.loads((out / "summary.json").read_text())
    baseline = summary["profile"]["baseline"]
    assert set(PARTS) <= set(baseline["parts_s"]) and baseline["covered"] >= 0.9
    assert (out / "probes" / baseline["trace"]).is_file()
    assert summary["profile"]["recommendation"] is not None
    assert "where a step's time goes" in done.stdout
    after = done.stdout.split("where a step's time goes")[1].splitlines()
    table = [line for line in after[1:] if line.startswith("  ")]  # its indented rows
    assert any(line.strip().startswith("backward") for line in table)
    assert max(len(line) for line in table) <= 80
    # any journaled configuration is profiled again on demand, its trace beside the others
    again = subprocess.run(
        [*argv[:3], "profile", str(out), "--probe", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert "profiled again" in again.stdout and "backward" in again.stdout
    assert list((out / "probes").glob("*-profile.trace.json.gz"))


def test_profile_refuses_what_it_cannot_profile_in_one_line(tmp_path: Path):
    def profile(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tuneup", "profile", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    empty = profile(str(tmp_path), "--probe", "1")
    assert empty.returncode == 2 and "holds no journal" in empty.stderr
    from tuneup.probe.types import ProbeResult, Status

    line = ProbeResult("baseline", {}, {}, Status.OK).to_journal()
    (tmp_path / "journal.jsonl").write_text(json.dumps(line) + "\n")
    none = profile(str(tmp_path), "--probe", "3")
    assert none.returncode == 2 and "--probe 3" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1


def test_the_before_after_table_fits_80_columns_and_carries_the_findings():
    from tuneup.tuning.results.profiles import profile_lines

    part = {"data": 0.004, "h2d": 0.0001, "forward": 0.002, "backward": 0.003, "optimizer": 0.001}
    before = {"step_s": 0.0101, "parts_s": part, "trace": "0001-baseline.trace.json.gz"}
    after = {"step_s": 0.006, "parts_s": {**part, "data": 0.0}, "tflops": 1.5, "mfu": 0.2}
    block = {
        "baseline": before,
        "recommendation": after,
        "findings": [{"text": "data wait is 40% of the step (rule: above 5%)"}],
        "left": "backward 50%",
    }
    lines = profile_lines(block)
    assert max(len(line) for line in lines) <= 80
    data = next(line for line in lines if line.strip().startswith("data"))
    assert "4.00 ms" in data and "40%" in data and data.rstrip().endswith("-")
    assert any(line.startswith("finding: data wait is 40%") for line in lines)
    assert lines[-1] == "left: backward 50%"
    assert "1.5 (20% MFU)" in next(line for line in lines if "TFLOP/s" in line)
    assert profile_lines(None) == []


def test_the_md_report_carries_the_breakdowns_findings_and_traces():
    from tuneup.export.report import render_report

    part = {"data": 0.004, "forward": 0.002, "backward": 0.003, "optimizer": 0.001}
    summary = {
        "preset": "cpu-smoke",
        "recommendation": {"headline": "recommendation: batch x2: 1.39x faster"},
        "stages": [{"stage": "workers", "reason": "2 workers unresolved"}],
        "profile": {
            "baseline": {"step_s": 0.01, "parts_s": part, "trace": "0001-baseline.trace.json.gz"},
            "recommendation": {"step_s": 0.008, "parts_s": part},
            "adopted": [
                {"stage": "batch_size", "profile": {"trace": "0040-batch_size.trace.json.gz"}}
            ],
            "findings": [{"text": "data wait is 40% of the step (rule: above 5%)"}],
            "left": "backward 38%",
        },
    }
    report = render_report(summary, "run-1")
    assert report.startswith("# tuneup: cpu-smoke (run-1)")
    assert "1.39x faster" in report and "- **workers**: 2 workers unresolved" in report
    assert "- data wait is 40% of the step (rule: above 5%)" in report
    assert "`probes/0001-baseline.trace.json.gz`" in report
    assert "`probes/0040-batch_size.trace.json.gz`" in report
    assert "backward 38%" in report and "finding:" not in report
    bare = render_report({"preset": "sim"}, "run-2")
    assert "No probe of this session was profiled" in bare


@pytest.mark.gpu
def test_a_profile_on_cuda_reads_the_gpus_busy_and_idle_time(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    profile, trace = profiled_probe(tmp_path, {**tiny_values, "device": "cuda"}, profile=True)
    assert profile["device"] == "cuda" and trace.is_file()
    gpu = profile["gpu"]
    assert gpu["busy_s"] > 0 and gpu["kernels_per_step"] > 0
    assert gpu["busy_s"] + gpu["idle_gaps_s"] + gpu["idle_host_s"] <= profile["step_s"] * 1.5
    assert profile["mfu"] is None or 0 < profile["mfu"] < 1
    # the step's parts are marked on CUDA too (NVTX and the profiler's ranges)
    document = json.loads(gzip.decompress(trace.read_bytes()))
    names = {e.get("name") for e in document["traceEvents"]}
    assert {"forward", "backward", "optimizer"} <= names


@pytest.mark.gpu
def test_a_launch_bound_tiny_model_on_cuda_names_cuda_graphs_or_compile(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    from tuneup.probe.profile_rules import StageOutcome, findings

    profile, _trace = profiled_probe(tmp_path, {**tiny_values, "device": "cuda"}, profile=True)
    said = StageOutcome(tried=False, summary="not in this ladder")
    fired = findings(profile, {"cuda_graphs": said, "jit": said}, tiny_values)
    launch = [f for f in fired if f.rule == "launch_bound"]
    assert launch and launch[0].stage in ("cuda_graphs", "jit")


def journaled_session(folder: Path, config: dict[str, Any]) -> Path:
    """A results folder whose journal holds one probe of `config`, as a ladder leaves it."""
    from tuneup.probe.types import ProbeResult, Status

    folder.mkdir(parents=True)
    (folder / "session.json").write_text(json.dumps({"budget": BUDGET.to_dict(), "seed": 0}))
    line = ProbeResult("baseline", {}, dict(config), Status.OK).to_journal()
    (folder / "journal.jsonl").write_text(json.dumps(line) + "\n")
    return folder


def profile_command(
    folder: Path, *extra: str, probe: int = 1, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneup", "profile", str(folder), "--probe", str(probe), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
    )


def test_profile_runs_a_journaled_configuration_again_and_prints_its_breakdown(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    from tuneup.tuning.session.profile_again import profile_again

    folder = journaled_session(tmp_path / "run", tiny_values)
    done = profile_command(folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("probe 1 (baseline: ")
    assert "backward" in done.stdout and "trace: probes/0001-profile.trace.json.gz" in done.stdout
    # the table's columns are named: the ladder did not profile it, now it is
    header = next(line for line in done.stdout.splitlines() if "step part" in line)
    assert header.split() == ["step", "part", "not", "profiled", "then", "now"]
    traces = list((folder / "probes").glob("*-profile.trace.json.gz"))
    assert len(traces) == 1 and json.loads(gzip.decompress(traces[0].read_bytes()))
    # the app's key runs the same: its then (none: not profiled in the ladder) and now; the
    # probe's new trace takes the place of its last one
    again = profile_again(folder, 1)
    assert again.then is None and set(PARTS) <= set(again.now["parts_s"])
    assert again.now["trace"] == "0001-profile.trace.json.gz"
    assert [t.name for t in (folder / "probes").glob("*.trace.json.gz")] == [again.now["trace"]]
    import shutil

    if shutil.which("nsys") is None:  # --nsys without Nsight Systems: one line, nothing run
        refused = profile_command(folder, "--nsys")
        assert refused.returncode == 2 and "nsys is not on the PATH" in refused.stderr
        assert len(list((folder / "probes").glob("*.json"))) == 1  # no run more


@pytest.mark.gpu
def test_nsys_writes_the_probes_report_the_tutorials_way(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    import shutil

    if shutil.which("nsys") is None:
        pytest.skip("nsys is not on the PATH")
    folder = journaled_session(tmp_path / "run", {**tiny_values, "device": "cuda"})
    done = profile_command(folder, "--nsys")
    assert done.returncode == 0, done.stderr
    report = folder / "probes" / "0001-profile.nsys-rep"
    assert report.is_file() and report.stat().st_size > 0
    assert f"nsys report: {report}" in done.stderr


def _namespace_works() -> bool:
    """A user namespace that may mount (`unshare -rm`): a tmpfs to fill for real."""
    import shutil

    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    tried = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k none /mnt"],
        capture_output=True,
        timeout=30,
    )
    return tried.returncode == 0


needs_namespace = pytest.mark.skipif(
    not _namespace_works(), reason="needs `unshare -rm` (a user namespace) to mount"
)


def in_full_tmpdir(tmpdir: Path, argv: list[str]) -> list[str]:
    """`argv` in a user namespace whose TMPDIR is a 64 KiB tmpfs: no profiler trace fits."""
    tmpdir.mkdir(exist_ok=True)
    mount = f"mount -t tmpfs -o size=64k none '{tmpdir}' && exec \"$@\""
    return ["unshare", "-rm", "sh", "-c", mount, "sh", *argv]


@needs_namespace
def test_a_full_tmpdir_costs_the_probe_nothing_and_says_so_naming_tmpdir(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    import dataclasses

    from tuneup.cluster.launch import LocalLauncher
    from tuneup.probe.plan import ProbeSpec
    from tuneup.probe.runner import ProbeRunner

    tmpdir = tmp_path / "tmp"

    @dataclasses.dataclass(frozen=True)
    class FullTmpdir(LocalLauncher):
        def command(self, spec_path: Path) -> list[str]:
            return in_full_tmpdir(tmpdir, super().command(spec_path))

        def env(self, base: dict[str, str]) -> dict[str, str]:
            return {**super().env(base), "TMPDIR": str(tmpdir), "OMP_NUM_THREADS": "1"}

    # the ladder's baseline, profiled after its trials: the probe stays ok, its figures stand
    runner = ProbeRunner(FullTmpdir(), tmp_path / "probes")
    spec = ProbeSpec(config=tiny_values, plan=plan_probe(BUDGET, profile=True))
    result = runner.run("baseline", {}, spec)
    assert result.ok, result.reason
    assert result.full_sps and len(result.full_sps_trials) >= 2
    missing = result.profile["missing"]
    assert missing.startswith(
        f"no breakdown: the profiler's trace could not be written to TMPDIR={tmpdir} (no space left"
    )
    assert result.profile["step_s"] > 0 and "trace" not in result.profile
    # `tuneup profile` says it once, in one line, and the session's journal is as it was
    folder = journaled_session(tmp_path / "run", tiny_values)
    journal = (folder / "journal.jsonl").read_bytes()
    argv = [sys.executable, "-m", "tuneup", "profile", str(folder), "--probe", "1"]
    done = subprocess.run(
        in_full_tmpdir(tmpdir, argv),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmpdir), "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert f"TMPDIR={tmpdir} (no space left on the device" in done.stderr
    assert "point TMPDIR at a folder with room" in done.stderr
    assert (folder / "journal.jsonl").read_bytes() == journal


class CutShort:
    """A profiler on a full disk: part of its JSON written, and no error said."""

    written = '{"traceEvents": [{"ph": "X", "name": "forw'

    def export_chrome_trace(self, path: str) -> None:
        Path(path).write_text(self.written)


class Refused:
    """A profiler whose export the disk refuses out loud."""

    def export_chrome_trace(self, path: str) -> None:
        import errno

        raise OSError(errno.ENOSPC, "No space left on device", path)


def test_a_trace_that_cannot_be_written_or_read_says_why_naming_the_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from tuneup.worker.profile import TraceLost, _trace_events, write_trace

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    with pytest.raises(TraceLost) as cut:
        _trace_events(CutShort())
    said = f"the profiler's trace could not be written to TMPDIR={tmp_path} ("
    assert str(cut.value).startswith(
        said
    ) and f"it stopped at {len(CutShort.written)} bytes" in str(cut.value)
    with pytest.raises(TraceLost) as refused:
        _trace_events(Refused())
    assert f"TMPDIR={tmp_path} (no space left on the device): point TMPDIR" in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # no export left behind
    # the trace's copy beside the probe: a folder that cannot take it is named
    with pytest.raises(TraceLost) as kept:
        write_trace([], tmp_path / "gone" / "0001-baseline.trace.json.gz")
    assert str(kept.value).startswith(f"the trace could not be written to {tmp_path / 'gone'} (")
    monkeypatch.delenv("TMPDIR")
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(TraceLost) as unset:
        _trace_events(Refused())
    assert "(TMPDIR is not set)" in str(unset.value)


def sim_session(folder: Path) -> Path:
    """A finished ladder of the `sim` trainer, as `tuneup probe --trainer sim` leaves it."""
    ladder = ["--trainer", "sim", "--preset", "cpu-smoke", "--stages", "amp"]
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", "probe", *ladder, "--out", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 4), done.stderr
    return folder


def test_a_sim_session_has_nothing_to_profile_in_one_line(tmp_path: Path) -> None:
    folder = sim_session(tmp_path / "sim")
    done = profile_command(folder, probe=2)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "tuneup: error: probe 2: there is nothing to profile: the probes of a sim session are "
        "simulated, no training step ran (a session of the unet trainer has profiles)"
    ]
    assert not (folder / "probes").exists() or not list((folder / "probes").glob("*-profile*"))


def test_a_command_session_says_it_cannot_profile_and_how_the_user_can(tmp_path: Path) -> None:
    from tuneup.probe.types import ProbeResult, Status
    from tuneup.tuning.session.profile_again import NothingToProfile, profile_again

    folder = tmp_path / "run"
    folder.mkdir()
    section = {
        "run": "/opt/conda/bin/python train.py",
        "cwd": "/home/me/sc22",
        "flags": {"num_data_workers": "--num_data_workers {value}"},
    }
    session = {"trainer": "command", "command": section, "budget": BUDGET.to_dict()}
    (folder / "session.json").write_text(json.dumps(session))
    line = ProbeResult("workers", {}, {"num_data_workers": 8}, Status.OK).to_journal()
    (folder / "journal.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(NothingToProfile) as said:
        profile_again(folder, 1)
    text = str(said.value)
    assert "\n" not in text and text.startswith("probe 1: tuneup cannot profile your own command")
    report = folder / "probes" / "0001-profile"
    assert (
        f"`cd /home/me/sc22 && nsys profile -o {report} /opt/conda/bin/python train.py "
        "--num_data_workers 8`" in text
    )
    assert "tuneup profile --trace FILE" in text
    assert not (folder / "probes").exists()  # nothing ran


def test_profile_makes_tuneups_box_again_as_a_ladder_does_and_names_the_trace_for_the_probe(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    import shutil

    from tuneup.bundled import cache_dir
    from tuneup.probe.types import ProbeResult, Status
    from tuneup.unet.datacache import ensure_synthetic_data

    train, val, _made = ensure_synthetic_data(32, 16, 0, cache_dir(), npy=False)
    values = {**tiny_values, "train_path": str(train), "val_path": str(val)}
    preset = {
        "name": "tiny",
        "synthetic_data": {"box": 32, "val_box": 16, "seed": 0},
        "train": {k: v for k, v in values.items() if not k.endswith("_path")},
    }
    folder = tmp_path / "run"
    folder.mkdir()
    session = {"trainer": "unet", "preset": "tiny", "preset_document": preset}
    session |= {"stages": ["workers"], "budget": BUDGET.to_dict()}
    (folder / "session.json").write_text(json.dumps(session))
    lines = [ProbeResult(s, {}, values, Status.OK).to_journal() for s in ("baseline", "workers")]
    (folder / "journal.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    shutil.rmtree(train.parent)  # the cache was cleaned since the ladder
    done = profile_command(folder, probe=2)
    assert done.returncode == 0, done.stderr
    assert f"tuneup: the synthetic box in {train.parent} was gone" in done.stderr
    assert train.is_file() and val.is_file()
    # its trace carries the probe's number, as the ladder's own traces do
    assert "trace: probes/0002-profile.trace.json.gz" in done.stdout
    assert (folder / "probes" / "0002-profile.trace.json.gz").is_file()


def test_a_stop_signal_during_a_profile_says_what_was_stopped_and_what_is_kept(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    import signal
    import time

    folder = journaled_session(tmp_path / "run", tiny_values)
    journal = (folder / "journal.jsonl").read_bytes()
    argv = [sys.executable, "-m", "tuneup", "profile", str(folder), "--probe", "1"]
    env = {**os.environ, "TUNEUP_WORKER_FAULT": "hang"}  # the worker never finishes
    child = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not list((folder / "probes").glob("*.stderr.log")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the worker under way
    child.send_signal(signal.SIGTERM)
    _out, err = child.communicate(timeout=60)
    assert child.returncode == 143
    assert err.splitlines() == [
        "tuneup: SIGTERM: stopped profiling probe 1, no profile taken; the session's journal, "
        "summary and traces are as they were"
    ]
    assert (folder / "journal.jsonl").read_bytes() == journal
    spec = str(next((folder / "probes").glob("*-profile.json")))
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if spec in _read(p)]


def _read(cmdline: Path) -> str:
    try:
        return cmdline.read_bytes().decode(errors="replace")
    except OSError:  # gone meanwhile
        return ""


def test_nsys_wraps_the_profiled_probes_own_process(
    tiny_values: dict[str, Any], tmp_path: Path
) -> None:
    """Through the session's trainer, `--nsys` still starts the probe's process under nsys
    (here a stand-in that notes its arguments and runs the rest), its report named for the
    probe."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    said = tmp_path / "nsys-argv"
    nsys = bin_dir / "nsys"
    nsys.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > '{said}'\n"
        'while [ "$1" != "-o" ]; do shift; done\n'
        'touch "$2.nsys-rep"; shift 2\n'
        'exec "$@"\n'
    )
    nsys.chmod(0o755)
    folder = journaled_session(tmp_path / "run", tiny_values)
    done = profile_command(folder, "--nsys", PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    report = folder / "probes" / "0001-profile"
    argv = said.read_text().splitlines()
    assert argv[0] == "profile" and argv[argv.index("-o") + 1] == str(report)
    assert argv[-3:-1] == ["-m", "tuneup.worker"] and argv[-1].endswith("-profile.json")
    assert f"nsys report: {report}.nsys-rep" in done.stderr
    assert "backward" in done.stdout
