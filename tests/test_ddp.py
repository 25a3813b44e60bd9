"""`tuneup train` under torchrun: 2 CPU ranks over gloo train one model and stay in sync.

Each run starts three Python processes that import torch (the torchrun agent and
two ranks), 20 to 30 s on a 2-core machine; the training itself is under a second.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tuneup.unet.synth import SynthResult

pytestmark = pytest.mark.slow

RANKS = 2
SYNC_LINE = re.compile(r"^Ranks in sync: yes \((\d+) ranks, relative spread (\S+)\)$", re.M)
NODDP_LINE = re.compile(
    r"^noddp: ranks trained without gradient exchange \(weights differ by (\S+)\)$", re.M
)
TUTORIAL_LINES = (
    "Starting Training Loop...",
    "Time taken for epoch 1 is ",
    "  Avg train loss=",
    "  Avg val loss=",
    "  Total validation time: ",
)


def _knobs(data: SynthResult) -> dict[str, Any]:
    return {
        "device": "cpu",
        "levels": 3,
        "width": 4,
        "data_size": 16,
        "global_batch_size": 4,
        "Nsamples": 32,
        "num_epochs": 1,
        "Nsamples_val": 8,
        "num_data_workers": 0,
        "data_loader_config": "inmem",
        "train_path": str(data.train_path),
        "val_path": str(data.val_path),
    }


def _torchrun(
    root: Path, knobs: dict[str, Any], *extra: str
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """Run `tuneup train` on 2 local ranks; returns the process and rank 0's metrics."""
    metrics = root / "metrics.jsonl"
    sets = [arg for key, value in knobs.items() for arg in ("--set", f"{key}={value}")]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TUNEUP_CACHE_DIR=str(root / "cache"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(RANKS),
            "-m",
            "tuneup",
            "train",
            "--metrics",
            str(metrics),
            *sets,
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=240,
    )
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    return done, [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def ddp_run(
    tmp_path_factory: pytest.TempPathFactory, synthetic_data: SynthResult
) -> tuple[subprocess.CompletedProcess[str], list[dict], dict[str, Any]]:
    knobs = _knobs(synthetic_data)
    done, records = _torchrun(tmp_path_factory.mktemp("ddp"), knobs)
    return done, records, knobs


def test_ddp_ranks_train_and_stay_in_sync(ddp_run):
    done, _, _ = ddp_run
    assert done.returncode == 0, done.stderr[-3000:]
    match = SYNC_LINE.search(done.stdout)
    assert match, done.stdout
    assert int(match.group(1)) == RANKS
    assert float(match.group(2)) <= 1e-9


def test_ddp_trains_every_step_of_the_epoch(ddp_run):
    done, records, knobs = ddp_run
    assert done.returncode == 0, done.stderr[-3000:]
    per_rank_batch = knobs["global_batch_size"] // RANKS
    expected_steps = knobs["Nsamples"] // RANKS // per_rank_batch
    train = [r for r in records if r["kind"] == "train"]
    assert train and train[-1]["step"] == expected_steps
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert len(epochs) == 1 and epochs[0]["step"] == expected_steps
    assert [r["kind"] for r in records].count("val") == 1


def test_tutorial_log_lines_come_from_rank_0_only(ddp_run):
    done, _, _ = ddp_run
    lines = done.stdout.splitlines()
    for start in TUTORIAL_LINES:
        assert sum(line.startswith(start) for line in lines) == 1, (start, done.stdout)
    assert len(SYNC_LINE.findall(done.stdout)) == 1


def test_noddp_ranks_drift_apart(tmp_path, synthetic_data):
    done, _ = _torchrun(tmp_path, _knobs(synthetic_data), "--set", "noddp=true")
    assert done.returncode == 0, done.stderr[-3000:]
    match = NODDP_LINE.search(done.stdout)
    assert match, done.stdout
    # Ranks see different crops; with no gradient exchange their weights must diverge.
    assert float(match.group(1)) > 0
    assert "Ranks in sync" not in done.stdout


def test_default_preset_notice_comes_once(ddp_run):
    done, _, _ = ddp_run
    assert done.stderr.count("no config given") == 1, done.stderr


def test_ddp_run_shows_no_torch_deprecation_warning(ddp_run):
    done, _, _ = ddp_run
    assert "FutureWarning" not in done.stderr, done.stderr
