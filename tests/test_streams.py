"""tuneup under the standard streams a shell may hand it: a pipe whose reader went away
(`| head`), a closed stream (`2>&-`, `0<&-`), no terminal for the app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuneup.cluster.streams import PIPE_EXIT

TIMEOUT_S = 180  # a loaded 2-core machine: the sim ladder takes seconds, give it minutes


def tuneup(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuneup", *args]


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TUNEUP_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "120"}


def finished(out: Path) -> dict[str, object]:
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    return summary


def test_a_reader_gone_from_stdout_ends_quietly_after_the_whole_ladder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        tuneup("probe", "--trainer", "sim", "--out", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(tmp_path),
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # `| head -0`: the results have no reader
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == PIPE_EXIT, err
    assert "Traceback" not in err and "internal error" not in err and "Broken" not in err
    assert finished(out)["recommendation"]


def test_progress_and_results_in_one_pipe_closed_early_still_finish_the_ladder(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    read, write = os.pipe()
    proc = subprocess.Popen(
        tuneup("probe", "--trainer", "sim", "--out", str(out)),
        stdout=write,
        stderr=write,
        env=env(tmp_path),
    )
    os.close(write)
    with os.fdopen(read, "rb") as pipe:  # `2>&1 | head -3`
        for _ in range(3):
            pipe.readline()
    assert proc.wait(timeout=TIMEOUT_S) == PIPE_EXIT
    summary = finished(out)
    assert summary["recommendation"]
    journal = (out / "journal.jsonl").read_text().splitlines()
    assert any(json.loads(line)["stage"] == "confirm" for line in journal)


def test_closed_stdin_and_stderr_run_the_ladder_and_print_its_results(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = tuneup("probe", "--trainer", "sim", "--out", str(out))
    done = subprocess.run(
        ["bash", "-c", '"$@" 0<&- 2>&-', "bash", *command],
        capture_output=True,
        text=True,
        env=env(tmp_path),
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout
    assert "recommendation:" in done.stdout
    assert finished(out)["recommendation"]


def test_an_error_with_stderr_closed_still_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", "-c", '"$@" 2>&-', "bash", *tuneup("probe", "--preset", "no-such-preset")],
        capture_output=True,
        text=True,
        env=env(tmp_path),
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stdout


def test_the_app_without_a_terminal_says_so_and_exits_2(tmp_path: Path) -> None:
    pytest.importorskip("textual")
    pytest.importorskip("plotext")
    with (tmp_path / "screen.txt").open("w") as screen:
        done = subprocess.run(
            tuneup("tui", "--trainer", "sim"),
            stdin=subprocess.DEVNULL,
            stdout=screen,
            stderr=subprocess.PIPE,
            text=True,
            env=env(tmp_path),
            timeout=TIMEOUT_S,
        )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "needs a terminal" in line and "standard input" in line and "tuneup probe" in line
    assert (tmp_path / "screen.txt").read_text() == ""  # no escape codes drawn into the file


def test_the_app_drawing_into_a_file_says_so_and_exits_2(tmp_path: Path) -> None:
    pytest.importorskip("textual")
    pytest.importorskip("plotext")
    keys, _ = os.openpty()  # a terminal to read keys from, but the screen goes to a file
    with (tmp_path / "screen.txt").open("w") as screen:
        done = subprocess.run(
            tuneup("tui", "--trainer", "sim"),
            stdin=keys,
            stdout=subprocess.PIPE,
            stderr=screen,
            text=True,
            env=env(tmp_path),
            timeout=TIMEOUT_S,
        )
    assert done.returncode == 2
    said = (tmp_path / "screen.txt").read_text()
    assert "needs a terminal, and standard error is not one" in said
    assert "\x1b[" not in said
