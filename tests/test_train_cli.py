"""`tuneup train` as a user runs it: real child processes, real logs and metrics."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EPOCH_LINE = re.compile(r"^Time taken for epoch (\d+) is ([\d.]+) sec, avg ([\d.]+) samples/sec$")


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TUNEUP_CACHE_DIR"] = str(cache)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _train(cache: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneup", "train", *args],
        capture_output=True,
        text=True,
        env=_env(cache),
        timeout=timeout,
    )


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def default_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess, Path]:
    """The embedded default as a newcomer runs it, with a metrics line per step."""
    root = tmp_path_factory.mktemp("default")
    metrics = root / "metrics.jsonl"
    done = _train(root / "cache", "--metrics", str(metrics), "--set", "log_every=1")
    return done, metrics


def test_default_run_makes_its_data_and_trains(default_run) -> None:
    done, _ = default_run
    assert done.returncode == 0, done.stderr
    assert "cpu-smoke" in done.stderr
    assert "made a synthetic 64^3 box" in done.stderr
    assert "M parameters" in done.stdout and "GFLOP per sample" in done.stdout


def test_loss_of_tiny_model_falls_by_half(default_run) -> None:
    _, metrics = default_run
    steps = [r for r in _records(metrics) if r["kind"] == "train"]
    assert len(steps) >= 200, "the default should run a few hundred steps"
    first = steps[0]["loss"]  # step 1: the loss of the initial weights
    last = sum(r["loss"] for r in steps[-20:]) / 20
    assert last <= 0.5 * first, f"loss fell only from {first:.3f} to {last:.3f}"
    vals = [r["loss"] for r in _records(metrics) if r["kind"] == "val"]
    assert vals[-1] < vals[0] and vals[-1] <= 0.5 * first


def test_logs_keep_the_tutorial_lines(default_run) -> None:
    done, _ = default_run
    lines = done.stdout.splitlines()
    epochs = [EPOCH_LINE.match(line) for line in lines]
    epochs = [m for m in epochs if m]
    assert [int(m.group(1)) for m in epochs] == [1, 2, 3, 4]
    assert all(float(m.group(3)) > 0 for m in epochs)
    assert sum(line.startswith("  Avg train loss=") for line in lines) == 4
    assert sum(line.startswith("  Avg val loss=") for line in lines) == 4
    assert sum(line.startswith("  Total validation time: ") for line in lines) == 4


def test_metrics_lines_hold_step_loss_rate_and_lr(default_run) -> None:
    _, metrics = default_run
    steps = [r for r in _records(metrics) if r["kind"] == "train"]
    assert [r["step"] for r in steps] == list(range(1, len(steps) + 1))
    for r in steps:
        assert r["samples_per_s"] > 0 and r["lr"] >= 0 and r["loss"] > 0
    lrs = [r["lr"] for r in steps]
    assert lrs == sorted(lrs, reverse=True), "the cosine schedule only decays without warm-up"
    assert lrs[-1] == pytest.approx(0.0, abs=1e-12), "the cosine ends at end_lr"


def test_second_run_reuses_the_synthetic_box(default_run, tmp_path: Path) -> None:
    done = _train(tmp_path, "--set", "max_steps=2", "--set", "num_epochs=1")
    assert done.returncode == 0, done.stderr
    again = _train(tmp_path, "--set", "max_steps=2", "--set", "num_epochs=1")
    assert again.returncode == 0
    assert "made a synthetic" in done.stderr and "made a synthetic" not in again.stderr


def test_step_budget_stops_early(tmp_path: Path) -> None:
    metrics = tmp_path / "m.jsonl"
    done = _train(
        tmp_path, "--metrics", str(metrics), "--set", "max_steps=5", "--set", "log_every=1"
    )
    assert done.returncode == 0, done.stderr
    steps = [r["step"] for r in _records(metrics) if r["kind"] == "train"]
    assert steps == [1, 2, 3, 4, 5]
    assert len([m for m in map(EPOCH_LINE.match, done.stdout.splitlines()) if m]) == 1


def test_ctrl_c_stops_after_the_current_step_and_keeps_metrics(tmp_path: Path) -> None:
    metrics = tmp_path / "m.jsonl"
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuneup",
            "train",
            "--metrics",
            str(metrics),
            "--set",
            "num_epochs=1000",
            "--set",
            "log_every=1",
            "--set",
            "Nsamples_val=0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    stopped = re.search(r"Stopped by Ctrl-C after (\d+) steps", out)
    assert stopped, out
    assert "Traceback" not in err
    steps = [r["step"] for r in _records(metrics) if r["kind"] == "train"]
    assert steps and steps[-1] == int(stopped.group(1))
    assert EPOCH_LINE.search(out.splitlines()[-4] if len(out.splitlines()) >= 4 else "") or any(
        EPOCH_LINE.match(line) for line in out.splitlines()
    )


def test_tutorial_flags_are_accepted(tmp_path: Path) -> None:
    done = _train(
        tmp_path,
        "--num_data_workers",
        "0",
        "--num_epochs",
        "1",
        "--set",
        "max_steps=2",
        "--bucket_cap_mb",
        "50",
        "--disable_broadcast_buffers",
    )
    assert done.returncode == 0, done.stderr


def test_missing_data_file_is_one_line(tmp_path: Path) -> None:
    done = _train(tmp_path, "--set", "train_path=/nonexistent/box.h5", timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "/nonexistent/box.h5" in done.stderr and "tuneup data synth" in done.stderr


def test_cuda_graphs_without_cuda_is_a_config_error(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = _train(tmp_path, "--set", "cuda_graphs=true", "--set", "amp_mode=bf16", timeout=60)
    assert done.returncode == 2
    assert "cuda_graphs needs CUDA" in done.stderr and done.stderr.count("\n") == 1
