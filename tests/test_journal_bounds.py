"""Journal values a probe cannot have measured decide nothing: a number that is not finite
or out of its range, a line nested past any tuneup writes, a probe journaled twice or out
of order. Each is found as the journal is read, moved aside or put back, and said once on
the resume; the answer is the one the journal held before."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import pytest

from tuneup.cli import main
from tuneup.probe.events import ResultEvent, TrialEvent, parse_event
from tuneup.probe.types import ProbeResult, Status
from tuneup.tuning.results.journal import DAMAGED, JOURNAL, SESSION, SUMMARY, ResultsDir
from tuneup.tuning.results.journal_check import impossible_figure
from tuneup.tuning.results.journal_lines import MAX_LINE

LADDER = ["probe", "--trainer", "sim", "--stages", "amp"]
DEEP = "[" * 200_000 + "]" * 200_000


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished sim ladder (its journal and summary), copied by each test that damages it."""
    out = tmp_path_factory.mktemp("ladder") / "run"
    assert main([*LADDER, "--out", str(out)]) == 0
    return out


def _copy(finished: Path, to: Path) -> Path:
    to.mkdir()
    for name in (SESSION, JOURNAL, SUMMARY):
        (to / name).write_bytes((finished / name).read_bytes())
    return to


def _resume(out: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    (out / SUMMARY).unlink(missing_ok=True)
    assert main(["probe", "--resume", str(out)]) == 0
    return [x for x in capsys.readouterr().err.splitlines() if "journal:" in x]


def _answer(out: Path) -> tuple[object, object]:
    summary = json.loads((out / SUMMARY).read_text())
    return summary["recommendation"]["values"], [s["reason"] for s in summary["stages"]]


def _moved(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / DAMAGED).read_text().splitlines()]


def test_each_journal_line_carries_its_probe_number_in_the_order_the_probes_ran(
    finished: Path,
) -> None:
    lines = [json.loads(x) for x in (finished / JOURNAL).read_text().splitlines()]
    assert [line["probe"] for line in lines] == list(range(1, len(lines) + 1))


