"""`tuneup verify DIR`: a real cpu-smoke ladder's recommendation and baseline run again as
each target runs them (`tuneup train`; the tutorial's train.py, here a stand-in that takes
its SC22 command line and prints its epoch lines), set against the ladder's claim."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tuneup.cli import main
from tuneup.cluster.proctree import running_with_argument
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.results.verified import (
    BASELINE,
    RECOMMENDATION,
    VERIFY_JOURNAL,
    TargetCheck,
    Verified,
    VerifyRun,
)
from tuneup.tuning.session.lock import ResultsLock
from tuneup.verify.data import fitting_box
from tuneup.verify.lines import read_figures
from tuneup.verify.plan import STEADY_EPOCHS, run_order, shape_run
from tuneup.verify.request import VerifyRequest
from tuneup.verify.runs import Ended, Launch
from tuneup.verify.session import verify_session
from tuneup.verify.verdict import Claim, RealRun, check_target

# The tutorial's train.py as verify runs it: its SC22 flags, its YAML block, its epoch
# lines on stderr through a logger. Its pace is set by the test: STANDIN_SPS samples/s,
# STANDIN_GAIN times that at a per-rank batch above 8 (the recommendation's batch x2).
STANDIN = """
import argparse, os, sys, yaml
parser = argparse.ArgumentParser()
for flag in ("--yaml_config", "--config", "--amp_mode", "--data_loader_config", "--run_num"):
    parser.add_argument(flag)
for flag in ("--num_data_workers", "--local_batch_size", "--bucket_cap_mb", "--num_epochs"):
    parser.add_argument(flag, type=int)
for flag in ("--enable_apex", "--enable_jit", "--disable_broadcast_buffers", "--noddp"):
    parser.add_argument(flag, action="store_true")
args = parser.parse_args()
with open(args.yaml_config) as f:
    block = yaml.safe_load(f)[args.config]
print("argv:", " ".join(sys.argv[1:]), flush=True)
rate = float(os.environ["STANDIN_SPS"])
if args.local_batch_size > 8:
    rate *= float(os.environ["STANDIN_GAIN"])
