"""`tuneup probe`'s output on the terminal it has: a row per decision, as wide as the
terminal down to 80 columns, a progress line that keeps its count and bar, and no
percentage against a baseline other processes slowed."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from tuneup.commands.progress import PlainReporter, RichReporter, probe_table
from tuneup.probe.describe import result_line
from tuneup.probe.types import Contention, ProbeResult, Status


def tuneup(*args: str, columns: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "tuneup", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def table_block(stdout: str, title: str) -> list[str]:
    """The lines of the table titled `title...`: its title to the first line after it that
    is neither blank nor one of its rows (rows start with a space: the table's edge)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].strip() and lines[i][0] != " "),
        len(lines),
    )
    return lines[start:end]


@pytest.fixture(scope="module")
def at_80(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict]:
    root = tmp_path_factory.mktemp("fits")
    done = tuneup(
        "probe", "--trainer", "sim", "--seed", "3", "--out", str(root / "run"), columns=80
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((root / "run" / "summary.json").read_text())
    return done, summary


def test_the_final_table_is_a_row_per_decision_within_80_columns(at_80) -> None:
    done, summary = at_80
    table = table_block(done.stdout, "probe ladder")
    assert max(len(line) for line in table) <= 80, "\n".join(table)
    rows = [line.split()[0] for line in table if line.startswith(" ") and line.split()]
    named = ["baseline", *(s["stage"] for s in summary["stages"]), "confirm"]
    assert [r for r in rows if r in named] == named  # each decision once, in order
    assert "probes" not in [x.strip() for x in done.stdout.splitlines()]  # only when asked
    # the header names the gain the decisions had to clear, as their own lines state it
    stated = [100 * (float(x) - 1) for x in re.findall(r"needed above (\d\.\d+)x", done.stdout)]
    shown = re.search(r"a gain had to clear ([\d.]+)(?:-([\d.]+))?%", table[0])
    assert stated and shown is not None, table[0]
    assert float(shown.group(1)) == pytest.approx(min(stated), abs=0.06)
    assert float(shown.group(2) or shown.group(1)) == pytest.approx(max(stated), abs=0.06)


def test_every_probe_with_probes_still_within_80_columns(tmp_path: Path) -> None:
    done = tuneup(
        "probe", "--trainer", "sim", "--seed", "3", "--out", str(tmp_path / "r"), "-v", columns=80
    )
    assert done.returncode == 0, done.stderr
    probes = table_block(done.stdout, "probes")
    assert max(len(line) for line in probes) <= 80
    journal = (tmp_path / "r" / "journal.jsonl").read_text().splitlines()
    assert sum(1 for line in probes if line.startswith(" baseline: ")) == sum(
        1 for line in journal if json.loads(line)["stage"] == "baseline"
    )
    assert max(len(line) for line in table_block(done.stdout, "probe ladder")) <= 80


def test_a_narrower_terminal_gets_a_narrower_table(tmp_path: Path) -> None:
    done = tuneup(
        "probe", "--trainer", "sim", "--seed", "3", "--out", str(tmp_path / "w"), columns=60
    )
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in table_block(done.stdout, "probe ladder")) <= 60


def test_the_progress_line_keeps_its_count_and_bar_at_80_columns() -> None:
    reporter = RichReporter()
    reporter.session_start(
        {"preset": "cpu-smoke", "trainer": "sim", "search": "staged", "stages": ["batch_size"]},
        164,
    )
    reporter.progress.stop()
    reporter.progress.update(reporter.ladder, completed=47)
    reporter.time_left(265.0, "measured here, with the pairs this session's decisions took")
    reporter.probe_start(
        "batch_size", "global_batch_size=16, lr_schedule={'scaling': 'sqrt', 'start_lr': 0.002}"
    )
    screen = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    screen.print(reporter.progress.make_tasks_table(reporter.progress.tasks))
    ladder, probe = screen.file.getvalue().splitlines()[:2]
    assert len(ladder) <= 80 and ladder.startswith("ladder (about 4 min")
    assert "47/164" in ladder and "━" in ladder  # the count and the bar survive
    assert "…" in ladder and "…" in probe  # the words gave way


def _probe(stage: str, sps: float, busy: bool = False, **variant: object) -> ProbeResult:
    contention = (
        Contention(other_cpus=1.8, usable_cpus=2, note="other processes used 90% of the CPUs")
        if busy
        else None
    )
    return ProbeResult(stage, dict(variant), {}, Status.OK, full_sps=sps, contention=contention)


def test_no_percentage_against_a_contended_baseline() -> None:
    busy_base = _probe("baseline", 4.0, busy=True)
    bf16 = _probe("amp", 99.0, amp_mode="bf16")
    assert "vs baseline" not in result_line(bf16, busy_base)  # +2375% would be a lie

    stream = io.StringIO()
    reporter = PlainReporter(stream)
    for probe in (busy_base, bf16, _probe("baseline", 90.0), _probe("jit", 99.0, jit="compile")):
        reporter.probe_done(probe, reused=False)
    lines = stream.getvalue().splitlines()
    assert "vs baseline" not in lines[0] and "vs baseline" not in lines[2]
    assert lines[1].startswith("tuneup: no vs-baseline figures while the baseline runs contended")
    assert "(+10.0% vs baseline)" in lines[4]  # against the first uncontended one

    out = io.StringIO()
    probe_table([busy_base, bf16], out, width=80)
    text = " ".join(out.getvalue().split())
    assert "%" not in text.split("vs baseline: none")[0].split("stage: variant")[1]
    assert "every baseline probe ran contended" in text
    # a contended row says so briefly; its note is not repeated row after row
    assert "contended, left out" in text and "90% of the CPUs" not in text
