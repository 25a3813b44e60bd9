"""Journal lines are validated on read: their fields' kinds, their stage, their session. A
bad line is moved aside with its reason and said; a forged line cannot decide a stage on
one zero-width pair; a damaged summary.json is rebuilt from the journal, and said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuneup.cli import main
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.tuning.results.journal import DAMAGED, JOURNAL, SESSION, SUMMARY, ResultsDir
from tuneup.tuning.search.paired import Verdict, judge
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.staged import staged_search

LADDER = ["probe", "--trainer", "sim", "--stages", "amp"]


@pytest.fixture
def stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A sim ladder stopped after its baseline and its stage's first probes (no summary)."""
    out = tmp_path / "run"
    assert main([*LADDER, "--out", str(out)]) == 0
    capsys.readouterr()
    lines = (out / JOURNAL).read_text().splitlines()
    (out / JOURNAL).write_text("\n".join(lines[:4]) + "\n")
    (out / SUMMARY).unlink()
    return out


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / JOURNAL).read_text().splitlines()]


def _insert(out: Path, index: int, line: dict) -> None:
    lines = (out / JOURNAL).read_text().splitlines()
    lines.insert(index, json.dumps(line))
    (out / JOURNAL).write_text("\n".join(lines) + "\n")


def _resume(out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["probe", "--resume", str(out)]) == 0
    return capsys.readouterr().err


def _moved(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / DAMAGED).read_text().splitlines()]


