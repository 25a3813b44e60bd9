"""Probe ladders on the real U-Net worker: every probe is a child process.

Faults are injected per rung through the worker's test hook
(TUNEUP_WORKER_FAULT=kill:optimizer_impl=fused,...), so one probe dies in a
given way and the ladder must go on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import parse_preset
from tuneup.probe.types import Candidate, ProbeBudget, Status
from tuneup.trainers.adapters import load_trainer
from tuneup.trainers.backends import WorkerBackend
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.probe_session import ProbeSession
from tuneup.tuning.session.session_terms import SearchTerms

BUDGET = {
    "trial_s": 0.02,
    "min_trials": 3,
    "max_trials": 3,
    "warmup_cap_s": 0.3,
    "loss_steps": 8,
    "limit_s": 20,
}


def _preset(tmp_path: Path, stages: list[str]) -> dict:
    return {
        "name": "test-tiny",
        "description": "tiny U-Net for real-process probe tests",
        "synthetic_data": {"box": 32, "val_box": 16, "seed": 0},
        "train": {
            "device": "cpu",
            "levels": 3,
            "width": 4,
            "data_size": 8,
            "global_batch_size": 4,
            "base_batch_size": 4,
            "data_loader_config": "inmem",
            "num_data_workers": 0,
            "lr_schedule": {"scaling": "none", "start_lr": 2e-3, "end_lr": 0.0, "warmup_steps": 0},
        },
        "probe": {"stages": stages, "budget": BUDGET},
    }


@pytest.fixture
def child_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("TUNEUP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return dict(os.environ)


def test_failing_rungs_are_classified_and_the_ladder_goes_on(
    tmp_path: Path, child_env, monkeypatch
) -> None:
    from tuneup.unet.datacache import ensure_synthetic_data

    train, val, _ = ensure_synthetic_data(32, 16, 0, tmp_path / "cache", npy=False)
    monkeypatch.setenv(
        "TUNEUP_WORKER_FAULT",
        "kill:optimizer_impl=fused,oom:channels_last=True,hang:jit=script",
    )
    preset = parse_preset(_preset(tmp_path, []), "test")
    base = {**preset.train, "train_path": str(train), "val_path": str(val)}
    plans = [
        StagePlan("optimizer", [Candidate("fused", {"optimizer_impl": "fused"})]),
        StagePlan("channels_last", [Candidate("on", {"channels_last": True})]),
        StagePlan("jit", [Candidate("script", {"jit": "script"})]),
        StagePlan(
            "lr",
            [
                Candidate(
                    "huge",
                    {
                        "lr_schedule": {
                            "scaling": "none",
                            "start_lr": 1e4,
                            "end_lr": 0.0,
                            "warmup_steps": 0,
                        }
                    },
                )
            ],
        ),
        StagePlan("amp", [Candidate("bf16", {"amp_mode": "bf16"})]),
    ]
    budget = ProbeBudget(**{**BUDGET, "limit_s": 12})
    results = ResultsDir(tmp_path / "run")
    session = ProbeSession(
        preset=preset,
        adapter=load_trainer("unet"),
        backend=WorkerBackend(tmp_path / "probes", budget, 0),
        results=results,
        machine=MachineInfo(cpus_usable=2),
        base_values=base,
        plans=plans,
        terms=SearchTerms(confirm_pairs=1),
    )
    session.start(resume=False)
    outcome = session.run()
    by_stage = {r.stage: r for r in results.results() if r.stage not in ("confirm",)}
    assert by_stage["baseline"].status is Status.OK
    assert by_stage["optimizer"].status is Status.CRASH
    assert "SIGKILL" in by_stage["optimizer"].reason
    assert by_stage["channels_last"].status is Status.OOM
    assert by_stage["jit"].status is Status.TIMEOUT
    assert by_stage["lr"].status is Status.DIVERGED, by_stage["lr"].reason
    assert by_stage["amp"].status is Status.OK, "the ladder went on after the failures"
    for bad in ("optimizer_impl", "channels_last", "jit"):
        assert outcome.best_values.get(bad) == base.get(bad, outcome.best_values.get(bad))
    assert outcome.best_values["lr_schedule"]["start_lr"] == 2e-3, "a diverged probe won"


def test_sigint_leaves_a_valid_journal_and_resume_finishes(tmp_path: Path, child_env) -> None:
    preset_file = tmp_path / "tiny.yaml"
    preset_file.write_text(yaml.safe_dump(_preset(tmp_path, ["optimizer", "channels_last"])))
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "tuneup",
        "probe",
        "--preset",
        str(preset_file),
        "--out",
        str(out),
    ]
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env
    )
    journal = out / "journal.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if journal.exists() and len(journal.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert "--resume" in err
    before = [json.loads(line) for line in journal.read_text().splitlines()]
    assert len(before) >= 2
    resumed = subprocess.run(
        [sys.executable, "-m", "tuneup", "probe", "--resume", str(out), "--json"],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    after = [json.loads(line) for line in journal.read_text().splitlines()]
    assert after[: len(before)] == before
    document = json.loads(resumed.stdout)
    measured = [p for p in document["probes"] if p["status"] != "skipped"]
    # every probe of the finished ladder is journaled once: the ones from before the
    # interruption were served from the journal, not measured and appended again
    assert len(after) == len(measured), "a finished probe was measured again"
    assert [p["stage"] for p in measured] == [r["stage"] for r in after]
    assert document["summary"]["recommendation"]["values"]