samples, val = block["Nsamples"], block["Nsamples_val"]
for epoch in range(1, args.num_epochs + 1):
    log = lambda line: print(f"2026-11-28 12:00:00 - INFO - {line}", file=sys.stderr)
    log(f"Time taken for epoch {epoch} is {samples / rate} sec, avg {rate} samples/sec")
    log(f"  Avg train loss={0.1 / epoch:f}")
    log(f"  Avg val loss={0.1 / epoch:f}")
    log(f"  Total validation time: {0.3 * val / rate} sec")
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real cpu-smoke ladder of the batch stage (batch x2 wins on a CPU, about 1.3x)."""
    out = tmp_path_factory.mktemp("verify") / "run"
    code = main(["probe", "--preset", "cpu-smoke", "--stages", "batch_size", "--out", str(out)])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tutorial")
    script = folder / "train.py"
    script.write_text(textwrap.dedent(STANDIN).lstrip(), encoding="utf-8")
    return script


@pytest.fixture(scope="module")
def verified(session: Path, standin: Path) -> tuple[Path, dict[str, Any]]:
    """`tuneup verify DIR --train-py STANDIN --json`, short: one run of each configuration."""
    claim = ResultsDir(session).summary().speedup.value or 1.0
    env = {**os.environ, "STANDIN_SPS": "400", "STANDIN_GAIN": str(claim)}  # holds the claim
    argv = ["verify", str(session), "--seconds", "3", "--rounds", "1", "--train-py", str(standin)]
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", *argv, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return session, json.loads(done.stdout)


# --- the CLI, end to end ---------------------------------------------------------------


def test_each_target_runs_for_real_and_stands_against_its_claim(verified) -> None:
    folder, document = verified
    summary = ResultsDir(folder).summary()
    by_target = {t["target"]: t for t in document["targets"]}
    assert set(by_target) == {"tuneup", "tutorial"}
    for entry in document["targets"]:
        for key in ("target", "claimed_factor", "real_factor", "real_sps", "within_claim"):
            assert key in entry
        assert entry["claimed_factor"] == pytest.approx(summary.speedup.value)
        assert entry["real_sps"] > 0 and entry["baseline_sps"] > 0
        assert entry["real_factor"] == pytest.approx(entry["real_sps"] / entry["baseline_sps"])
        # true, or false with the reason: the part that moved, with its figures
        assert entry["within_claim"] in (True, False)
        if entry["within_claim"] is False:
            assert entry["moved"] and entry["reason"].endswith(entry["moved"][0]["text"])
    # the stand-in ran at exactly the claimed gain: within it
    tutorial = by_target["tutorial"]
    assert tutorial["real_factor"] == pytest.approx(summary.speedup.value, rel=1e-6)
    assert tutorial["within_claim"] is True and tutorial["reason"].startswith("within the claim")
    # the real tuneup train ran on the session's own box, its real epochs
    assert document["box"] == [64, 32] and document["probe_box"] == [64, 32]
    journal = [json.loads(line) for line in (folder / VERIFY_JOURNAL).read_text().splitlines()]
    assert [(r["target"], r["config"]) for r in journal] == [
        ("tuneup", BASELINE),
        ("tuneup", RECOMMENDATION),
        ("tutorial", BASELINE),
        ("tutorial", RECOMMENDATION),
    ]
    tuneup_logs = [Path(r["log"]).read_text() for r in journal if r["target"] == "tuneup"]
    for log in tuneup_logs:
        assert "Starting Training Loop" in log and "Total validation time" in log
    assert all(len(r["epochs"]) == 1 + STEADY_EPOCHS for r in journal if r["status"] == "ok")


def test_the_tutorials_run_is_its_sc22_command_line_with_the_exported_block(verified) -> None:
    folder, _document = verified
    journal = [json.loads(line) for line in (folder / VERIFY_JOURNAL).read_text().splitlines()]
    runs = {r["config"]: r for r in journal if r["target"] == "tutorial"}
    values = ResultsDir(folder).summary()
    for config, expected in (
        (BASELINE, values.baseline.values["global_batch_size"]),
        (RECOMMENDATION, values.recommendation.values["global_batch_size"]),
    ):
        run = runs[config]
        log = Path(run["log"]).read_text()
        assert "--yaml_config" in log and "--config tuned" in log and "--amp_mode" in log
        assert f"--local_batch_size {expected}" in log
        assert run["command"].startswith("python ") and "--num_epochs 4" in run["command"]


def test_the_verdicts_are_kept_in_the_summary_the_report_and_reproduce(verified, capsys) -> None:
    folder, document = verified
    kept = ResultsDir(folder).summary().verify
    assert kept is not None
    assert [t.to_dict() for t in kept.targets] == document["targets"]
    assert kept.command.startswith(f"tuneup verify {folder} --seconds 3 --rounds 1 --train-py ")
    # the recommendation's run, to run again by hand
    tuneup_check = next(t for t in kept.targets if t.target == "tuneup")
    assert tuneup_check.command.startswith("tuneup train --config ")
    assert Path(tuneup_check.command.split()[-1]).is_file()
    assert main(["export", str(folder), "--format", "md"]) == 0
    report = capsys.readouterr().out
    section = report.split("## Verified", 1)[1].split("\n## ", 1)[0]
    assert "| tuneup train |" in section and "| the tutorial's train.py |" in section
    assert "within the claim" in section
    assert f"reproduce: `{kept.command}`" in section


def test_an_older_summary_without_a_verify_reads_as_none(session: Path) -> None:
    document = json.loads((session / "summary.json").read_text())
    document.pop("verify", None)
    assert Summary.from_document(document).verify is None
    document["verify"] = "not a block"
    assert Summary.from_document(document).verify is None


def _copy(session: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(session, copy, ignore=shutil.ignore_patterns(".tuneup.lock", "verify*"))
    return copy


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--train-py", "nowhere/train.py"], "--train-py nowhere/train.py: no such file"),
        (["--box", "4096"], "not enough free space"),
        (["--box", "8"], "--box 8: the runs crop 16^3 samples"),
        (["--rounds", "0"], "--rounds 0: give 1 or more"),
        (["--budget", "5s"], "--budget 5 s is too short for 4 runs"),
    ],
    ids=["no-train-py", "box-too-large", "box-below-crop", "no-rounds", "budget-too-short"],
)
def test_bad_input_is_one_line_and_exit_2(
    session: Path, tmp_path: Path, capsys, extra: list[str], said: str
) -> None:
    copy = _copy(session, tmp_path)
    assert main(["verify", str(copy), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tuneup: error: ") and said in err and "\n" not in err
    assert not (copy / VERIFY_JOURNAL).exists()  # nothing ran


def test_a_held_folder_and_a_sim_session_are_refused(session: Path, tmp_path: Path, capsys) -> None:
    copy = _copy(session, tmp_path)
    lock = ResultsLock(copy)
    lock.acquire()
    try:
        assert main(["verify", str(copy), "--seconds", "1"]) == 2
    finally:
        lock.release()
    assert "in use by another tuneup" in capsys.readouterr().err
    sim = tmp_path / "sim"
    assert main(["probe", "--trainer", "sim", "--stages", "amp", "--out", str(sim)]) == 0
    capsys.readouterr()
    assert main(["verify", str(sim)]) == 2
    err = capsys.readouterr().err.strip()
    assert "sim trainer" in err and "no real run to verify" in err and "\n" not in err


def test_ctrl_c_ends_the_run_in_progress_and_keeps_what_finished(
    session: Path, tmp_path: Path
) -> None:
    copy = _copy(session, tmp_path)
    verify = subprocess.Popen(
        [sys.executable, "-m", "tuneup", "verify", str(copy), "--seconds", "3", "--rounds", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal, began = copy / VERIFY_JOURNAL, time.monotonic()
    while not (journal.is_file() and journal.read_text().count("\n") == 1):
        assert verify.poll() is None and time.monotonic() - began < 120
        time.sleep(0.1)
    time.sleep(1.0)  # the second run has started
    verify.send_signal(signal.SIGINT)
    _out, err = verify.communicate(timeout=60)
    assert verify.returncode == 130, err
    runs = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [r["status"] for r in runs] == ["ok", "stopped"]
    kept = ResultsDir(copy).summary().verify
    assert kept is not None and kept.stopped == "stopped by SIGINT"
    config = Path(runs[1]["log"]).with_suffix(".yaml")
    assert running_with_argument(str(config)) == []  # its trainer is gone too


# --- the runs behind a fake launcher: a miss, a stop ----------------------------------


def fake_runs(rates: dict[str, float], *, stop_after: int | None = None) -> Callable[..., Ended]:
    """Runs that write a trainer's epoch lines at `rates` (by configuration, from the file
    name), without a process; the one numbered `stop_after` + 1 is stopped."""
    started: list[str] = []

    def run(launch: Launch, log: Path, limit: Any, stop: Callable[[], bool]) -> Ended:
        started.append(log.name)
        config = RECOMMENDATION if RECOMMENDATION in log.name else BASELINE
        argv = launch.argv
        config_file = argv[argv.index("--yaml_config") + 1] if "--yaml_config" in argv else argv[-1]
        text = Path(config_file).read_text()
        samples = int(
            next(ln for ln in text.splitlines() if ln.strip().startswith("Nsamples:")).split()[1]
        )
        rate = rates[config]
        lines = [
            f"Time taken for epoch {e} is {samples / rate} sec, avg {rate} samples/sec"
            for e in range(1, 1 + 1 + STEADY_EPOCHS)
        ]
        log.write_text("\n".join(lines) + "\n")
        if stop_after is not None and len(started) > stop_after:
            return Ended("stopped", "stopped before its end", 0.1)
        return Ended("ok", "", 0.1)

    return run


def test_a_miss_is_flagged_with_the_part_that_moved(session: Path, tmp_path: Path) -> None:
    copy = _copy(session, tmp_path)
    summary = ResultsDir(copy).summary()
    base = summary.baseline.full_sps or 100.0
    verified = verify_session(
        VerifyRequest(folder=copy, seconds=2, rounds=2),
        run=fake_runs({BASELINE: base, RECOMMENDATION: base * 0.8}),
    )
    (check,) = verified.targets
    assert check.real_factor == pytest.approx(0.8)
    assert check.within_claim is False and check.outside == "below"
    assert check.moved[0].part == "rate" and "its probe's rate" in check.reason
    assert check.runs == 4  # A B B A
    lines = (copy / VERIFY_JOURNAL).read_text().splitlines()
    assert [json.loads(x)["config"] for x in lines] == [
        BASELINE,
        RECOMMENDATION,
        RECOMMENDATION,
        BASELINE,
    ]
    assert ResultsDir(copy).summary().verify == verified


def test_a_stop_keeps_what_finished(session: Path, tmp_path: Path) -> None:
    copy = _copy(session, tmp_path)
    asked: list[str] = []
    verified = verify_session(
        VerifyRequest(folder=copy, seconds=2, rounds=2),
        run=fake_runs({BASELINE: 100.0, RECOMMENDATION: 130.0}, stop_after=1),
        stop=lambda: asked[0] if asked else None,
        say=lambda line: asked.append("stopped by SIGINT") if "[2/4]" in line else None,
    )
    assert verified.stopped == "stopped by SIGINT"
    runs = [json.loads(x) for x in (copy / VERIFY_JOURNAL).read_text().splitlines()]
    assert [r["status"] for r in runs] == ["ok", "stopped"]
    kept = ResultsDir(copy).summary().verify
    assert kept is not None and kept.stopped == "stopped by SIGINT"
    assert kept.targets[0].real_factor == pytest.approx(1.3)  # its epochs still count


def test_a_run_that_would_end_past_the_budget_is_not_started(session: Path, tmp_path: Path) -> None:
    copy = _copy(session, tmp_path)
    times = iter([0.0, 0.0, 0.0, 15.0, 15.0])  # began, the data made, before each run
    verified = verify_session(
        VerifyRequest(folder=copy, seconds=2, rounds=1, budget_s=20),  # two runs of ~8 s
        run=fake_runs({BASELINE: 100.0, RECOMMENDATION: 130.0}),
        clock=lambda: next(times),
    )
    assert verified.stopped == "the --budget of 20 s ran out"
    assert len((copy / VERIFY_JOURNAL).read_text().splitlines()) == 1
    (check,) = verified.targets
    assert check.within_claim is None and "nothing to compare" in check.reason


def test_making_the_data_is_charged_to_the_budget_and_said(
    session: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the H200 (2026-11-28) making the 1024^3 box took 2 min of a 5.5 min budget that
    # the runs had been fitted to whole: the tutorial's runs never started.
    import tuneup.verify.session as verify_module

    copy = _copy(session, tmp_path)
    now = [0.0]
    made = verify_module.run_data

    def slow_data(*args: Any, **kwargs: Any) -> Any:
        now[0] += 30.0  # making the box
        return made(*args, **kwargs)

    monkeypatch.setattr(verify_module, "run_data", slow_data)
    said: list[str] = []
    verified = verify_session(
        VerifyRequest(folder=copy, seconds=40, rounds=1, budget_s=60),
        run=fake_runs({BASELINE: 100.0, RECOMMENDATION: 130.0}),
        clock=lambda: now[0],
        say=said.append,
    )
    assert verified.stopped is None and verified.targets[0].runs == 2
    # 30 s left for two runs that start in 5 s each: about 6.5 s measured each, not 20
    assert verified.seconds == pytest.approx(6.52, abs=0.05)
    assert any("the data took 30 s" in line for line in said)


def test_a_budget_that_runs_out_leaves_each_target_a_pair_and_says_what_never_ran(
    session: Path, standin: Path, tmp_path: Path
) -> None:
    copy = _copy(session, tmp_path)
    now = [0.0]
    runs = fake_runs({BASELINE: 100.0, RECOMMENDATION: 130.0})

    def timed(*args: Any) -> Ended:
        now[0] += 14.0
        return runs(*args)

    verified = verify_session(
        VerifyRequest(folder=copy, seconds=2, rounds=2, train_py=standin, budget_s=60),
        run=timed,
        clock=lambda: now[0],
    )
    journal = [json.loads(x) for x in (copy / VERIFY_JOURNAL).read_text().splitlines()]
    # A B for tuneup train, then A B for the tutorial, before either's second round
    assert [(r["target"], r["config"]) for r in journal] == [
        ("tuneup", BASELINE),
        ("tuneup", RECOMMENDATION),
        ("tutorial", BASELINE),
        ("tutorial", RECOMMENDATION),
    ]
    assert all(check.real_factor == pytest.approx(1.3) for check in verified.targets)

    copy = _copy(session, tmp_path / "again")
    now[0] = 0.0
    verified = verify_session(
        VerifyRequest(folder=copy, seconds=2, rounds=1, train_py=standin, budget_s=30),
        run=timed,
        clock=lambda: now[0],
    )
    tutorial = verified.targets[1]
    assert tutorial.runs == 0
    assert tutorial.reason == "not run: the --budget of 30 s ran out before its runs"


def test_a_budget_too_short_once_the_data_is_made_is_refused_before_making_it() -> None:
    from tuneup.errors import UsageError
    from tuneup.verify.plan import fit_seconds

    assert fit_seconds(20, 4, 60, 600, spent_s=120) == 20  # 4 runs of ~91 s fit in 480 s
    with pytest.raises(UsageError) as refused:
        fit_seconds(20, 4, 60, 330, spent_s=120)  # the H200's 2026-11-28 verify
    said = str(refused.value)
    assert "--budget 5 min 30 s (making the data takes about 2 min of it)" in said
    assert "give at least 6 min 07 s" in said


# --- the verdict, the plan, the lines (pure) ------------------------------------------


def _run(
    config: str, rate: float, *, val_s: float = 0.0, first_s: float | None = None
) -> VerifyRun:
    samples = 1000
    first = first_s if first_s is not None else samples / rate
    epochs = ((first, samples / first),) + ((samples / rate, rate),) * STEADY_EPOCHS
    return VerifyRun(
        config=config,
        status="ok",
        epochs=epochs,
        val_s=(val_s,) * (1 + STEADY_EPOCHS) if val_s else (),
        samples=samples,
        val_samples=200,
    )


CLAIM = Claim(factor=1.5, low=1.4, high=1.6, base_sps=100.0, rec_sps=150.0)
REAL = RealRun(epochs=10, samples=1000, val_samples=200, box=(64, 32), probe_box=(64, 32))


def test_a_real_run_that_holds_the_claim_is_within_it() -> None:
    check = check_target(
        "tuneup", "tuneup train", CLAIM, [_run(BASELINE, 100), _run(RECOMMENDATION, 150)], REAL
    )
    assert check.within_claim is True and check.real_factor == pytest.approx(1.5)
    assert check.whole_factor == pytest.approx(1.5)


def test_a_slower_run_on_a_larger_box_names_io() -> None:
    larger = RealRun(
        epochs=10, samples=1000, val_samples=200, box=(1024, 512), probe_box=(256, 128)
    )
    runs = [_run(BASELINE, 95), _run(RECOMMENDATION, 100)]
    check = check_target("tuneup", "tuneup train", CLAIM, runs, larger)
    assert check.within_claim is False and check.outside == "below"
    assert check.moved[0].part == "io"
    assert "1024^3 (the probes read 256^3)" in check.reason
    assert "the recommendation ran at 0.67x its probe's rate" in check.reason


def test_validation_that_eats_the_gain_is_named() -> None:
    runs = [_run(BASELINE, 100, val_s=5.0), _run(RECOMMENDATION, 150, val_s=5.0)]
    check = check_target("tuneup", "tuneup train", CLAIM, runs, REAL)
    assert check.real_factor == pytest.approx(1.5)  # the steady rate held
    assert check.within_claim is False and check.moved[0].part == "validation"
    assert check.whole_factor is not None and check.whole_factor < 1.4


def test_first_steps_that_eat_the_gain_are_named() -> None:
    runs = [_run(BASELINE, 100), _run(RECOMMENDATION, 150, first_s=60.0)]
    check = check_target("tuneup", "tuneup train", CLAIM, runs, REAL)
    assert check.within_claim is False and check.moved[0].part == "first_steps"
    assert "first epoch took" in check.reason


def test_nothing_to_compare_and_no_claim_are_said_not_judged() -> None:
    failed = VerifyRun(config=RECOMMENDATION, status="failed", reason="out of memory")
    check = check_target("tuneup", "", CLAIM, [_run(BASELINE, 100), failed], REAL)
    assert check.within_claim is None and check.real_factor is None
    assert "failed: out of memory" in check.reason
    untuned = Claim(none_why="this session tuned nothing for the tutorial's train.py")
    check = check_target(
        "tutorial", "", untuned, [_run(BASELINE, 100), _run(RECOMMENDATION, 120)], REAL
    )
    assert check.within_claim is None and check.real_factor == pytest.approx(1.2)
    assert check.reason == "no claim: this session tuned nothing for the tutorial's train.py"


def test_runs_alternate_and_each_epoch_lasts_its_share() -> None:
    assert run_order(1) == ((BASELINE, 0), (RECOMMENDATION, 0))
    a, b = BASELINE, RECOMMENDATION
    assert [config for config, _round in run_order(3)] == [a, b, b, a, a, b]
    shape = shape_run(
        batch=64, rate=1280.0, seconds=30, real_samples=65536, real_val_samples=8192, startup_s=60
    )
    assert shape.samples == 12800 and shape.epoch_s == 10  # each of 3 epochs a third
    assert shape.val_samples == 1600  # the real run's eighth
    assert shape.limit_s() > 60 + 4 * 10
    # a machine slower than the probes' gets its epochs: the limit follows its first
    assert shape.limit_s((200.0, 150.0)) > 200 + 3 * 150


def test_a_box_that_does_not_fit_falls_back_to_the_largest_that_does() -> None:
    def need(box: tuple[int, int]) -> int:
        return 36 * box[0] ** 3

    assert fitting_box((1024, 512), 256, 36 * 1024**3, need) == (1024, 512)
    assert fitting_box((1024, 512), 256, 36 * 600**3, need) == (512, 256)
    assert fitting_box((1024, 512), 256, 36 * 100**3, need) is None


def test_the_epoch_lines_are_read_whatever_the_logger_puts_before_them() -> None:
    figures = read_figures(
        [
            "2026-11-28 INFO - Time taken for epoch 1 is 40.5 sec, avg 15.8 samples/sec",
            "Time taken for epoch 2 is 10.0 sec, avg 64.0 samples/sec",
            "Time taken for epoch 3 is nan sec, avg nan samples/sec",
            "INFO -   Total validation time: 2.5 sec",
        ]
    )
    assert figures.epochs == ((40.5, 15.8), (10.0, 64.0))
    assert figures.val_s == (2.5,)


def test_a_verify_block_reads_back_as_it_was_written() -> None:
    check = TargetCheck(target="tuneup", label="tuneup train", real_factor=1.2, within_claim=True)
    verified = Verified(targets=(check,), skipped=(("tutorial", "give --train-py"),), box=(64, 32))
    assert Verified.from_dict(json.loads(json.dumps(verified.to_dict()))) == verified


# --- the app's results screen -------------------------------------------------------


def test_the_results_screen_shows_the_verify_and_runs_one_without_blocking(
    verified, tmp_path: Path
) -> None:
    pytest.importorskip("textual")
    import threading

    from textual.app import App
    from textual.widgets import Button

    from tuneup.tui.screens.results import ResultsScreen
    from tuneup.tui.widgets.verify_panel import VerifyPanel

    folder, _document = verified
    release = threading.Event()
    calls: list[Path] = []

    def verifier(
        where: Path, say: Callable[[str], None], stop: Callable[[], str | None]
    ) -> Verified:
        calls.append(where)
        say("[1/2] tuneup train, baseline (round 1): tuneup train --config x.yaml")
        release.wait(10)
        check = TargetCheck(
            target="tuneup",
            label="tuneup train",
            claimed_factor=1.4,
            real_factor=2.0,
            real_sps=200.0,
            baseline_sps=100.0,
            within_claim=False,
            outside="above",
            reason="above the claim",
        )
        return Verified(targets=(check,), data="a synthetic 64^3 box")

    class Review(App[None]):
        def __init__(self, where: Path) -> None:
            super().__init__()
            self.where = where

        def on_mount(self) -> None:
            summary, probes = ResultsDir(self.where).summary(), ResultsDir(self.where).results()
            self.push_screen(ResultsScreen(summary, probes, self.where, verifier=verifier))

    sim = tmp_path / "sim"
    assert main(["probe", "--trainer", "sim", "--stages", "amp", "--out", str(sim)]) == 0

    async def go() -> None:
        app = Review(folder)
        async with app.run_test(size=(120, 60)) as pilot:
            await pilot.pause(0.1)
            panel = app.screen.query_one(VerifyPanel)
            shown = str(panel.content)
            assert "tuneup train: real " in shown and "the tutorial's train.py: real" in shown
            await pilot.press("v")
            await pilot.pause(0.3)
            assert "verifying:\n[1/2] tuneup train, baseline" in str(panel.content)
            await pilot.press("v")  # one at a time
            release.set()
            await pilot.pause(0.3)
            assert calls == [folder]
            assert "tuneup train: real 2.00x" in str(panel.content)
            assert "OUTSIDE the claim (above)" in str(panel.content)
        app = Review(sim)
        async with app.run_test(size=(120, 60)) as pilot:
            await pilot.pause(0.1)
            assert app.screen.query_one("#verify", Button).disabled
            await pilot.press("v")
            await pilot.pause(0.1)
            assert "simulated" in str(app.screen.query_one(VerifyPanel).content)
            assert calls == [folder]

    asyncio.run(go())
