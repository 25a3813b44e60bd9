"""Garbage from the environment or a preset: one line, exit 2, fast and small (issue 49).

Each case runs the CLI in a child process under an address-space cap, and reads that
child's own CPU time and peak memory (os.wait4), so a busy CI machine cannot make it
flaky and no other child of the test run counts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_bounded import alias_bomb
from tuneup.cluster.job import JobEnv, read_job_env
from tuneup.errors import UsageError
from tuneup.preset.load import parse_preset
from tuneup.tuning.session.assembly import default_folder
from tuneup.tuning.session.time_fit import job_warnings

CAP_BYTES = 512 * 2**20  # the child's address space: a bomb fails inside it, never the machine
MOST_RSS_MB = 200
MOST_CPU_S = 1.0
# the commands that read a preset: the session's, and the one that shows it
COMMANDS = {"probe": ["probe", "--preset"], "presets show": ["presets", "show"]}


@dataclasses.dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str
    cpu_s: float
    peak_mb: float


# tuneup runs as the grandchild of a small launcher that caps its memory, forks, execs
# and reports the grandchild's own usage: a child forked (or vforked) from this test
# process would count the test's whole memory in its peak.
LAUNCHER = """
import json, os, resource, sys
report, cap = sys.argv[1], int(sys.argv[2])
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    os.execv(sys.executable, [sys.executable, "-m", "tuneup", *sys.argv[3:]])
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as file:
    json.dump([usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024], file)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_tuneup(tmp_path: Path, args: list[str], **env: str) -> Ran:
    """`python -m tuneup ARGS` in `tmp_path`, outside any SLURM job but for `env`."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    environ.update(TUNEUP_CONFIG_DIR=str(tmp_path / "cfg"), **env)
    report = tmp_path / "usage.json"
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(report), str(CAP_BYTES), *args],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    cpu_s, peak_mb = json.loads(report.read_text())  # KiB on Linux
    return Ran(done.returncode, done.stdout, done.stderr, cpu_s, peak_mb)


def assert_one_line_exit_2(ran: Ran, *words: str) -> None:
    lines = ran.stderr.strip().splitlines()
    assert ran.code == 2, ran.stderr
    assert len(lines) == 1 and lines[0].startswith("tuneup: error: "), ran.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert ran.cpu_s < MOST_CPU_S, ran
    assert ran.peak_mb < MOST_RSS_MB, ran


@pytest.fixture
def bomb(tmp_path: Path) -> Path:
    path = tmp_path / "bomb.yaml"
    path.write_text("name: bomb\n" + alias_bomb())
    return path


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    return path


def test_an_end_time_of_nan_is_one_line_exit_2_fast_and_small(tmp_path: Path) -> None:
    ran = run_tuneup(
        tmp_path, ["probe", "--preset", "cpu-smoke"], SLURM_JOB_ID="7", SLURM_JOB_END_TIME="nan"
    )
    assert_one_line_exit_2(ran, "SLURM_JOB_END_TIME='nan'", "--budget")
    assert not (tmp_path / "tuneup-results").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_an_alias_bomb_preset_is_one_line_exit_2_fast_and_small(
    tmp_path: Path, bomb: Path, command: str
) -> None:
    args = [*COMMANDS[command], str(bomb)]
    assert_one_line_exit_2(run_tuneup(tmp_path, args), str(bomb), "alias bomb")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_binary_preset_is_one_line_exit_2_fast_and_small(
    tmp_path: Path, binary: Path, command: str
) -> None:
    args = [*COMMANDS[command], str(binary)]
    assert_one_line_exit_2(run_tuneup(tmp_path, args), str(binary), "is a binary file, not text")


def test_bad_user_presets_are_listed_broken_and_the_rest_still_list(
    tmp_path: Path, bomb: Path, binary: Path
) -> None:
    folder = tmp_path / "cfg" / "presets"
    folder.mkdir(parents=True)
    bomb.rename(folder / "bomb.yaml")
    binary.rename(folder / "binary.yaml")
    (folder / "fine.yaml").write_text("name: fine\ndescription: a good one\n")

    ran = run_tuneup(tmp_path, ["presets", "list"])

    assert ran.code == 0 and ran.stderr == ""
    rows = {line.split()[0]: line for line in ran.stdout.splitlines()}
    assert "does not load: preset file" in rows["bomb"] and "alias bomb" in rows["bomb"]
    assert rows["binary"].endswith("is a binary file, not text")
    assert rows["fine"].endswith("a good one") and "cpu-smoke" in rows
    # the bundled presets load their stages (about a second); the bad ones add nothing
    assert ran.cpu_s < 5 * MOST_CPU_S and ran.peak_mb < MOST_RSS_MB


# --- the allocation's end: needed by the ladder's time fit, so refused there ----------------


def job(**env: str) -> JobEnv:
    return read_job_env({"SLURM_JOB_ID": "7", **env}, affinity=range(2), hostname="n1", now=1e9)


def test_an_unusable_end_time_without_a_budget_stops_the_session_in_one_line() -> None:
    with pytest.raises(UsageError) as raised:
        job_warnings(job(SLURM_JOB_END_TIME="-1"), None)
    said = str(raised.value)
    assert said.startswith("SLURM_JOB_END_TIME='-1' is not an end time in epoch seconds")
    assert "--budget" in said and "\n" not in said


def test_with_a_budget_an_unusable_end_time_is_a_warning_and_so_is_any_ignored_value() -> None:
    assert job_warnings(job(SLURM_JOB_END_TIME="abc", SLURM_NTASKS="-3"), 600.0) == [
        "warning: SLURM_NTASKS='-3' is not a count of tasks from 1 to 10,000,000: ignored",
        "warning: SLURM_JOB_END_TIME='abc' is not an end time in epoch seconds, from a day ago "
        "to ten years ahead: ignored",
    ]
    assert job_warnings(job(SLURM_JOB_END_TIME=str(1e9 + 3600)), None) == []


def test_an_end_time_just_past_is_none_left_never_a_negative_figure(tmp_path: Path) -> None:
    """SLURM's grace time: an end a few minutes past is kept, and said as none left."""
    ended = int(time.time()) - 600
    ran = run_tuneup(
        tmp_path,
        ["probe", "--preset", "cpu-smoke", "--trainer", "sim"],
        SLURM_JOB_ID="7",
        SLURM_JOB_END_TIME=str(ended),
    )
    assert ran.code == 2
    assert "the allocation has 0 s left" in ran.stderr and "-" not in ran.stderr.split("has")[1]


# --- the results folder: always inside its root -------------------------------------------


@pytest.mark.parametrize("name", ["../../../x", "..", "/etc/cron.d/x", "a\\b", "x\x1b[2J"])
def test_a_preset_name_never_climbs_out_of_the_results_root(name: str) -> None:
    folder = default_folder(name, lambda: 0.0, root=Path("tuneup-results"))
    assert folder.parent == Path("tuneup-results")
    assert ".." not in folder.parts and "\x1b" not in folder.name


def test_a_preset_naming_itself_a_path_is_refused_in_one_problem() -> None:
    with pytest.raises(UsageError, match="name: must be a plain name") as raised:
        parse_preset({"name": "../../../x"}, "x.yaml")
    assert "has 1 problem" in str(raised.value)
    assert parse_preset({"name": "my preset v1.2"}, "y.yaml").name == "my preset v1.2"
