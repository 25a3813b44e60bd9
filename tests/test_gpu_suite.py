"""The GPU validation suite's CPU dry run: what a user of `bash bench/gpu/run.sh --cpu` sees.

Runs bench/gpu/suite.py for real (tiny model, real child processes), then
reads its results.json and summary.md; the whole ladder's verdict against the
GPU twin's prediction, the monitor's and the plan's are also checked on values
(no ladder runs for them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "bench" / "gpu" / "suite.py"
STEPS = ["speed", "doctor", "gpu-tests", "knobs", "honesty", "ladder", "orphans"]
DEFAULT = ["speed", "doctor", "gpu-tests", "knobs", "honesty"]  # the short ladder: asked for


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
    # every step, the short ladder too (not a default step: --steps chooses it)
    done = run_suite("--cpu", "--out", str(out), "--steps", ",".join(STEPS[:-1]))
    seconds = time.monotonic() - began
    assert seconds < 240, f"the CPU dry run took {seconds:.0f}s (must stay a few minutes)"
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
    assert "-m pytest -v --durations=0 -m gpu -p no:cacheprovider tests" in text
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


def _bench(name: str) -> ModuleType:
    """A module of bench/gpu (they import each other by their bare names)."""
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def _suite_steps() -> Any:
    return _bench("suite_steps")


def test_a_cudnn_limit_row_runs_in_a_fresh_process_and_records_the_limit_in_force() -> None:
    # cuDNN's searches took 431 of the H200 ladder's 731 s: the knobs bench measures the
    # ladder's winner at torch's benchmark_limit and at fewer tries, each in a process of
    # its own (a process keeps the algorithms it found, whatever limit found them)
    import torch

    knobs = _bench("knobs")
    rows = {name: values for name, values, _ in knobs.KNOBS}
    limited = [name for name, values in rows.items() if knobs.LIMIT in values]
    assert limited == ["bf16+cl limit default", "bf16+cl limit 3", "bf16+cl limit 1"]
    assert all(knobs.own_process(rows[name]) for name in limited)
    assert not knobs.own_process(rows["amp bf16"])
    before = torch.backends.cudnn.benchmark_limit
    try:
        values = {**knobs.model_values("cpu"), **knobs.BASELINE, knobs.LIMIT: 3}
        row = knobs.measure_one(values, warm=1, trials=1, steps=1)
    finally:
        torch.backends.cudnn.benchmark_limit = before
    assert row[knobs.LIMIT] == 3 and row["ms_per_step"] > 0
    assert knobs.LIMIT not in knobs.measure_one(
        {**knobs.model_values("cpu"), **knobs.BASELINE}, warm=1, trials=1, steps=1
    )


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


def test_gpu_tests_stopped_at_their_limit_say_which_test_and_what_had_passed() -> None:
    # on the H200 (2026-11-27d) the step said "no count" after seven dots: -v names each test
    steps = _suite_steps()
    out = (
        "collecting ... collected 24 items\n\n"
        "tests/test_dali_loader.py::test_gpu_batches SKIPPED (no DALI)      [  4%]\n"
        "tests/test_doctor.py::test_full PASSED                              [  8%]\n"
        "tests/test_gpu.py::test_graph[bf16] PASSED                          [ 12%]\n"
        "tests/test_profile.py::test_nsys_writes_the_report "
    )
    stopped = steps.gpu_tests_parse(None, steps.Finished(None, out, "", 123.0, timed_out=True))
    assert stopped.status == "fail"
    assert stopped.why.endswith("after 123s, in tests/test_profile.py::test_nsys_writes_the_report")
    assert stopped.key == "1 skipped, 2 passed before its limit"
    ended = out + "PASSED  [ 16%]\n"
    assert steps.stopped_in(ended) == ({"skipped": 1, "passed": 3}, "")


def test_the_plan_prices_the_gpu_tests_as_the_stopped_window_measured_them() -> None:
    suite_plan = _bench("suite_plan")
    estimates = suite_plan.gpu_estimates(suite_plan.read_figures())
    # 7 of 24 took 123 s: a window of 200 s after the doctor no longer plans them in
    assert estimates["gpu-tests"][0] > 300 and "7 of 24 tests" in estimates["gpu-tests"][1]
    window = suite_plan.plan(["doctor", "gpu-tests"], 200, estimates, 8)
    assert [p.name for p in window if p.fits] == ["doctor"]


def test_the_gpu_tests_step_collects_only_the_files_that_mark_a_gpu_test(tmp_path: Path) -> None:
    # collecting every test file took 10 s of the CPU dry run, device time on a GPU
    steps = _suite_steps()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cuda.py").write_text("@pytest.mark.gpu\ndef test_a(): ...\n")
    (tmp_path / "tests" / "test_pure.py").write_text("def test_b(): ...\n")
    ctx = _bench("suite_types").Context(mode="gpu", out=tmp_path, root=tmp_path)
    command = steps.gpu_tests_command(ctx)
    assert command[-1] == "tests/test_cuda.py" and "tests/test_pure.py" not in command
    assert command[command.index("-m", 2) + 1] == "gpu"


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
    # one device window: the whole ladder first, priced by the twin's prediction for this
    # run, then what fits of the rest in rank order, each priced from the H200 run
    assert plan[0]["step"] == "speed" and fits[0]["step"] == "speed"
    prediction = json.loads((out / "prediction.json").read_text())
    if prediction["error"] is None:
        assert "prediction.json" in plan[0]["from"]
        assert plan[0]["gpu_s"] == round(prediction["prediction"]["wall_s"])
    assert sum(p["cut_to_s"] or p["gpu_s"] for p in fits) <= 9 * 60
    assert all(
        p["gpu_s"] > 0 and p["from"] != "no estimate" for p in plan if p["step"] != "orphans"
    )
    assert "plan for 9 min on the GPU" in done.stderr
    assert "first the whole default ladder (speed" in done.stderr
    assert "a later run: bash bench/gpu/run.sh --steps" in done.stderr
    assert done.stderr.index("plan for 9 min") < done.stderr.index("-- speed:")


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
    names = ["speed", "doctor", "gpu-tests", "knobs", "honesty", "ladder"]
    wide = suite_plan.plan(names, 35 * 60, estimates, 8)  # the whole ladder ~15 min of it
    assert all(p.fits for p in wide)
    narrow = suite_plan.plan(names[1:], 120, estimates, 8)
    assert [p.name for p in narrow if p.fits] == ["doctor"]


def test_a_budget_that_is_not_a_duration_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_suite("--cpu", "--budget", "soon", "--out", str(tmp_path / "x"), timeout=60)
    assert done.returncode == 2 and "--budget" in done.stderr and "'soon'" in done.stderr


# ---- the window's claim first: the prediction, the whole ladder, the monitor --------------


def test_the_default_run_takes_the_whole_ladder_first_and_leaves_the_short_one_out() -> None:
    suite = _bench("suite")
    assert suite.parse_args([]).steps == DEFAULT
    assert suite.STEPS[0].name == "speed"
    # --steps still chooses; the steps run in rank order whatever order they are named in
    chosen = suite.parse_args(["--steps", "ladder,knobs"]).steps
    assert [s.name for s in suite.STEPS if s.name in chosen] == ["knobs", "ladder"]


@pytest.mark.slow
def test_the_prediction_is_written_down_before_the_ladder_runs(dry_run) -> None:
    done, out = dry_run
    prediction = json.loads((out / "prediction.json").read_text())
    # from the first run's evidence and the four later ladders' journals
    command = prediction["command"]
    assert "bench/gpu_twin.py --evidence bench/results/gpu-h200-2026-11-26 " in command
    assert "gpu-h200-2026-11-27d/speed/00/journal.jsonl --preset h200 --journal " in command
    assert command.count("--journal-evidence") == 4
    # its probes kept beside it, for the ladder's to be set beside them
    assert command.endswith("prediction-probes.jsonl --json")
    assert (out / "prediction-probes.jsonl").is_file()
    assert prediction["git"]["commit"] and prediction["time"]
    # the twin's own JSON object as it printed it, or why there is none
    assert prediction["error"] or prediction["prediction"]["wall_s"] > 0
    assert done.stderr.index("suite: prediction.json:") < done.stderr.index("-- speed:")
    speed = steps_of(out)["speed"]
    started = time.mktime(time.strptime(speed["finished_at"], "%Y-%m-%dT%H:%M:%S%z"))
    started -= speed["seconds"]
    asked = time.mktime(time.strptime(prediction["time"], "%Y-%m-%dT%H:%M:%S%z"))
    assert asked <= started + 1


@pytest.mark.slow
def test_the_whole_ladder_is_set_beside_its_prediction_with_the_monitor(dry_run) -> None:
    _, out = dry_run
    speed = steps_of(out)["speed"]
    versus = speed["figures"]["versus_prediction"]
    assert versus["measured_wall_s"] == pytest.approx(speed["figures"]["wall_s"], abs=0.1)
    assert versus["measured_probes"] == speed["figures"]["probes"]
    assert versus["beat_10_min"] is True
    prediction = json.loads((out / "prediction.json").read_text())
    assert prediction["error"] is None  # the recorded evidence is in the checkout
    assert versus["predicted_wall_s"] == prediction["prediction"]["wall_s"]
    # the twin kept its probes: the ladder's are set beside them, probe by probe
    against = speed["figures"]["probe_by_probe"]
    assert against["matched"] >= 1 and against["probes"][0]["stage"] == "baseline"
    assert "- probe by probe, " in (out / "summary.md").read_text()
    # the dry run's tiny ladder is no test of the GPU's prediction, and says so
    assert not versus["comparable"] and "dry run" in versus["note"]
    monitor = speed["monitor"]
    assert "monitor --json --interval 1" in monitor["command"]
    assert monitor["status"] in ("ran", "refused") and monitor["why"]
    assert (out / "monitor.jsonl.gz").is_file()
    summary = (out / "summary.md").read_text()
    assert "## The whole ladder against its prediction" in summary
    assert "- measured:" in summary and "- monitor beside it" in summary


def test_a_twin_that_fails_is_written_down_and_the_run_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "no-twin"
    done = run_suite(
        "--cpu", "--steps", "speed", "--evidence", str(tmp_path / "nowhere"),
        "--deadline-s", "1", "--out", str(out), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    prediction = json.loads((out / "prediction.json").read_text())
    assert prediction["prediction"] is None and prediction["error"].startswith("exited")
    assert "--evidence " + str(tmp_path / "nowhere") in prediction["command"]
    assert steps_of(out)["speed"]["why"].startswith("skipped: deadline")
    assert "- no prediction: exited" in (out / "summary.md").read_text()


PREDICTED = {"wall_s": 450.0, "wall_s_low": 400.0, "wall_s_high": 520.0, "probes": 39}


def _ladder_ran(out: Path, wall_s: float | None, prediction: dict[str, Any] | None) -> None:
    """What the speed step's command leaves: speed.json (None: it was stopped), and the
    prediction.json written before it."""
    if prediction is not None:
        document = {"command": "twin", "preset": "h200", "error": None, "prediction": prediction}
        (out / "prediction.json").write_text(json.dumps(document))
    if wall_s is not None:
        run = {"preset": "h200", "wall_s": wall_s, "probes": 41, "trial_share": 0.6}
        (out / "speed.json").write_text(json.dumps({"runs": [{**run, "headline": "adopt"}]}))


def test_the_speed_record_says_measured_against_predicted(tmp_path: Path) -> None:
    steps = _suite_steps()
    ctx = steps.Context(mode="gpu", out=tmp_path)
    _ladder_ran(tmp_path, 468.0, PREDICTED)
    outcome = steps.speed_parse(ctx, steps.Finished(0, "", "", 470.0))
    versus = outcome.figures["versus_prediction"]
    assert outcome.status == "pass" and outcome.figures["beat_10_min"] is True
    assert (versus["measured_wall_s"], versus["predicted_wall_s"]) == (468.0, 450.0)
    assert versus["wall_error"] == pytest.approx((450 - 468) / 468, abs=1e-3)
    assert versus["probes_error"] == pytest.approx((39 - 41) / 41, abs=1e-3)
    assert versus["within_range"] is True and versus["comparable"] is True
    assert "7.8 min vs 7.5 predicted (-4%), 41 vs 39 probes, under 10 min" in outcome.key


def test_a_whole_ladder_past_10_minutes_fails_the_claim(tmp_path: Path) -> None:
    steps = _suite_steps()
    ctx = steps.Context(mode="gpu", out=tmp_path)
    _ladder_ran(tmp_path, 660.0, {"wall_s": 450.0})
    outcome = steps.speed_parse(ctx, steps.Finished(0, "", "", 662.0))
    assert outcome.status == "fail" and "not under 10 minutes" in outcome.why
    assert outcome.figures["versus_prediction"]["within_range"] is None  # no range given


def test_a_ladder_stopped_at_the_window_s_end_is_a_lower_bound(tmp_path: Path) -> None:
    steps = _suite_steps()
    ctx = steps.Context(mode="gpu", out=tmp_path)
    _ladder_ran(tmp_path, None, PREDICTED)
    stopped = steps.Finished(None, "", "", 530.0, timed_out=True)
    outcome = steps.speed_parse(ctx, stopped)
    versus = outcome.figures["versus_prediction"]
    assert outcome.status == "fail" and "did not finish" in outcome.why
    assert versus["finished"] is False and versus["beat_10_min"] is None
    assert versus["wall_error"] is None and "lower bound" in versus["note"]
    # without a prediction the record still says what was measured, and why none
    (tmp_path / "prediction.json").unlink()
    _ladder_ran(tmp_path, 480.0, None)
    alone = steps.speed_parse(ctx, steps.Finished(0, "", "", 481.0)).figures
    assert alone["versus_prediction"]["predicted_wall_s"] is None
    assert "no prediction.json" in alone["versus_prediction"]["note"]


def test_the_monitor_says_why_it_gave_no_trace() -> None:
    monitor = _bench("suite_monitor")
    refused = '{"time": 1.0, "gpus": [], "error": "no NVIDIA GPU visible (NVML: not found)"}\n'
    said = monitor.verdict(refused, "", 0, outlived=False, seconds=30.0)
    assert said["status"] == "refused" and "no NVIDIA GPU visible" in said["why"]
    sample = json.dumps({"time": 1.0, "gpus": [{"name": "NVIDIA H200", "power_w": 80.5}]})
    ran = monitor.verdict("\n".join([sample] * 3) + "\n", "", None, outlived=True, seconds=3.2)
    assert ran["status"] == "ran" and ran["samples"] == 3


def test_the_plan_prices_the_whole_ladder_from_the_prediction() -> None:
    suite_plan = _bench("suite_plan")
    estimates = suite_plan.gpu_estimates(suite_plan.read_figures(), PREDICTED)
    seconds, source = estimates["speed"]
    assert seconds == 450.0 and "prediction.json" in source and "400-520s" in source
    names = ["speed", "doctor", "gpu-tests", "knobs", "honesty"]
    planned = suite_plan.plan(names, 540, estimates, 8, {"speed": 420})
    assert [p.name for p in planned if p.fits] == ["speed", "doctor"]
    lines = suite_plan.plan_lines(planned, 540, "gpu-h200-2026-11-26", 8)
    assert lines[1].startswith("first the whole default ladder (speed ~450s")
    # a prediction past the window: the ladder still runs first, to the window's end
    slow = {**estimates, "speed": (774.0, "the GPU twin's prediction")}
    planned = suite_plan.plan(names, 540, slow, 8, {"speed": 420})
    assert [p.name for p in planned if p.fits] == ["speed"] and planned[0].taken == 532
    assert "a lower bound" in suite_plan.plan_lines(planned, 540, "x", 8)[1]


def test_the_whole_ladder_records_where_its_steps_went(tmp_path: Path) -> None:
    steps = _suite_steps()
    ctx = steps.Context(mode="gpu", out=tmp_path)
    _ladder_ran(tmp_path, 468.0, PREDICTED)
    outcome = steps.speed_parse(ctx, steps.Finished(0, "", "", 470.0))
    assert outcome.figures["profile"] is None  # the ladder took no profile
    session = tmp_path / "speed" / "h200-1"
    session.mkdir(parents=True)
    base = {"step_s": 0.2, "parts_s": {"data": 0.15}, "gpu": {"busy_s": 0.024}, "top": [1]}
    after = {"step_s": 0.05, "parts_s": {"data": 0.001}, "tflops": 310.0, "mfu": 0.39}
    block = {"baseline": base, "recommendation": after, "left": "conv 71%"}
    block["findings"] = [{"text": "GPU busy 12% of the step (rule: below 50%)"}]
    (session / "summary.json").write_text(json.dumps({"profile": block}))
    figures = steps.speed_parse(ctx, steps.Finished(0, "", "", 470.0)).figures["profile"]
    assert figures["baseline"] == {k: v for k, v in base.items() if k != "top"}
    assert figures["recommendation"]["mfu"] == 0.39 and figures["left"] == "conv 71%"
    assert figures["findings"] == ["GPU busy 12% of the step (rule: below 50%)"]


def test_a_ladder_with_a_failed_probe_still_says_its_share_in_timed_trials(tmp_path: Path) -> None:
    """The H200's whole ladder (27c) had torch.compile fail: its line timed nothing, and the
    record said "0% in timed trials" where 13.9% of it was."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import ladder_speed
    finally:
        sys.path.pop(0)
    figures = ladder_speed.figures(ROOT / "bench/results/gpu-h200-2026-11-27c/speed/00", 731.3, [])
    assert figures["trial_share"] == pytest.approx(0.139, abs=0.002)
    steps = _suite_steps()
    ctx = steps.Context(mode="gpu", out=tmp_path)
    _ladder_ran(tmp_path, 731.3, PREDICTED)
    run = json.loads((tmp_path / "speed.json").read_text())
    run["runs"][0].update(trial_share=None, trial_share_rebuilt=0.139)
    (tmp_path / "speed.json").write_text(json.dumps(run))
    outcome = steps.speed_parse(ctx, steps.Finished(0, "", "", 733.0))
    assert "14% in timed trials" in outcome.key
