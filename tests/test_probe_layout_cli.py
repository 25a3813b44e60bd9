"""`tuneup probe --nproc/--nodes` end to end on the `sim` trainer: layout, ddp figures, export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuneup.hardware.machine import nvml_gpu_names

SLURM_PREFIXES = ("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def tuneup(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(SLURM_PREFIXES)}
    return subprocess.run(
        [sys.executable, "-m", "tuneup", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
    )


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ranks") / "run"
    done = tuneup(
        "probe", "--trainer", "sim", "--nproc", "2", "--stages", "workers,ddp", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    return out


def test_the_layout_and_the_job_are_recorded_and_shown(two_ranks: Path) -> None:
    session = json.loads((two_ranks / "session.json").read_text())
    assert session["launch"] == {"nproc": 2, "nodes": 1, "world_size": 2, "launcher": "torchrun"}
    assert session["job"]["source"] == "local" and session["job"]["cpus_usable"] >= 1
    assert session["machine"]["world_size"] == 2


def test_the_ddp_stage_reports_overhead_efficiency_and_a_scaling_estimate(two_ranks: Path) -> None:
    summary = json.loads((two_ranks / "summary.json").read_text())
    journal = [json.loads(line) for line in (two_ranks / "journal.jsonl").open()]
    ddp = summary["ddp"]
    single = next(p for p in journal if p["stage"] == "ddp" and p["ranks"] == 1)
    assert ddp["figures"]["reference_full_sps"] == single["full_sps"]
    expected = 100 * ddp["figures"]["full_sps"] / (2 * single["full_sps"])
    assert ddp["efficiency_pct"] == pytest.approx(expected)
    assert 0 < ddp["overhead_pct"] < 100
    # Reference runs are measured, never recommended.
    assert not summary["recommendation"]["values"].get("noddp")
    scaling = summary["scaling"]
    assert scaling["kind"] == "estimate" and [r["nodes"] for r in scaling["rows"]][:2] == [1, 2]
    assert scaling["measured"] == {"1": ddp["figures"]["full_sps"]}


def test_sbatch_export_matches_the_probed_layout(two_ranks: Path) -> None:
    done = tuneup("export", str(two_ranks), "--format", "sbatch")
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --nodes=1" in done.stdout
    assert "#SBATCH --ntasks-per-node=2" in done.stdout


def test_more_nodes_outside_slurm_is_one_clear_line(tmp_path: Path) -> None:
    done = tuneup("probe", "--trainer", "sim", "--nodes", "2", "--out", str(tmp_path / "x"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "needs a SLURM allocation" in done.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(bool(nvml_gpu_names()), reason="a GPU is visible: auto-pick chooses its preset")
def test_without_a_preset_tuneup_says_which_it_picked_and_why(tmp_path: Path) -> None:
    done = tuneup("probe", "--trainer", "sim", "--stages", "workers", "--out", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    assert "no --preset given: using cpu-smoke (no NVIDIA GPU visible" in done.stderr
    assert "local machine:" in done.stderr