def test_a_line_with_a_field_of_the_wrong_kind_is_moved_aside_with_its_reason(
    stopped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = {**_lines(stopped)[2], "full_sps": "fast", "synthetic_sps": "fast"}
    _insert(stopped, 3, wrong)

    err = _resume(stopped, capsys)

    (said,) = [x for x in err.splitlines() if "journal: line 4" in x]
    assert "a field of the wrong kind" in said and "sps is the text 'fast', not a number" in said
    (moved,) = _moved(stopped)
    assert moved["line"] == 4 and json.loads(moved["text"]) == wrong and "fast" in moved["why"]
    assert all(isinstance(x["synthetic_sps"], (float, type(None))) for x in _lines(stopped))


def test_a_line_of_an_unknown_stage_is_moved_aside(
    stopped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _insert(stopped, 2, {**_lines(stopped)[2], "stage": "warp_drive"})

    err = _resume(stopped, capsys)

    (said,) = [x for x in err.splitlines() if "journal: line 3" in x]
    assert "stage 'warp_drive' is none of its stages: baseline, amp, confirm" in said
    assert [m["line"] for m in _moved(stopped)] == [3]
    assert "warp_drive" not in (stopped / JOURNAL).read_text()


def test_a_line_copied_from_another_session_is_moved_aside(
    tmp_path: Path, stopped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    assert main([*LADDER, "--out", str(other), "--seed", "3"]) == 0
    capsys.readouterr()
    copied = _lines(other)[2]
    _insert(stopped, 4, copied)
    # a line older than the session id, from a session of another model
    foreign = {**_lines(stopped)[2], "session": "", "config": {**copied["config"], "width": 16}}
    _insert(stopped, 5, foreign)

    err = _resume(stopped, capsys)

    assert "journal: line 5 is another session's (its id is " in err
    assert "journal: line 6 is another session's (width is 16 where this session's base" in err
    assert [m["line"] for m in _moved(stopped)] == [5, 6]


def test_one_pair_whose_noise_nothing_measured_decides_nothing() -> None:
    forged = judge([(100.0, 527.0)], sigma=0.0, needed=0.02)
    assert forged.verdict is Verdict.MORE and "5.27-5.27" not in forged.why
    assert "its noise not measured yet" in forged.why
    assert judge([(100.0, 20.0)], sigma=0.0, needed=0.02).verdict is Verdict.MORE
    measured = judge([(100.0, 527.0)], sigma=0.02, needed=0.02)
    assert measured.verdict is Verdict.ADOPT  # a real 5x on a measured noise still decides


def test_a_stage_is_not_decided_on_one_pair_of_single_trial_probes() -> None:
    """The tester's forged line: probes of one trial each and a noise nothing measured (a
    command that prints one figure, or a forged journal line): a 5.27x candidate used to be
    adopted on one pair, 'likely 5.27-5.27x'; now it takes a second pair."""
    calls: list[str] = []

    def measure(stage: str, cand: Candidate, values: dict) -> ProbeResult:
        calls.append(cand.label)
        sps = 527.0 if values["data_loader_config"] == "lowmem" else 100.0
        return ProbeResult(
            stage, dict(cand.values), dict(values), Status.OK, full_sps=sps, full_sps_trials=[sps]
        )

    plan = StagePlan("data", [Candidate("lowmem", {"data_loader_config": "lowmem"})])
    outcome = staged_search({"data_loader_config": "inmem"}, [plan], measure, confirm_pairs=0)

    (decision,) = outcome.stage_decisions
    assert decision.evidence is not None and decision.evidence.pairs >= 2
    assert calls.count("lowmem") >= 2


def test_export_rebuilds_a_damaged_summary_from_the_journal_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main([*LADDER, "--out", str(out)]) == 0
    capsys.readouterr()
    whole = json.loads((out / SUMMARY).read_text())
    (out / SUMMARY).write_text((out / SUMMARY).read_text()[:100])

    assert main(["export", str(out), "--format", "yaml"]) == 0

    captured = capsys.readouterr()
    (note,) = [x for x in captured.err.splitlines() if SUMMARY in x]
    assert note.startswith("tuneup: note: summary.json was damaged (not JSON")
    assert "rebuilt it from the" in note and "summary.json.damaged" in note
    assert json.loads((out / SUMMARY).read_text()) == whole  # every decision as it was
    assert "amp_mode: bf16" in captured.out or "amp_mode" in captured.out
    assert (out / "summary.json.damaged").read_text() == json.dumps(whole, indent=2)[:100]


def test_a_resume_says_it_sets_a_damaged_summary_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main([*LADDER, "--out", str(out)]) == 0
    capsys.readouterr()
    (out / SUMMARY).write_text("[1, 2")

    err = _resume(out, capsys)

    assert "summary.json was damaged (not JSON" in err and "written again" in err
    assert ResultsDir(out).summary().recommendation.recorded
    assert json.loads((out / SESSION).read_text())["id"]


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ({"preset": "cpu-smoke", "stages": []}, "it holds no recommended values"),
        ({"recommendation": {"values": {}}, "stages": "amp"}, "'stages' is text, not a list"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_export_rebuilds_a_summary_of_the_wrong_shape_from_the_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: object, why: str
) -> None:
    """Valid JSON that is no summary got 'run the session again' where the journal
    rebuilds it."""
    out = tmp_path / "run"
    assert main([*LADDER, "--out", str(out)]) == 0
    capsys.readouterr()
    whole = json.loads((out / SUMMARY).read_text())
    (out / SUMMARY).write_text(json.dumps(document))

    assert main(["export", str(out), "--format", "yaml"]) == 0

    captured = capsys.readouterr()
    (note,) = [x for x in captured.err.splitlines() if SUMMARY in x]
    assert note.startswith(f"tuneup: note: summary.json was damaged ({why}): rebuilt it from")
    assert "run the session again" not in captured.err
    assert json.loads((out / SUMMARY).read_text()) == whole
    assert "amp_mode" in captured.out


def test_a_check_that_ended_ok_without_a_full_figure_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stage line said 'it ended ok; did not run ok: bf16: ok' of an adopted
    candidate's check that ran ok but measured no FULL figure (its rate journaled as null:
    a trial timed at 0 s)."""
    out = tmp_path / "run"
    assert main([*LADDER, "--out", str(out)]) == 0
    capsys.readouterr()
    lines = _lines(out)
    check = next(
        i
        for i, x in enumerate(lines)
        if x["stage"] == "amp" and x["variant"] and "full" in x["plan"]["phases"]
    )
    lines[check] = {**lines[check], "full_sps": None, "full_sps_trials": []}
    (out / JOURNAL).write_text("".join(json.dumps(x) + "\n" for x in lines[: check + 1]))
    (out / SUMMARY).unlink()

    assert main(["probe", "--resume", str(out)]) == 0

    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("amp ")]
    assert "its check of every phase did not hold: it measured no FULL figure" in line
    assert line.endswith("did not run ok: bf16: measured no FULL figure")
    assert "ended ok" not in line and "bf16: ok" not in line
