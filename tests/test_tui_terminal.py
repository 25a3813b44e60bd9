"""`tuneup tui --trainer sim` in a real terminal: tmux, keys by send-keys, capture-pane."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
# GPU nodes' offline installs lack textual and plotext: the app cannot open there.
pytest.importorskip("textual")
pytest.importorskip("plotext")


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


def _wait_for(session: str, text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-p", "-t", session)
        if text in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared; the screen was:\n{screen}")


def test_whole_flow_in_tmux_ends_on_the_recommendation(tmp_path: Path) -> None:
    session = f"tuneup-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "run"
    env = f"TUNEUP_CACHE_DIR={tmp_path / 'cache'} TERM=xterm-256color"
    command = f"env {env} {sys.executable} -m tuneup tui --trainer sim --out {out}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command],
        check=True,
        env={**os.environ, "TMUX": ""},
    )
    try:
        _wait_for(session, "Start")  # the setup screen
        _tmux("send-keys", "-t", session, "C-s")
        screen = _wait_for(session, "what each stage contributed")
        summary = json.loads((out / "summary.json").read_text())
        headline = summary["recommendation"]["headline"].removeprefix("recommendation: ")
        assert headline[:40] in " ".join(screen.split()), screen
        _tmux("send-keys", "-t", session, "e")
        _wait_for(session, "tuned.yaml")
        assert (out / "tuned.yaml").is_file() and (out / "summary.json").is_file()
        _tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 10
        while session in _tmux("ls") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert session not in _tmux("ls"), "q did not quit the app"
    finally:
        _tmux("kill-session", "-t", session)


@pytest.mark.slow
def test_quitting_mid_ladder_leaves_the_resume_command_in_the_terminal(tmp_path: Path) -> None:
    session = f"tuneup-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "run"
    env = f"TUNEUP_CACHE_DIR={tmp_path / 'cache'} TERM=xterm-256color"
    app = f"env {env} {sys.executable} -m tuneup tui --preset cpu-smoke --out {out}"
    # the pane outlives the app, so what it printed after the screen closed can be read
    command = f"sh -c '{app}; echo EXITED $?; sleep 60'"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command],
        check=True,
        env={**os.environ, "TMUX": ""},
    )
    try:
        _wait_for(session, "Start")
        _tmux("send-keys", "-t", session, "C-s")
        deadline = time.monotonic() + 120
        while not (out / "journal.jsonl").is_file() and time.monotonic() < deadline:
            time.sleep(0.2)  # a real ladder, its first probe journaled
        _tmux("send-keys", "-t", session, "q")
        _wait_for(session, "Stop the session?")
        _tmux("send-keys", "-t", session, "y")
        _wait_for(session, "EXITED", timeout=60)
        said = " ".join(_tmux("capture-pane", "-p", "-J", "-t", session).split())  # unwrapped
        assert "EXITED 0" in said
        assert f"tuneup probe --resume {out}" in said and f"tuneup tui --results {out}" in said
    finally:
        _tmux("kill-session", "-t", session)
