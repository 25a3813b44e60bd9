"""summary.json rebuilt from the journal alone, as a resume would write it, but without a probe:
what `tuneup export` does with a damaged summary instead of failing on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneup.hardware.types import MachineInfo
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.types import Candidate, ProbeResult
from tuneup.tuning.results.journal import JOURNAL, SUMMARY, ResultsDir, SummaryDamaged, quoted
from tuneup.tuning.session.control import DataGone, SessionInterrupted
from tuneup.tuning.session.engine import Engine
from tuneup.tuning.session.request import SessionRequest
from tuneup.tuning.session.resume import assemble_resume

JOURNAL_ENDS = "the journal holds no more probes"


class _JournalOnly(ProbeBackend):
    """Measures nothing: a probe the journal does not hold ends the replay (partial)."""

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        raise SessionInterrupted


def _journal_only(*_args: Any, **_kwargs: Any) -> Engine:
    return Engine(backend=_JournalOnly())


def readable_summary(folder: Path, machine: Callable[[], MachineInfo]) -> list[str]:
    """Make sure `folder`'s summary.json reads: a damaged one is set aside and rebuilt from
    the journal (`rebuild_summary`). Returns what to tell the user ([] when it read).

    Raises:
        UsageError: there is no summary (the session did not finish), or the folder is
            busy or not a results folder.
    """
    results = ResultsDir(folder)
    results.session()  # a folder that is not a session's says so first
    try:
        results.summary()
    except SummaryDamaged as damaged:
        return rebuild_summary(folder, machine(), damaged.why)
    return []


def rebuild_summary(folder: Path, machine: MachineInfo, why: str) -> list[str]:
    """Set the damaged summary.json aside and write it again by replaying the journal
    through the session (every decision as the ladder made it; a probe the journal lacks
    ends the replay with a partial summary); what was done, one line each."""
    results = ResultsDir(folder)
    # the resume sets the damaged file aside once the folder is its own (its lock taken)
    built = assemble_resume(
        folder,
        SessionRequest(accept_changes=True),
        machine,
        engine_factory=_journal_only,
        replay_only=True,
    )
    built.session.stop.why = f"stopped: {JOURNAL_ENDS}"
    try:
        built.session.start(resume=True)
        built.session.run()
    except (SessionInterrupted, DataGone):
        pass  # a partial summary, where the baseline was journaled
    finally:
        built.close()
    count = len(results.results())
    done = (
        f"rebuilt it from the {count} probe(s) of {quoted(folder / JOURNAL)}"
        if (folder / SUMMARY).is_file()
        else f"the journal's {count} probe(s) hold no baseline to rebuild it from"
    )
    kept = folder / f"{SUMMARY}.damaged"
    return [
        *(line for line in built.alerts if not line.startswith(f"{SUMMARY} was damaged")),
        f"{SUMMARY} was damaged ({why}): {done} (the damaged file is kept as {quoted(kept)})",
    ]