def test_an_infinity_rate_is_refused_as_damaged_and_decides_nothing(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tester's line: a rate written as JSON's Infinity (tuneup writes null) decided a
    stage on one pair ('+inf% paired, likely inf-infx')."""
    out = _copy(finished, tmp_path / "run")
    lines = (out / JOURNAL).read_text().splitlines()
    forged = json.loads(lines[2])
    assert forged["stage"] == "amp" and forged["synthetic_sps"]
    lines[2] = lines[2].replace(
        f'"synthetic_sps": {json.dumps(forged["synthetic_sps"])}', '"synthetic_sps": Infinity'
    )
    (out / JOURNAL).write_text("\n".join(lines) + "\n")

    said = _resume(out, capsys)

    assert len(said) == 1 and "journal: line 3 holds Infinity, which is no JSON number" in said[0]
    assert "moved to" in said[0] and "its probe will be measured again" in said[0]
    (moved,) = _moved(out)
    assert moved["line"] == 3 and "Infinity" in moved["text"]
    assert "Infinity" not in (out / JOURNAL).read_text()
    assert not any("inf" in reason for reason in _answer(out)[1])
    assert _resume(out, capsys) == []  # said once: the journal is whole now


def test_a_line_nested_200000_deep_is_refused_in_milliseconds(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(finished, tmp_path / "run")
    lines = (out / JOURNAL).read_text().splitlines()
    (out / JOURNAL).write_text("\n".join([*lines[:3], DEEP, *lines[3:]]) + "\n")

    started = time.perf_counter()
    results = ResultsDir(out).results()
    assert time.perf_counter() - started < 1.0
    assert len(results) == len(lines)

    said = _resume(out, capsys)
    assert said == [
        f"tuneup: journal: line 4 nests 200000 levels deep, over the 64 allowed: moved to "
        f"{out / DAMAGED}; its probe will be measured again"
    ]
    assert _answer(out) == _answer(finished)


def test_a_duplicated_journal_is_said_once_and_gives_the_same_answer(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(finished, tmp_path / "run")
    lines = (out / JOURNAL).read_text().splitlines()
    (out / JOURNAL).write_text("\n".join(lines + lines) + "\n")
    count = len(lines)

    said = _resume(out, capsys)

    assert said == [
        f"tuneup: journal: lines {count + 1}-{2 * count} (probes 1-{count}) repeat probes "
        f"journaled before: moved to {out / DAMAGED} (the first line of each probe is kept: "
        "nothing is measured again)"
    ]
    assert (out / JOURNAL).read_text().splitlines() == lines
    assert [m["why"] for m in _moved(out)][:2] == [
        "repeats probe 1 of line 1",
        "repeats probe 2 of line 2",
    ]
    assert _answer(out) == _answer(finished)


def test_a_shuffled_journal_is_said_and_replayed_in_the_order_its_probes_ran(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(finished, tmp_path / "run")
    lines = (out / JOURNAL).read_text().splitlines()
    shuffled = lines[:]
    random.Random(4).shuffle(shuffled)
    (out / JOURNAL).write_text("\n".join(shuffled) + "\n")

    said = _resume(out, capsys)

    assert (
        len(said) == 1
        and "stood after later probes: put back in the order the probes ran" in said[0]
    )
    assert (out / JOURNAL).read_text().splitlines() == lines
    assert _answer(out) == _answer(finished)


def test_one_line_out_of_order_is_named(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(finished, tmp_path / "run")
    lines = (out / JOURNAL).read_text().splitlines()
    swapped = [lines[0], lines[2], lines[1], *lines[3:]]
    (out / JOURNAL).write_text("\n".join(swapped) + "\n")

    said = _resume(out, capsys)

    assert said == [
        "tuneup: journal: line 3 (probe 2) stood after a later probe: put back in the order "
        "the probes ran"
    ]


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("full_sps", -3.0, "full_sps is -3.0; samples/s are 0 to 1,000,000,000,000"),
        ("synthetic_sps", 1e300, "synthetic_sps is 1e+300; samples/s are 0 to 1,000,000,000,000"),
        ("wall_s", -1.0, "wall_s is -1.0; seconds are 0 to 10,000,000"),
        ("gpu_util_mean", 250.0, "gpu_util_mean is 250.0; percentages are 0 to 100"),
        ("ranks", 0, "ranks is 0; rank counts are 1 or more"),
        ("far_trials", -2, "far_trials is -2; figures are 0 or more"),
    ],
)
def test_a_figure_no_probe_can_measure_makes_its_line_damaged(
    field: str, value: float, why: str
) -> None:
    line = ProbeResult("amp", {}, {}, Status.OK, **{"full_sps": 10.0, field: value})
    assert impossible_figure(line) == f"holds an impossible figure ({why})"
    assert impossible_figure(ProbeResult("amp", {}, {}, Status.OK, full_sps=10.0)) is None


def test_a_trial_rate_out_of_range_is_named_and_a_null_one_passes(tmp_path: Path) -> None:
    good = ProbeResult("baseline", {}, {}, Status.OK, full_sps=5.0, full_sps_trials=[5.0, 5.1])
    (tmp_path / JOURNAL).write_text(
        json.dumps({**good.to_journal(), "full_sps_trials": [5.0, None, 5.1]})
        + "\n"
        + json.dumps({**good.to_journal(), "full_sps_trials": [5.0, -5.1]})
        + "\n"
    )

    report = ResultsDir(tmp_path).repair()

    assert report.damaged == (
        (
            2,
            "holds an impossible figure (full_sps_trials is -5.1; samples/s are 0 to "
            "1,000,000,000,000)",
        ),
    )


def test_a_probe_number_that_is_none_is_damage(tmp_path: Path) -> None:
    good = ProbeResult("baseline", {}, {}, Status.OK, full_sps=5.0).to_journal()
    (tmp_path / JOURNAL).write_text(json.dumps({"probe": "one", **good}) + "\n")

    (why,) = [why for _n, why in ResultsDir(tmp_path).repair().damaged]

    assert why == 'could not be read (its probe number is "one", not 1 or more)'


def test_a_resume_numbers_its_probes_on_from_the_journals(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    older = ProbeResult("baseline", {}, {}, Status.OK, full_sps=5.0).to_journal()
    (tmp_path / JOURNAL).write_text(
        json.dumps(older) + "\n" + json.dumps({"probe": 7, **older}) + "\n"
    )

    results.append(ProbeResult("baseline", {}, {}, Status.OK, full_sps=6.0))
    ResultsDir(tmp_path).append(ProbeResult("baseline", {}, {}, Status.OK, full_sps=7.0))

    numbers = [json.loads(x).get("probe") for x in (tmp_path / JOURNAL).read_text().splitlines()]
    assert numbers == [None, 7, 8, 9]
    assert [r.full_sps for r in results.results()] == [5.0, 5.0, 6.0, 7.0]


def test_session_and_summary_nested_deep_or_infinite_read_as_damaged(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy(finished, tmp_path / "run")
    (out / SUMMARY).write_text('{"recommendation": {"values": {}}, "margin_pct": Infinity}')

    assert main(["export", str(out), "--format", "yaml"]) == 0
    (note,) = [x for x in capsys.readouterr().err.splitlines() if SUMMARY in x]
    assert "summary.json was damaged (it holds Infinity, which is no JSON number)" in note
    assert "rebuilt it from the" in note

    (out / SESSION).write_text(DEEP)
    assert main(["export", str(out), "--format", "yaml"]) == 2
    assert "session.json is damaged, and " in capsys.readouterr().err


def test_a_workers_infinite_rate_is_no_figure_and_its_diverged_loss_stays_nan() -> None:
    result = parse_event(
        '{"event": "result", "full_sps": Infinity, "full_sps_trials": [4.0, '
        'Infinity], "warmup_s": NaN, "loss_end": NaN, "losses": [1.0, Infinity]}'
    )
    assert isinstance(result, ResultEvent)
    assert result.full_sps is None and result.warmup_s is None
    assert result.full_sps_trials[0] == 4.0 and math.isnan(result.full_sps_trials[1])
    assert math.isnan(result.loss_end or 0.0) and result.losses[1] == math.inf
    trial = parse_event(
        '{"event": "trial", "phase": "full", "index": 1, "samples_per_s": Infinity}'
    )
    assert isinstance(trial, TrialEvent) and trial.samples_per_s is None
    assert parse_event('{"event": "trial", "x": ' + DEEP + "}") is None  # no RecursionError


def test_a_line_longer_than_any_tuneup_writes_is_read_past_not_parsed(tmp_path: Path) -> None:
    good = json.dumps(ProbeResult("baseline", {}, {}, Status.OK, full_sps=5.0).to_journal())
    huge = '{"stage": "' + "x" * (MAX_LINE + 10) + '"}'
    (tmp_path / JOURNAL).write_text(f"{good}\n{huge}\n{good}\n")

    report = ResultsDir(tmp_path).repair()

    ((number, why),) = report.damaged
    assert (
        number == 2
        and why == f"is {len(huge):,} bytes long, over the {MAX_LINE:,} a journal line may be"
    )
    (moved,) = [json.loads(x) for x in (tmp_path / DAMAGED).read_text().splitlines()]
    assert moved["text"] == huge[: len(moved["text"])] and len(moved["text"]) < 10_000
    assert [r.full_sps for r in ResultsDir(tmp_path).results()] == [5.0, 5.0]
