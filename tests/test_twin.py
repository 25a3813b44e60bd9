"""The GPU twin: an evidence folder read back, and the default h200 ladder predicted from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tuneup_plugins.twin import read_evidence

from tuneup.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "bench" / "results" / "gpu-h200-2026-11-26"


def twin(*args: str) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gpu_twin.py"),
            "--evidence",
            str(H200),
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_h200_folder_reads_as_the_run_recorded_it():
    evidence = read_evidence(H200)
    assert "H200" in evidence.gpu and evidence.cpus == 16
    # knobs.json: fp32+TF32 63.15 ms a step at batch 64; bf16 40.85 ms (the README's figures)
    assert evidence.synthetic_sps["baseline"] == pytest.approx(1013.5, rel=0.01)
    assert evidence.synthetic_sps["amp bf16"] == pytest.approx(1566.7, rel=0.01)
    assert evidence.first_step_s["tf32 off"] > evidence.first_step_s["amp bf16"]
    # the session's baseline probes: loader-bound at 116 and 125 samples/s
    assert sorted(round(f) for f in evidence.full_sps) == [116, 125]
    assert 5 < evidence.spawn_s < 10


def test_a_folder_without_the_evidence_is_a_clear_error(tmp_path: Path):
    with pytest.raises(UsageError, match=r"knobs\.json is missing"):
        read_evidence(tmp_path)


def test_the_default_h200_ladder_is_predicted_in_minutes_and_the_estimate_holds():
    now = twin()
    assert now["finished"] and now["wall_s"] <= 8 * 60 and now["probes"] <= 40
    assert now["estimate_after_2_probes_error"] <= 0.25
    assert now["recommendation"]["amp_mode"] == "bf16"  # +55% on SYNTHETIC, as recorded
    before = twin("--legacy")
    assert before["wall_s"] > 3 * now["wall_s"]


def test_a_time_budget_on_the_twin_is_kept_and_leaves_out_the_least_gain_first():
    kept = twin("--budget", "3m")
    assert kept["wall_s"] <= 180
    left = kept["left_out"]
    assert "tf32" in left and "workers" not in left and "data" not in left
