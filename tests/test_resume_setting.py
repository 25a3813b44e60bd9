"""A resume compares the machine: a session resumed under other thread settings, on other
CPUs or GPUs, another driver or torch, or with its preset edited says which, one line
each, and measures its baseline again there (or, with --accept-changes, goes on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tuneup.cli import main
from tuneup.hardware.machine import torch_build
from tuneup.hardware.types import MachineInfo
from tuneup.tuning.results.journal import JOURNAL, SESSION, SUMMARY
from tuneup.tuning.session.setting import Setting, differences, read_setting

LADDER = ["probe", "--trainer", "sim", "--stages", "amp"]


def _stopped_ladder(out: Path, capsys: pytest.CaptureFixture[str], keep: int = 6) -> None:
    """A sim ladder whose journal ends after `keep` probes and has no summary yet, as one
    stopped mid-ladder leaves it."""
    assert main([*LADDER, "--out", str(out)]) == 0
    capsys.readouterr()  # what the first run said
    lines = (out / JOURNAL).read_text().splitlines()
    (out / JOURNAL).write_text("\n".join(lines[:keep]) + "\n")
    (out / SUMMARY).unlink()


def _probe_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("[")]


def test_a_resume_under_omp_num_threads_1_names_it_and_measures_the_baseline_again(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    first = subprocess.run(
        [sys.executable, "-m", "tuneup", *LADDER, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert first.returncode == 0, first.stderr
    lines = (out / JOURNAL).read_text().splitlines()
    (out / JOURNAL).write_text("\n".join(lines[:6]) + "\n")
    (out / SUMMARY).unlink()

    again = subprocess.run(
        [sys.executable, "-m", "tuneup", "probe", "--resume", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "OMP_NUM_THREADS": "1"},
    )

    assert again.returncode == 0, again.stderr
    assert "tuneup: since this session ran: OMP_NUM_THREADS was unset, now 1" in again.stderr
    assert "the baseline is measured again in this setting" in again.stderr
    baselines = [line for line in _probe_lines(again.stderr) if "] baseline" in line]
    assert len(baselines) == 2 and not any("[from journal]" in b for b in baselines)
    reused = [line for line in _probe_lines(again.stderr) if line.endswith("[from journal]")]
    assert len(reused) == 4  # the stage's journaled probes are kept
    session = json.loads((out / SESSION).read_text())
    assert session["setting"]["omp_threads"] == "1"
    assert session["settings_before"][0]["omp_threads"] is None
    remeasured = [json.loads(x) for x in (out / JOURNAL).read_text().splitlines()[6:8]]
    assert all("OMP_NUM_THREADS was unset, now 1" in r["replaces"] for r in remeasured)


def test_the_next_resume_in_the_new_setting_replays_the_new_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    out = tmp_path / "run"
    _stopped_ladder(out, capsys)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert main(["probe", "--resume", str(out)]) == 0
    capsys.readouterr()
    journaled = len((out / JOURNAL).read_text().splitlines())
    (out / SUMMARY).unlink()

    assert main(["probe", "--resume", str(out)]) == 0

    err = capsys.readouterr().err
    assert "since this session ran" not in err
    probes = _probe_lines(err)
    assert probes and all(line.endswith("[from journal]") for line in probes)
    baselines = [line for line in probes if "] baseline" in line]
    assert len(baselines) == 2  # the two measured in this setting, in the old ones' place
    assert len((out / JOURNAL).read_text().splitlines()) == journaled  # nothing measured


def test_accept_changes_goes_on_with_the_journaled_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    out = tmp_path / "run"
    _stopped_ladder(out, capsys)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    assert main(["probe", "--resume", str(out), "--accept-changes"]) == 0

    err = capsys.readouterr().err
    assert "since this session ran: OMP_NUM_THREADS was unset, now 1" in err
    assert "going on with the journaled baseline (--accept-changes)" in err
    baselines = [line for line in _probe_lines(err) if "] baseline" in line]
    assert len(baselines) == 2 and all(b.endswith("[from journal]") for b in baselines)


def test_a_session_older_than_the_record_resumes_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    out = tmp_path / "run"
    _stopped_ladder(out, capsys)
    session = json.loads((out / SESSION).read_text())
    del session["setting"]
    (out / SESSION).write_text(json.dumps(session))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    assert main(["probe", "--resume", str(out)]) == 0

    err = capsys.readouterr().err
    assert "since this session ran" not in err
    baselines = [line for line in _probe_lines(err) if "] baseline" in line]
    assert all(b.endswith("[from journal]") for b in baselines)


def test_accept_changes_needs_a_resume(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--trainer", "sim", "--accept-changes"]) == 2
    assert "add --resume DIR" in capsys.readouterr().err


def test_every_difference_is_one_line_and_unknown_fields_are_not_compared() -> None:
    before = Setting(
        cpus_usable=8,
        gpus=("NVIDIA H100",),
        driver="550.54",
        torch="2.3.1",
        cuda="12.1",
        preset="aaa",
    )
    now = Setting(
        cpus_usable=1,
        omp_threads="1",
        gpus=("NVIDIA H200",),
        driver="560.1",
        torch="2.4.0",
        cuda="12.4",
        preset="bbb",
    )

    lines = differences(before.to_dict(), now)

    assert lines == [
        "usable CPUs were 8, now 1",
        "OMP_NUM_THREADS was unset, now 1",
        "GPUs were NVIDIA H100, now NVIDIA H200",
        "the NVIDIA driver was 550.54, now 560.1",
        "torch was 2.3.1, now 2.4.0",
        "torch's CUDA was 12.1, now 12.4",
        "the preset's document changed since (edited, or another tuneup's)",
    ]
    assert differences(before.to_dict(), before) == []
    assert differences({"cpus_usable": 8}, now) == ["usable CPUs were 8, now 1"]
    assert differences(None, now) == []  # an older session.json: nothing to compare


def test_the_setting_is_read_from_the_machine_the_environment_and_torchs_files(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "torch"
    folder.mkdir()
    (folder / "version.py").write_text("__version__ = '2.4.0'\ncuda: Optional[str] = '12.4'\n")

    spec = SimpleNamespace(submodule_search_locations=[str(folder)])
    assert torch_build(lambda name: spec, lambda name: "2.4.0+cu124") == ("2.4.0+cu124", "12.4")
    machine = MachineInfo(cuda=True, gpu_count=1, gpu_names=("NVIDIA H200",), cpus_usable=16)

    setting = read_setting(
        machine,
        {"name": "h200"},
        {"OMP_NUM_THREADS": "4"},
        driver=lambda m: "560.35",
        torch=lambda: ("2.4.0", "12.4"),
    )

    assert setting == Setting(
        16, "4", None, ("NVIDIA H200",), "560.35", "2.4.0", "12.4", setting.preset
    )
    assert setting.preset != read_setting(machine, {"name": "other"}, {}).preset
