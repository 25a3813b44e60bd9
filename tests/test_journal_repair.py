"""A journal made whole before a resume: nothing dropped silently, nothing readable run again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tuneup.tuning.results.journal import DAMAGED, JOURNAL, ResultsDir


def line(stage: str, sps: float) -> str:
    return json.dumps(
        {"stage": stage, "variant": {}, "config": {"x": sps}, "status": "ok", "full_sps": sps}
    )


def test_a_torn_last_line_is_dropped_and_said(tmp_path: Path) -> None:
    (tmp_path / JOURNAL).write_text(line("baseline", 1.0) + "\n" + line("baseline", 2.0)[:25])

    report = ResultsDir(tmp_path).repair()

    assert (report.kept, report.torn, report.damaged) == (1, True, ())
    assert (tmp_path / JOURNAL).read_text() == line("baseline", 1.0) + "\n"
    (note,) = report.notes(tmp_path)
    assert "dropped its last line, cut short" in note and DAMAGED in note
    (moved,) = [json.loads(x) for x in (tmp_path / DAMAGED).read_text().splitlines()]
    assert moved == {
        "line": 2,
        "why": "cut short while being written",
        "text": line("baseline", 2.0)[:25],
    }


def test_a_damaged_middle_line_is_moved_aside_and_the_rest_kept_in_order(tmp_path: Path) -> None:
    lines = [line("baseline", 1.0), "{not json", line("amp", 3.0), '{"stage": "amp"}']
    (tmp_path / JOURNAL).write_text("\n".join(lines) + "\n")

    folder = ResultsDir(tmp_path)
    report = folder.repair()

    assert [r.full_sps for r in folder.results()] == [1.0, 3.0]
    assert [n for n, _why in report.damaged] == [2, 4]
    notes = report.notes(tmp_path)
    assert "line 2 could not be read (not JSON" in notes[0]
    assert "line 4 could not be read (no 'status' field)" in notes[1]
    moved = [json.loads(x) for x in (tmp_path / DAMAGED).read_text().splitlines()]
    assert [m["text"] for m in moved] == [lines[1], lines[3]]  # as they were, with why
    assert [m["line"] for m in moved] == [2, 4] and "no 'status' field" in moved[1]["why"]


def test_a_whole_last_line_without_its_newline_is_kept(tmp_path: Path) -> None:
    (tmp_path / JOURNAL).write_text(line("baseline", 1.0) + "\n" + line("baseline", 2.0))

    folder = ResultsDir(tmp_path)
    report = folder.repair()

    assert report.notes(tmp_path) == [] and report.newline_added
    assert [r.full_sps for r in folder.results()] == [1.0, 2.0]
    assert (tmp_path / JOURNAL).read_text().endswith("\n")
    assert not (tmp_path / DAMAGED).exists()


def test_resume_says_what_it_repaired_and_reruns_only_the_unreadable_probes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    run = [sys.executable, "-m", "tuneup", "probe", "--trainer", "sim", "--stages", "amp"]
    first = subprocess.run([*run, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    journal = (out / JOURNAL).read_text().splitlines()
    damaged = [*journal[:2], "garbage", *journal[3:6]]  # probe 3 unreadable; 7.. not yet run
    (out / JOURNAL).write_text("\n".join(damaged) + "\n" + journal[6][:10])
    (out / "summary.json").unlink()

    again = subprocess.run(
        [sys.executable, "-m", "tuneup", "probe", "--resume", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert again.returncode == 0, again.stderr
    assert "journal: line 3 could not be read (not JSON" in again.stderr
    assert "journal: dropped its last line" in again.stderr
    reused = [x for x in again.stderr.splitlines() if x.endswith("[from journal]")]
    assert len(reused) == 5  # every line it could read, and only those
