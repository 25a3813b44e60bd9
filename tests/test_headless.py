"""Every headless command works where textual and plotext are not installed.

GPU nodes often get an offline install with the site's torch and without the
app's packages (README: "On a GPU node without network"). Each case runs
`python -m MODULE ARGS...` in a child process where `textual` and `plotext`
are hidden: importing them, or anything under them, raises ImportError there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneup.hardware.replay import RecordingBackend, TraceRecorder
from tuneup.probe.plan import plan_probe
from tuneup.probe.types import ProbeBudget
from tuneup.testing.scripted_backend import busy_backend

ROOT = Path(__file__).resolve().parents[1]

# `python -c LAUNCH MODULE ARGS...` runs like `python -m MODULE ARGS...`, minus the app's packages.
LAUNCH = (
    "import runpy, sys\n"
    "for name in ('textual', 'plotext'):\n"
    "    sys.modules[name] = None\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
)

# One case per line: `python -m` and its arguments, and what its stdout shows.
# {results}, {trace}, {config} and {spec} are the files of the `made` fixture.
HEADLESS_COMMANDS = [
    ("tuneup --help", "usage: tuneup"),
    ("tuneup presets list", "cpu-smoke"),
    ("tuneup plugins list", "sim"),
    ("tuneup monitor --once --replay {trace}", "NVIDIA H200"),
    ("tuneup monitor --once --json --replay {trace}", '"gpus"'),
    ("tuneup export {results} --format yaml", "global_batch_size"),
    ("tuneup export {results} --format sbatch", "#SBATCH"),
    ("tuneup train --config {config}", "Avg train loss"),
    ("tuneup.worker {spec}", '"event": "result"'),
]


def run_hidden(
    *argv: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m argv...` with textual and plotext hidden, from the checkout's root."""
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("home")
    environ = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    environ.update(HOME=str(home), TUNEUP_CACHE_DIR=str(home / "cache"), OMP_NUM_THREADS="1")
    return environ


@pytest.fixture(scope="module")
def probed(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A sim session run headless: its results folder and what it printed."""
    out = tmp_path_factory.mktemp("sim") / "run"
    done = run_hidden("tuneup", "probe", "--trainer", "sim", "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    return out, done.stdout


@pytest.fixture(scope="module")
def made(
    probed: tuple[Path, str],
    tiny_run: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, str]:
    """The files the commands read: a results folder, a GPU trace, a config, a probe spec."""
    folder = tmp_path_factory.mktemp("inputs")
    trace = folder / "trace.jsonl"
    recording = RecordingBackend(busy_backend(), TraceRecorder(trace))
    recording.devices()
    for _ in range(3):
        recording.sample()
    recording.close()
    values = dict(tiny_run)  # the conftest's tiny CPU run
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump(values))
    spec = folder / "spec.json"
    budget = ProbeBudget(trial_s=0.02, min_trials=2, max_trials=2, warmup_cap_s=0.3, loss_steps=2)
    spec.write_text(json.dumps({"config": values, "plan": plan_probe(budget).to_dict()}))
    return {
        "results": str(probed[0]),
        "trace": str(trace),
        "config": str(config),
        "spec": str(spec),
    }


def test_probe_with_the_sim_trainer_runs_and_writes_its_summary(probed: tuple[Path, str]) -> None:
    out, printed = probed
    assert "recommendation:" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recommendation"]["values"]


@pytest.mark.parametrize(
    ("command", "shows"), HEADLESS_COMMANDS, ids=[c for c, _ in HEADLESS_COMMANDS]
)
def test_headless_command_works_without_the_app_packages(
    command: str, shows: str, made: dict[str, str], env: dict[str, str]
) -> None:
    done = run_hidden(*(word.format(**made) for word in command.split()), env=env)
    assert done.returncode == 0, done.stderr
    assert shows in done.stdout
    assert "Traceback" not in done.stderr


def test_monitor_once_reads_the_gpus_or_says_none_are_visible(env: dict[str, str]) -> None:
    done = run_hidden("tuneup", "monitor", "--once", env=env)
    assert done.returncode == 0, done.stderr
    # Without NVML (this CPU machine) one line says why; on a GPU node, NVML's table.
    assert "no NVIDIA GPU visible" in done.stdout or "NVML" in done.stdout


@pytest.mark.parametrize(
    ("command", "instead"),
    [(["monitor"], "tuneup monitor --once / --json"), (["tui"], "tuneup probe")],
    ids=["monitor", "tui"],
)
def test_full_screen_app_without_textual_is_one_line_naming_the_fix(
    command: list[str], instead: str, env: dict[str, str]
) -> None:
    done = run_hidden("tuneup", *command, env=env)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("tuneup: error: ")
    assert "pip install textual plotext" in line and instead in line


def test_gpu_tests_are_collected_without_textual_or_the_snapshot_plugin(
    env: dict[str, str],
) -> None:
    # the files the GPU suite's gpu-tests step names
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    try:
        from suite_steps import gpu_test_files
    finally:
        sys.path.pop(0)
    marked = gpu_test_files(ROOT)
    assert "tests/test_tui_gpu.py" in marked  # the app's GPU test among them
    done = run_hidden(
        "pytest",
        "-p",
        "no:textual-snapshot",
        "-p",
        "no:cacheprovider",
        "--collect-only",
        "-q",
        "-m",
        "gpu",
        *marked,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tests/test_gpu.py::" in done.stdout
    assert "could not import 'textual'" in done.stdout  # the app's tests skip themselves


def test_doctor_quick_json_runs_without_the_app_packages(env: dict[str, str]) -> None:
    import json

    done = run_hidden("tuneup", "doctor", "--quick", "--json", env=env)
    report = json.loads(done.stdout)
    # 0, or 1 where this machine fails a check (a small /dev/shm, say): never a crash
    assert done.returncode == (1 if report["failed"] else 0), done.stderr
    assert {c["name"] for c in report["checks"]} >= {"GPUs", "torch", "/dev/shm"}
