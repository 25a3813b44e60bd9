"""Sessions through the real life of an allocation, with real processes.

One assembly for both front ends (an app-started session resumed by the CLI,
and the reverse), one owner per results folder, every stop signal, SIGKILL of
tuneup, SLURM's time limit, transient failures, and the clear one-line ends.
The `command` trainer runs a small script that hangs in its bf16 probe while
a flag file exists, so a test can stop tuneup in the middle of a probe.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fault_ladder import TUTORIAL_EPOCH_LOG

from tuneup.cluster.leftovers import MARKER, find_leftovers, stop_leftovers
from tuneup.tuning.results.journal import quoted

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")

SCRIPT = """
import argparse, subprocess, sys, time
from pathlib import Path
parser = argparse.ArgumentParser()
parser.add_argument("--amp_mode", default="none")
parser.add_argument("--optimizer_impl", default="foreach")
parser.add_argument("--hang", required=True)
args = parser.parse_args()
hang = Path(args.hang)
if args.amp_mode == "bf16" and hang.exists():
    subprocess.Popen(["sleep", "1000"])  # what a launcher would leave behind
    hang.with_suffix(".started").touch()
    time.sleep(1000)
"""
SCRIPT += TUTORIAL_EPOCH_LOG


def wait_until(condition: Any, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def tuneup_run(*args: str, env: dict[str, str] | None = None, timeout: float = 180):
    return subprocess.run(
        [sys.executable, "-m", "tuneup", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


class Hanging:
    """A `command` preset whose bf16 probe hangs (with a child `sleep`) while the flag exists;
    fused Adam runs twice as fast as the default."""

    def __init__(self, root: Path, stages: list[Any] | None = None, base_amp: str = "none") -> None:
        self.root = root
        script = root / "train.py"
        script.write_text(textwrap.dedent(SCRIPT).lstrip(), encoding="utf-8")
        self.flag = root / "hang"
        self.flag.touch()
        self.started = self.flag.with_suffix(".started")
        self.preset = root / "life.yaml"
        self.preset.write_text(
            yaml.safe_dump(
                {
                    "name": "life",
                    "train": {"amp_mode": base_amp},  # bf16: the baseline hangs
                    "probe": {
                        "stages": stages or [{"amp": {"amp_mode": ["bf16"]}}],
                        "budget": {"limit_s": 60},
                    },
                    "command": {
                        "run": [sys.executable, str(script), "--hang", str(self.flag)],
                        "cwd": str(root),
                        "flags": {
                            "amp_mode": "--amp_mode {value}",
                            "optimizer_impl": "--optimizer_impl {value}",
                        },
                    },
                }
            ),
            encoding="utf-8",
        )
        self.out = root / "run dir"  # a space: printed commands must quote it
        self.log = root / "stderr.log"

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        argv = ["probe", "--trainer", "command", "--preset", str(self.preset), *extra]
        with self.log.open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "tuneup", *argv, "--out", str(self.out)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # its own group, to check that nothing of it is left
            )

    def hung(self, proc: subprocess.Popen[bytes]) -> None:
        assert wait_until(lambda: self.started.exists() or proc.poll() is not None)
        assert proc.poll() is None, self.log.read_text()

    def journal(self) -> list[dict[str, Any]]:
        text = (self.out / "journal.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]

    def resume(self) -> subprocess.CompletedProcess[str]:
        self.flag.unlink(missing_ok=True)
        return tuneup_run("probe", "--resume", str(self.out))


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def hanging(tmp_path: Path):
    setup = Hanging(tmp_path)
    yield setup
    stop_leftovers(find_leftovers(setup.out / "probes"), grace_s=0.5)


# ---- every way an allocation ends --------------------------------------------------


def test_a_ctrl_c_before_the_first_probe_points_to_no_journal(tmp_path: Path) -> None:
    setup = Hanging(
        tmp_path, stages=[{"optimizer": {"optimizer_impl": ["fused"]}}], base_amp="bf16"
    )
    try:
        proc = setup.start()
        setup.hung(proc)  # in the baseline's first probe
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        stop_leftovers(find_leftovers(setup.out / "probes"), grace_s=0.5)
    assert not (setup.out / "journal.jsonl").exists()
    said = setup.log.read_text()
    assert "journal.jsonl" not in said  # no pointer to a file that is not there
    last = said.splitlines()[-1]
    assert "before its first probe finished, so nothing is journaled" in last
    assert shlex.split(last.split("--resume ", 1)[1]) == [str(setup.out)]
    resumed = setup.resume()  # the way it names works
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_stop_signal_mid_probe_journals_says_how_to_resume_and_leaves_nothing(
    hanging: Hanging, signum: int, code: int
) -> None:
    proc = hanging.start()
    hanging.hung(proc)
    finished = hanging.journal()
    assert [p["stage"] for p in finished][:2] == ["baseline", "baseline"]

    proc.send_signal(signum)
    assert proc.wait(timeout=30) == code
    # nothing of the session is left: not in tuneup's group, not anywhere under the folder
    assert wait_until(lambda: group_gone(proc.pid), 5)
    assert wait_until(lambda: not find_leftovers(hanging.out / "probes"), 5)
    assert hanging.journal() == finished  # valid, and the cut probe is not in it
    summary = json.loads((hanging.out / "summary.json").read_text())  # the answer so far
    assert summary["partial"]["not_run"] == ["amp"]
    assert summary["recommendation"]["headline"].startswith("partial (stopped by ")
    last = hanging.log.read_text().splitlines()[-1]
    assert "or with: tuneup probe --resume" in last
    assert shlex.split(last.split("--resume ", 1)[1]) == [str(hanging.out)]

    resumed = hanging.resume()
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("[from journal]") == len(finished)


def test_a_ladder_stopped_mid_stage_exports_its_best_so_far_marked_partial(
    tmp_path: Path,
) -> None:
    hanging = Hanging(tmp_path, stages=["optimizer", "amp"])
    try:
        proc = hanging.start()
        hanging.hung(proc)  # in stage amp, after the optimizer stage adopted fused Adam
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
    finally:
        stop_leftovers(find_leftovers(hanging.out / "probes"), grace_s=0.5)
    log = hanging.log.read_text()
    assert "the best configuration so far is in" in log and "(partial;" in log
    summary = json.loads((hanging.out / "summary.json").read_text())
    assert summary["recommendation"]["changes"] == {"optimizer_impl": "fused"}
    assert summary["partial"]["why"] == "stopped by SIGTERM during stage amp"
    assert summary["partial"]["not_run"] == ["amp"]  # begun, not finished
    assert "not yet confirmed against the baseline" in summary["recommendation"]["headline"]

    flags = tuneup_run("export", str(hanging.out), "--format", "command")
    assert flags.returncode == 0, flags.stderr
    assert "--optimizer_impl fused" in flags.stdout
    assert "stopped before its end" in flags.stderr and "--resume" in flags.stderr

    resumed = hanging.resume()
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads((hanging.out / "summary.json").read_text())
    assert final["partial"] is None and final["confirmation"] is not None


def test_sigkill_of_tuneup_leaves_no_child_and_resume_stops_any_leftover(
    hanging: Hanging,
) -> None:
    proc = hanging.start()
    hanging.hung(proc)
    assert len(find_leftovers(hanging.out / "probes")) >= 3  # guardian, script, its sleep
    proc.kill()
    proc.wait(timeout=10)
    assert wait_until(lambda: not find_leftovers(hanging.out / "probes"), 5)

    # Something of the dead session that still runs (its guardian died too, say):
    marker = {**os.environ, MARKER: str((hanging.out / "probes").resolve())}
    stray = subprocess.Popen(["sleep", "1000"], env=marker, start_new_session=True)
    try:
        resumed = hanging.resume()
        assert resumed.returncode == 0, resumed.stderr
        assert f"a dead session left running: pid {stray.pid} (sleep)" in resumed.stderr
        assert f"pid {proc.pid} on {socket.gethostname()}" in resumed.stderr  # its lock
        assert stray.wait(timeout=5) == -signal.SIGTERM
    finally:
        stray.kill()


# ---- one owner per results folder ---------------------------------------------------


def test_a_second_live_run_on_a_folder_is_refused_naming_the_owner(hanging: Hanging) -> None:
    proc = hanging.start()
    try:
        hanging.hung(proc)
        before = hanging.journal()

        second = tuneup_run("probe", "--resume", str(hanging.out))
        assert second.returncode == 2 and second.stdout == ""
        (line,) = second.stderr.splitlines()
        assert "is in use by another tuneup" in line and f"pid {proc.pid}" in line

        again = tuneup_run("probe", "--trainer", "command", "--preset", str(hanging.preset),
                           "--out", str(hanging.out))  # fmt: skip
        assert again.returncode == 2
        assert "already holds a tuneup session" in again.stderr
        assert hanging.journal() == before
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_out_onto_a_finished_session_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    out = tmp_path / "done"
    first = tuneup_run("probe", "--trainer", "sim", "--stages", "amp", "--out", str(out))
    assert first.returncode == 0, first.stderr
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    second = tuneup_run("probe", "--trainer", "sim", "--stages", "amp", "--out", str(out))
    assert second.returncode == 2
    (line,) = second.stderr.splitlines()
    assert "already holds a tuneup session" in line
    assert f"tuneup probe --resume {quoted(out)}" in line and "new folder with --out" in line
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == files


# ---- one assembly: either front end resumes the other's session ----------------------


def _app(tmp_path: Path, out: Path) -> Any:
    pytest.importorskip("textual")
    from tuneup.hardware.types import MachineInfo
    from tuneup.tui.app import TuneupApp

    machine = MachineInfo(cuda=False, gpu_count=0, cpus_usable=2)
    return TuneupApp(machine, trainer="sim", preset_name="cpu-smoke", out=out)


def _drive(driver: Any, stop_after: int | None = None) -> list[Any]:
    """Run a SessionDriver in this thread; stop it after `stop_after` probes."""
    done: list[Any] = []

    def post(message: Any) -> None:
        if type(message).__name__ == "ProbeDone":
            done.append(message)
            if stop_after is not None and len(done) == stop_after:
                driver.stop()

    driver.post = post
    driver.run()
    return done


def test_an_app_session_resumed_by_the_cli_reuses_every_probe_on_the_same_data(
    tmp_path: Path,
) -> None:
    from tuneup.preset.load import load_preset
    from tuneup.tuning.session.request import SessionRequest

    data = tmp_path / "my data" / "train.h5"
    data.parent.mkdir()
    data.write_bytes(b"the sim trainer reads no data")
    out = tmp_path / "app run"
    app = _app(tmp_path, out)
    preset = load_preset("cpu-smoke")
    request = SessionRequest(
        preset="cpu-smoke", stages=("workers", "amp"), budget=preset.budget, data_path=data
    )
    driver = app.build_driver(request, preset)
    _drive(driver, stop_after=6)
    app.built.close()
    journal = (out / "journal.jsonl").read_text().splitlines()
    assert len(journal) == 6
    stopped = json.loads((out / "summary.json").read_text())
    assert stopped["partial"]["why"].startswith("stopped")  # the best so far, marked partial

    resumed = tuneup_run("probe", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("[from journal]") == 6
    probes = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    assert len(probes) > 6
    assert {p["config"]["train_path"] for p in probes} == {str(data.resolve())}
    session = json.loads((out / "session.json").read_text())
    assert session["base_config"]["train_path"] == str(data.resolve())
    assert json.loads((out / "summary.json").read_text())["partial"] is None  # finished now


def test_a_cli_session_resumed_in_the_app_reuses_every_probe(tmp_path: Path) -> None:
    from tuneup.tuning.results.journal import ResultsDir

    out = tmp_path / "cli run"
    done = tuneup_run("probe", "--trainer", "sim", "--stages", "workers,amp", "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = (out / "journal.jsonl").read_text().splitlines()
    (out / "journal.jsonl").write_text("\n".join(lines[:5]) + "\n")  # as if stopped there
    (out / "summary.json").unlink()
    base = json.loads((out / "session.json").read_text())["base_config"]

    app = _app(tmp_path, tmp_path / "unused")
    driver = app.resume_driver(ResultsDir(out))
    assert driver.session.base_values == base
    done_messages = _drive(driver)
    app.built.close()
    assert [m.reused for m in done_messages[:5]] == [True] * 5
    assert not any(m.reused for m in done_messages[5:])
    assert driver.summary is not None and (out / "summary.json").exists()


# ---- SLURM's time limit, transient failures ---------------------------------------


def test_an_allocation_too_short_for_the_baseline_is_said_before_anything_runs(
    tmp_path: Path,
) -> None:
    preset = tmp_path / "slow.yaml"
    preset.write_text(
        yaml.safe_dump(
            {
                "name": "slow",
                "train": {"amp_mode": "none"},
                "probe": {"stages": ["amp"], "budget": {"limit_s": 300}},
            }
        )
    )
    slurm = {
        **os.environ,
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": socket.gethostname(),
        "SLURM_JOB_END_TIME": str(int(time.time()) + 40),
    }
    out = tmp_path / "short"
    argv = ["probe", "--trainer", "sim", "--preset", str(preset), "--out", str(out)]
    done = tuneup_run(*argv, env=slurm)
    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    # 40 s at most, less the child's start (under half a second once its bytecode is cached:
    # "40 s" rounded), and the sim's first probe takes about 90 s
    assert re.search(r"the allocation has (3\d|40) s left, and the baseline's first probe", last)
    assert "a longer allocation" in last and "--budget" not in last  # a budget cannot help
    assert not (out / "journal.jsonl").exists()

    # an allocation the plan says the baseline fits: its first probe is not refused
    slurm["SLURM_JOB_END_TIME"] = str(int(time.time()) + 200)
    fits = tmp_path / "fits"
    done = tuneup_run(*argv[:-2], "--out", str(fits), env=slurm)
    assert done.returncode == 0, done.stderr
    assert "time left in the allocation" in done.stderr and (fits / "summary.json").exists()
    assert "keep the baseline" not in done.stdout  # nothing was measured against it
    assert "a longer allocation, or --resume in the next one, runs them" in done.stdout

    slurm["SLURM_JOB_END_TIME"] = str(int(time.time()) + 3600)
    assert tuneup_run(*argv[:-2], "--out", str(tmp_path / "long"), env=slurm).returncode == 0


@pytest.mark.slow
def test_a_worker_killed_once_in_the_baseline_is_retried_and_the_session_finishes(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "TUNEUP_WORKER_FAULT": f"kill:once={tmp_path / 'killed'}"}
    out = tmp_path / "run"
    done = tuneup_run("probe", "--stages", "tf32", "--out", str(out), "--json", env=env)
    assert done.returncode == 0, done.stderr
    journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    first = journal[0]
    assert first["stage"] == "baseline" and first["status"] == "crash"
    assert first["retried"] and first["transient"]
    assert first["reason"].startswith("worker killed by SIGKILL")
    assert [p["status"] for p in journal[1:3]] == ["ok", "ok"]
    assert (out / "summary.json").exists()


# ---- clear ends --------------------------------------------------------------------


def _bad_outs(tmp_path: Path) -> list[tuple[Path, str]]:
    a_file = tmp_path / "a file"
    a_file.write_text("not a folder")
    cases = [
        (a_file, "is a file, not a folder"),
        (a_file / "below", "is a file, not a folder"),
        (tmp_path / ("x" * 300), "the path is too long"),
    ]
    try:
        Path("/sys/tuneup-write-test").mkdir()
    except OSError:
        cases.append((Path("/sys/tuneup-results"), "give --out a place you can write to"))
    return cases


def test_bad_out_folders_are_one_line_errors_with_exit_2(tmp_path: Path) -> None:
    for out, words in _bad_outs(tmp_path):
        done = tuneup_run("probe", "--trainer", "sim", "--out", str(out))
        assert done.returncode == 2, (out, done.stderr)
        (line,) = done.stderr.strip().splitlines()[-1:]
        assert line.startswith("tuneup: error: cannot use ") and words in line, line
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_stages_naming_no_stage_and_a_monitor_without_terminal_are_usage_errors() -> None:
    done = tuneup_run("probe", "--trainer", "sim", "--stages", ",")
    assert done.returncode == 2 and "--stages names no stage" in done.stderr

    pytest.importorskip("textual")
    done = tuneup_run("monitor")  # stdout is a pipe here
    assert done.returncode == 2 and done.stdout == ""
    assert "--once" in done.stderr and "--json" in done.stderr
    assert "\x1b" not in done.stdout + done.stderr


def test_the_progress_counter_never_runs_past_its_total(tmp_path: Path) -> None:
    done = tuneup_run("probe", "--trainer", "sim", "--out", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    counters = [
        line.split("]")[0].lstrip("[").split("/~")
        for line in done.stderr.splitlines()
        if line.startswith("[")
    ]
    assert counters and all(int(n) <= int(total) for n, total in counters)
    # The total follows what the ladder's decisions take (it may shrink once stages decide
    # quickly); the last line's is the exact count.
    assert int(counters[-1][0]) == int(counters[-1][1])


@pytest.mark.slow
def test_a_time_budget_is_kept_on_the_real_cpu_smoke_ladder(tmp_path: Path) -> None:
    # the whole cpu-smoke ladder takes about a minute on 2 cores: 30 s cannot hold it
    out, budget = tmp_path / "budgeted", 30.0
    began = time.monotonic()
    done = tuneup_run(
        "probe", "--preset", "cpu-smoke", "--budget", "30s", "--out", str(out), timeout=400
    )
    wall = time.monotonic() - began
    probes = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    # Other processes loading this machine (measured, on the probes) slow every probe and
    # may end stages for the load (exit 4, which names it); nothing else excuses an end.
    loaded = any((p.get("contention") or {}).get("note") for p in probes)
    busy = done.returncode == 4 and loaded and "too busy to measure" in done.stderr
    assert done.returncode == 0 or busy, done.stderr
    assert "time budget 30 s:" in done.stderr  # the plan, said before the first probe
    summary = json.loads((out / "summary.json").read_text())
    said = json.dumps(summary["time_budget"]) + done.stderr[-2000:]
    assert summary["time_budget"]["limit_s"] == budget and summary["partial"] is None, said
    started = 0.0  # none started past the budget (a busy machine's may end past it)
    for probe in probes:
        assert started < budget, said
        started += probe["wall_s"]
    assert loaded or started <= budget, said
    # start-up, the synthetic box and the summary come on top of the probes; a loaded
    # machine's last probe may run long
    assert wall <= budget + (90 if loaded else 30), wall
    budgeted = summary["time_budget"]
    assert budgeted["left_out"] or budgeted["planned_out"] or budgeted["planned_fewer"], said


def test_a_session_loads_its_trainer_and_its_preset_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded once and passed on as values: a session asks the registry for its trainer
    and reads its preset's file one time each, however many parts read them."""
    import tuneup.preset.load as preset_load
    from tuneup.hardware.machine import machine_info
    from tuneup.trainers import adapters
    from tuneup.tuning.session.assembly import assemble_new
    from tuneup.tuning.session.request import SessionRequest

    loads = {"trainer": 0, "preset": 0}
    parse, load = preset_load.parse_preset, adapters._REGISTRY.load

    def parse_counted(*args: Any, **kwargs: Any) -> Any:
        loads["preset"] += 1
        return parse(*args, **kwargs)

    def load_counted(name: str) -> Any:
        loads["trainer"] += 1
        return load(name)

    monkeypatch.setattr(preset_load, "parse_preset", parse_counted)
    monkeypatch.setattr(adapters._REGISTRY, "load", load_counted)
    request = SessionRequest(preset="cpu-smoke", trainer="sim", stages=("workers", "amp"))
    built = assemble_new(request, machine_info(), out=tmp_path / "run")
    try:
        built.session.start(resume=False)
        built.session.run()
    finally:
        built.close()
    assert (tmp_path / "run" / "summary.json").is_file()
    assert loads == {"trainer": 1, "preset": 1}
