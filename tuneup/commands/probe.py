"""`tuneup probe`: run a preset's ladder headless and recommend a configuration."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from tuneup.cluster.signals import StopSignals, signal_name
from tuneup.commands.progress import PlainReporter, RichReporter, probe_table, stage_table
from tuneup.errors import ExitCode
from tuneup.hardware.machine import machine_info
from tuneup.paths import StorageFault
from tuneup.tuning.results.journal import export_hint, quoted, where_it_stands
from tuneup.tuning.results.profiles import profile_lines
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.results.verdicts import confirmation_lines, stage_summary
from tuneup.tuning.session.assembly import assemble_new
from tuneup.tuning.session.control import (
    DataGone,
    OutOfTime,
    Reporter,
    SessionInterrupted,
    SilentReporter,
)
from tuneup.tuning.session.request import SessionRequest
from tuneup.tuning.session.resume import assemble_resume


def run_probe_command(
    request: SessionRequest,
    *,
    out: Path | None,
    resume: Path | None,
    as_json: bool,
    probes: bool = False,
) -> int:
    """Run the ladder `request` asks for (in `out`, or continuing `resume`), and say what
    it recommends (`probes`: every probe too, not only each decision); returns the exit
    status."""
    reporter = _reporter(as_json)
    machine = machine_info()
    with StopSignals() as stop:
        if resume is not None:
            built = assemble_resume(
                resume, request, machine, reporter=reporter, on_event=reporter.event
            )
        else:
            built = assemble_new(
                request, machine, out=out, reporter=reporter, on_event=reporter.event
            )
        folder = built.results.path
        try:
            for line in ([] if as_json else built.notes) + built.alerts:
                print(f"tuneup: {line}", file=sys.stderr)
            stop.arm(lambda: built.interrupt(f"stopped by {signal_name(stop.signum or 2)}"))
            built.session.start(resume=built.resumed)
            outcome = built.session.run()
        except OutOfTime as exc:
            # the allocation's end: a resume in the next one; your budget's: a resume with more
            yours = exc.where != "in the allocation"
            *first, last = where_it_stands(folder, "" if yours else "in the next allocation")
            for line in first:
                _say(f"tuneup: stopped; {line}")
            _say(f"tuneup: {exc}; {last}")
            return ExitCode.OUT_OF_TIME
        except DataGone as exc:
            for line in where_it_stands(folder)[:-1]:
                _say(f"tuneup: stopped; {line}")
            _say(f"tuneup: error: {exc}")
            return ExitCode.USAGE
        except SessionInterrupted:
            for line in where_it_stands(folder):
                _say(f"tuneup: interrupted; {line}")
            return stop.exit_code
        except StorageFault:
            raise  # its one line says what is kept and how to go on
        except Exception:
            # the error follows in its own line; first, where what did run is kept
            if (folder / "journal.jsonl").is_file():
                _say(f"tuneup: what ran is journaled in {quoted(folder / 'journal.jsonl')}")
            raise
        finally:
            built.close()
            with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
                reporter.close()

    summary = built.results.summary()
    gone = summary.document.get("unmeasured")
    if as_json:
        document = {
            "results_dir": str(folder),
            "summary": dict(summary.document),
            "probes": [p.to_journal() for p in outcome.probes],
        }
        print(json.dumps(document, default=str))
        return ExitCode.UNMEASURED if gone else ExitCode.OK
    _print_outcome(outcome, summary, folder, probes)
    if gone:
        _say(f"tuneup: {unmeasured_remedy(gone, folder)}")
        return ExitCode.UNMEASURED
    return ExitCode.OK


def unmeasured_remedy(gone: list[dict[str, str]], folder: Path) -> str:
    """What to do about the stages a ladder could not measure: the cause first, then the
    resume that measures them again."""
    names = ", ".join(u.get("stage", "?") for u in gone)
    whys = [u.get("why", "") for u in gone]
    if all("contended" in why or "too busy" in why for why in whys):
        load = next((m.group(0) for w in whys if (m := _LOAD.search(w))), "")
        said = f" ({load})" if load else ""
        return (
            f"the answer leaves out {names}: the machine was too busy to measure them{said}; "
            "measure them later, or on a quiet node, with: tuneup probe --resume "
            f"{quoted(folder)} --retry-failed (a --budget bounds the time it may take)"
        )
    return (
        f"the answer leaves out {names}: they could not be measured; fix what made their "
        "probes fail (their reasons are above), then measure them with: tuneup probe "
        f"--resume {quoted(folder)} --retry-failed"
    )


_LOAD = re.compile(r"other processes used [^;]*")


def _say(line: str) -> None:
    """A last line on stderr; after SIGHUP the terminal may be gone (EIO), and that is fine."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def _reporter(as_json: bool) -> Reporter:
    if as_json:
        return SilentReporter()
    if sys.stderr.isatty():
        return RichReporter()
    return PlainReporter()


def _print_outcome(outcome: Any, summary: Summary, folder: Path, probes: bool) -> None:
    for note in summary.notes:
        print(f"note: {note}")
    if probes:
        probe_table(outcome.probes)
    stage_table(outcome, needed=summary.needed_text())
    for line in stage_summary(outcome):
        print(line)
    for line in confirmation_lines(outcome):
        print(line)
    for moment, verdict in (("before", summary.before), ("after", summary.after)):
        if verdict is not None and verdict.sentence:
            print(f"{moment}: {verdict.sentence}")
    for line in profile_lines(summary.document.get("profile")):
        print(line)
    scaling = summary.scaling
    if scaling is not None:
        for line in scaling.lines or (
            [f"scaling estimate: {scaling.error}"] if scaling.error else []
        ):
            print(line)
    batch = summary.recommendation.batch_note
    if batch:
        print(f"batch: {batch}")
    headline = summary.recommendation.headline
    if headline:
        print(headline)

    print(f"results: {folder}  (export with: {export_hint(folder)})")
