"""The GPU validation suite's CPU dry run: what a user of `bash bench/gpu/run.sh --cpu` sees.

Runs bench/gpu/suite.py for real (tiny model, real child processes), then
reads its results.json and summary.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "bench" / "gpu" / "suite.py"
STEPS = ["doctor", "honesty", "gpu-tests", "knobs", "ladder", "speed", "orphans"]


def run_suite(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SUITE), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def steps_of(out: Path) -> dict[str, dict[str, Any]]:
    results = json.loads((out / "results.json").read_text())
    return {step["name"]: step for step in results["steps"]}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("gpu-suite") / "results"
    began = time.monotonic()
    done = run_suite("--cpu", "--out", str(out))
    seconds = time.monotonic() - began
    assert seconds < 120, f"the CPU dry run took {seconds:.0f}s (must stay under 2 minutes)"
    return done, out


@pytest.mark.slow
def test_dry_run_records_every_step_and_exits_by_its_results(dry_run) -> None:
    done, out = dry_run
    steps = steps_of(out)
    assert list(steps) == STEPS
    for step in steps.values():
        assert step["status"] in ("pass", "fail", "skipped"), step
        assert step["why"], f"{step['name']} gives no reason"
    failed = [s["name"] for s in steps.values() if s["status"] == "fail"]
    assert done.returncode == (1 if failed else 0), done.stderr
    assert done.stdout.strip() == str(out / "summary.md")
    # Each step was journaled as it finished.
    journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    assert [entry["name"] for entry in journal] == STEPS


@pytest.mark.slow
def test_doctor_step_is_honest_about_the_command(dry_run) -> None:
    _, out = dry_run
    doctor = steps_of(out)["doctor"]
    present = (
        subprocess.run(
            [sys.executable, "-m", "tuneup", "doctor", "--help"], capture_output=True, cwd=ROOT
        ).returncode
        == 0
    )
    if not present:
        assert doctor["status"] == "fail"
        assert "tuneup doctor is not available" in doctor["why"]
    else:
        assert "doctor --json" in doctor["command"]
        assert doctor["rc"] is not None
        assert doctor["figures"].get("report"), "the doctor's JSON is recorded"
        assert doctor["status"] == ("pass" if doctor["rc"] == 0 else "fail")


@pytest.mark.slow
def test_the_main_steps_pass_on_the_cpu(dry_run) -> None:
    _, out = dry_run
    steps = steps_of(out)
    for name in ("honesty", "gpu-tests", "knobs", "ladder", "speed", "orphans"):
        assert steps[name]["status"] == "pass", steps[name]
    assert steps["gpu-tests"]["why"] == "skipped: no CUDA"
    assert steps["orphans"]["figures"]["orphans"] == []


@pytest.mark.slow
def test_honesty_reports_a_positive_ratio_per_config(dry_run) -> None:
    _, out = dry_run
    summary = steps_of(out)["honesty"]["figures"]["summary"]
    assert set(summary) == {"plain", "tuned"}
    for figures in summary.values():
        assert figures["ratio"] > 0
        assert figures["worker_full_sps_median"] > 0 and figures["bare_sps_median"] > 0


@pytest.mark.slow
def test_knobs_has_a_row_per_knob(dry_run) -> None:
    _, out = dry_run
    rows = {row["knob"]: row for row in steps_of(out)["knobs"]["figures"]["rows"]}
    assert set(rows) >= {
        "baseline",
        "tf32 off",
        "amp bf16",
        "amp fp16",
        "channels_last",
        "fused Adam",
        "jit script",
        "jit compile",
        "cuda_graphs",
    }
    assert rows["baseline"]["ratio_to_baseline"] == 1.0
    assert rows["channels_last"]["ms_per_step"] > 0
    assert rows["channels_last"]["samples_per_s"] > 0
    assert rows["cuda_graphs"]["status"] == "skipped" and rows["cuda_graphs"]["why"] == "needs CUDA"


@pytest.mark.slow
def test_ladder_records_a_real_probe_session(dry_run) -> None:
    _, out = dry_run
    figures = steps_of(out)["ladder"]["figures"]
    assert figures["probes"] >= 1
    assert figures["headline"].startswith("recommendation")
    assert (out / "ladder" / "journal.jsonl").is_file()


@pytest.mark.slow
def test_summary_names_versions_date_and_commands(dry_run) -> None:
    _, out = dry_run
    text = (out / "summary.md").read_text()
    env = json.loads((out / "results.json").read_text())["env"]
    assert f"torch: {env['torch']}" in text
    assert time.strftime("%Y-%m-%d") in text or env["date"][:10] in text
    assert "bench/gpu/suite.py --cpu --out" in text
    assert "-m pytest -q -m gpu -p no:cacheprovider tests" in text
    for name in STEPS:
        assert f"| {name} |" in text


@pytest.mark.slow
def test_a_step_past_the_deadline_is_skipped(tmp_path: Path) -> None:
    out = tmp_path / "late"
    done = run_suite("--cpu", "--steps", "knobs", "--deadline-s", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    steps = steps_of(out)
    assert steps["knobs"]["status"] == "skipped"
    assert steps["knobs"]["why"].startswith("skipped: deadline")
    assert steps["honesty"]["why"] == "not selected (--steps)"
    assert not (out / "knobs.json").exists()


def test_a_bad_step_name_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_suite("--cpu", "--steps", "knobz", "--out", str(tmp_path / "x"), timeout=60)
    assert done.returncode == 2
    assert "unknown step 'knobz'" in done.stderr


def _suite_steps() -> Any:
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    try:
        import suite_steps
    finally:
        sys.path.pop(0)
    return suite_steps


def test_doctor_output_is_judged_by_its_checks(tmp_path: Path) -> None:
    steps = _suite_steps()
    ctx = steps.Context(mode="gpu", out=tmp_path)
    report = {
        "checks": [
            {"name": "cuda", "level": "OK"},
            {"name": "tf32", "level": "WARN"},
            {"name": "honesty", "level": "FAIL"},
        ]
    }
    failed = steps.doctor_parse(ctx, steps.Finished(1, json.dumps(report, indent=2), "", 3.0))
    assert failed.status == "fail" and "honesty" in failed.why
    assert failed.key == "1 OK, 1 WARN, 1 FAIL"
    report["checks"].pop()
    passed = steps.doctor_parse(ctx, steps.Finished(0, json.dumps(report), "", 3.0))
    assert passed.status == "pass" and passed.figures["report"] == report
    garbled = steps.doctor_parse(ctx, steps.Finished(0, "not json", "boom", 1.0))
    assert garbled.status == "fail" and "no JSON" in garbled.why


def test_pytest_counts_read_the_closing_line() -> None:
    steps = _suite_steps()
    text = (
        "....F\nFAILED tests/test_gpu.py::test_x - boom\n"
        "2 failed, 15 passed, 831 deselected in 9.10s"
    )
    assert steps.pytest_counts(text) == {"failed": 2, "passed": 15, "deselected": 831}
    assert steps.pytest_counts("17 skipped, 831 deselected in 3.74s") == {
        "skipped": 17,
        "deselected": 831,
    }


def test_speed_times_a_whole_ladder_and_says_where_its_time_went(dry_run) -> None:
    _, out = dry_run
    speed = steps_of(out)["speed"]["figures"]
    assert speed["wall_s"] > 0 and speed["probes"] >= 2
    assert 0 < speed["trial_share"] < 1
    assert speed["fresh_probes"] >= 1 and speed["headline"]


@pytest.mark.slow
def test_the_dry_run_prints_the_gpu_plan_and_it_fits_the_budget(dry_run) -> None:
    done, out = dry_run
    plan = json.loads((out / "results.json").read_text())["runs"][-1]["plan"]
    fits = [p for p in plan if p["fits"]]
    # one device window: the truths that fit, in rank order, each priced from the H200 run;
    # the knobs (~5 min) wait for a window of their own and the ladder takes the rest
    assert [p["step"] for p in fits] == ["doctor", "honesty", "gpu-tests", "ladder"]
    assert sum(p["gpu_s"] for p in fits) <= 9 * 60
    assert all(
        p["gpu_s"] > 0 and p["from"] != "no estimate" for p in plan if p["step"] != "orphans"
    )
    assert "plan for 9 min on the GPU" in done.stderr
    assert "a later run: bash bench/gpu/run.sh --steps knobs" in done.stderr


def test_the_plan_comes_from_the_recorded_gpu_run() -> None:
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    try:
        import suite_plan
    finally:
        sys.path.pop(0)
    figures = suite_plan.read_figures()
    assert figures["doctor_s"] == 36.0 and figures["gpu_tests_s"] == pytest.approx(65.2)
    estimates = suite_plan.gpu_estimates(figures)
    # the knobs in one warm process cost less than the 5 rows the H200 ran fresh (233 s)
    # plus the 6 it never reached
    assert estimates["knobs"][0] < 400
    names = ["doctor", "honesty", "gpu-tests", "knobs", "ladder", "speed"]
    wide = suite_plan.plan(names, 25 * 60, estimates, 8)
    assert all(p.fits for p in wide)
    narrow = suite_plan.plan(names, 120, estimates, 8)
    assert [p.name for p in narrow if p.fits] == ["doctor"]


def test_a_budget_that_is_not_a_duration_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_suite("--cpu", "--budget", "soon", "--out", str(tmp_path / "x"), timeout=60)
    assert done.returncode == 2 and "--budget" in done.stderr and "'soon'" in done.stderr
