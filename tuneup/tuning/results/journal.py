"""The results directory: session.json, journal.jsonl (one line per probe), summary.json.

The journal is appended and flushed to disk as each probe finishes, so an
interrupted session loses nothing it measured; each line carries its probe's
number. Before a resume appends to it, `repair` keeps every line of this session
it can read, drops a torn last line (power lost mid-write) and moves any other
line it cannot read, that holds an impossible figure or is not this session's (a
field of the wrong kind, an Infinity, an unknown stage, another session's probe:
tuning.journal_lines, tuning.journal_check), or repeats a probe journaled before
it, to `journal.damaged.jsonl` as {"line", "why", "text"}, puts lines back in the
order their probes ran, and says which and why: nothing is dropped silently, and
no probe whose line could be read is measured again. session.json and
summary.json are read within bounds (tuneup.bounded).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tuneup.bounded import OutOfBounds, read_json
from tuneup.errors import UsageError
from tuneup.paths import (
    StorageFault,
    is_storage_error,
    mend,
    output_folder,
    problem,
    storage_fault,
)
from tuneup.probe.types import ProbeResult
from tuneup.quoting import shell_word
from tuneup.tuning.results.journal_check import SessionFacts
from tuneup.tuning.results.journal_lines import (
    DAMAGED,
    PROBE,
    JournalRead,
    JournalRepair,
    read_journal,
)
from tuneup.tuning.results.summary import Summary, shape_problem

SESSION = "session.json"
JOURNAL = "journal.jsonl"
SUMMARY = "summary.json"


def quoted(path: Path | str) -> str:
    """A path as a shell reads it back, on one line: commands tuneup prints are pasted as
    they are, and a name with a newline must not split the line it is written in."""
    return shell_word(str(path))


def where_it_stands(folder: Path, where: str = "") -> list[str]:
    """What every front end says as it leaves a session: where its results are, and how to
    go on (export a finished one; resume a stopped one, in the app or from the command line,
    `where` it may: "in the next allocation"). The last words are a command to paste."""
    summary_file, here = folder / SUMMARY, quoted(folder)
    how = (
        f"{' ' + where if where else ''} in the app (tuneup tui --results {here}, then r) "
        f"or with: tuneup probe --resume {here}"
    )
    again = f"finished probes are in {quoted(folder / JOURNAL)}; continue{how}"
    if not summary_file.is_file():
        if not _journaled(folder / JOURNAL):
            return [_nothing_yet(folder, how)]
        return [f"no answer yet: the ladder stopped before its baseline was measured; {again}"]
    try:
        summary = ResultsDir(folder).summary()
        partial, unmeasured = summary.partial, [stage for stage, _why in summary.unmeasured]
    except (OSError, ValueError, UsageError):
        partial, unmeasured = None, []
    if partial is None:
        done = [f"results: {here} (export with: {export_hint(folder)})"]
        if unmeasured:  # the answer leaves them out: the same two routes measure them again
            done.append(
                f"not measured: {', '.join(unmeasured)}; measure them again in the app "
                f"(tuneup tui --results {here}, then r) or with: "
                f"tuneup probe --resume {here} --retry-failed"
            )
        return done
    return [
        f"the best configuration so far is in {quoted(summary_file)} (partial; export it "
        f"with: {export_hint(folder)})",
        again,
    ]


def export_hint(folder: Path) -> str:
    """The export command a hint names for the session in `folder`: in the first format its
    trainer exports (a `command` session's own command; tuneup's yaml otherwise)."""
    try:
        recorded = ResultsDir(folder).session().get("export_format")
    except (OSError, ValueError, UsageError):
        recorded = None
    fmt = recorded if isinstance(recorded, str) and recorded.isidentifier() else "yaml"
    return f"tuneup export {quoted(folder)} --format {fmt}"


def _journaled(journal: Path) -> bool:
    """Whether the journal holds a probe (a line that reached the disk)."""
    try:
        with journal.open("rb") as lines:
            return any(line.strip() for line in lines)
    except OSError:
        return False


def _nothing_yet(folder: Path, how: str) -> str:
    """Stopped before any probe finished: no journal to point to."""
    said = (
        "no answer yet: the ladder stopped before its first probe finished, so nothing is journaled"
    )
    if (folder / SESSION).is_file():  # its setup is kept: a resume starts it where it was
        return f"{said}; continue{how}"
    return f"{said} and nothing was written; run the same command again"


class SessionLost(UsageError):
    """session.json is damaged or gone, and the journal holds probes: a resume given the
    preset rebuilds it from them (nothing measured is lost)."""

    def __init__(self, folder: Path, why: str, probes: int) -> None:
        self.folder = folder
        self.why = why  # "damaged" or "gone"
        self.probes = probes
        super().__init__(
            f"{folder / SESSION} is {why}, and {probes} probe(s) are journaled beside it: "
            f"continue with `tuneup probe --resume {quoted(folder)} --preset NAME` (the "
            "preset it ran; add --trainer and --stages if it ran others): session.json is "
            "rebuilt from the journal"
        )


class SummaryDamaged(UsageError):
    """summary.json cannot be read: `tuneup export` rebuilds it from the journal, and so
    does a resume as it goes on."""

    def __init__(self, folder: Path, why: str) -> None:
        self.folder = folder
        self.why = why
        super().__init__(
            f"{folder / SUMMARY} is damaged ({why}): rebuild it from the journal with "
            f"`{export_hint(folder)}` or `tuneup probe --resume {quoted(folder)}`"
        )


def folder_problem(path: Path, exc: OSError) -> str:
    """One line for a results folder that cannot be made or written, with the way out."""
    return problem(path, exc, "--out", "the results folder")


class ResultsDir:
    """One session's folder; every write is whole-file atomic or an append+fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._next_probe: int | None = None  # read from the journal at the first append

    def prepare(self) -> None:
        """Make the folder (and its parents); a folder tuneup cannot use is a UsageError."""
        output_folder(self.path, "--out", "the results folder")

    def has_session(self) -> bool:
        try:
            return (self.path / SESSION).is_file()
        except OSError:  # a name too long, say: prepare() says what is wrong
            return False

    def create(self, session: dict[str, Any]) -> None:
        self.prepare()
        try:
            self._write_json(SESSION, session)
        except OSError as exc:
            raise UsageError(folder_problem(self.path, exc)) from None

    @contextlib.contextmanager
    def storing(
        self, name: str, what: str, *, before: Callable[[], None] | None = None
    ) -> Iterator[None]:
        """Around a write of this folder's `name`: a storage failure (full, read-only)
        becomes its `fault` line, after `before` tidies what the write left."""
        try:
            yield
        except OSError as exc:
            if not is_storage_error(exc):
                raise
            if before is not None:
                before()
            raise self.fault(exc, name, what) from None

    def fault(self, exc: OSError, name: str, what: str) -> StorageFault:
        """The one line for a write of this folder's `name` that failed (storage_fault): the
        probes journaled so far are kept, and how to continue once the cause is fixed."""
        here = quoted(self.path)
        count = len(self.results())
        kept = (
            f"the {count} probe(s) journaled before are kept in {quoted(self.path / JOURNAL)}"
            if count
            else "nothing had been measured yet"
        )
        remedy = mend(exc, here)
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            remedy += " (or copy it somewhere writable and resume the copy)"
        return storage_fault(
            self.path / name,
            exc,
            what,
            kept=kept,
            then=f"{remedy}, then continue with: tuneup probe --resume {here}",
        )

    def session(self) -> dict[str, Any]:
        """session.json, read.

        Raises:
            SessionLost: it is damaged or gone while the journal holds probes (a resume
                rebuilds it: `rebuild_session`).
            UsageError: the folder is not a results folder.
        """
        file = self.path / SESSION
        if not file.is_file():
            if not self.path.exists():
                why = "no such folder"
            elif not self.path.is_dir():
                why = "it is a file"
            else:
                journaled = len(self.results())
                if journaled:
                    raise SessionLost(self.path, "gone", journaled)
                why = f"no {SESSION} in it"
            raise UsageError(
                f"{self.path} is not a tuneup results folder ({why}): give a folder "
                "`tuneup probe` or the app wrote (its --out)"
            )
        try:
            data = read_json(file)  # within bounds: a line nested 200,000 deep is refused
        except ValueError:  # not JSON, or a bound crossed (OutOfBounds)
            data = None
        if not isinstance(data, dict):
            raise SessionLost(self.path, "damaged", len(self.results()))
        return data

    def has_journal(self) -> bool:
        """Whether probes are journaled here (a session's, whether or not session.json is)."""
        try:
            return bool(self.results())
        except OSError:
            return False

    def rebuild_session(self, session: dict[str, Any]) -> str:
        """Write a session.json rebuilt from the journal, keeping a damaged one beside it;
        returns where the damaged copy went ("" when there was none)."""
        file, kept = self.path / SESSION, ""
        with self.storing(SESSION, "the rebuilt session record"):
            if file.is_file():
                damaged = self.path / f"{SESSION}.damaged"
                os.replace(file, damaged)
                kept = str(damaged)
            self._write_json(SESSION, session)
        return kept

    def update_session(self, changes: dict[str, Any]) -> None:
        """Rewrite session.json with `changes` (a resume's new setting), whole or not at all."""
        with self.storing(SESSION, "the session record"):
            self._write_json(SESSION, {**self.session(), **changes})

    def append(self, result: ProbeResult) -> None:
        """Journal one finished probe: one line, its probe's number first (the next after
        the journal's), flushed and synced before returning."""
        if self._next_probe is None:
            self._next_probe = self._read().next_probe
        entry = {PROBE: self._next_probe, **_finite(result.to_journal())}
        line = json.dumps(entry, allow_nan=False, default=_plain) + "\n"
        with (
            self.storing(JOURNAL, "the journal", before=self._cut_torn_tail),
            (self.path / JOURNAL).open("a", encoding="utf-8") as file,
        ):
            file.write(line)
            file.flush()
            os.fsync(file.fileno())
        self._next_probe += 1

    def _cut_torn_tail(self) -> None:
        """After a failed append: drop a part of the line that did reach the disk, so the
        journal stays whole lines (best effort: `repair` drops it on a resume otherwise)."""
        file = self.path / JOURNAL
        with contextlib.suppress(OSError), file.open("rb+") as raw:
            data = raw.read()
            if data and not data.endswith(b"\n"):
                raw.truncate(data.rfind(b"\n") + 1)

    def results(self) -> list[ProbeResult]:
        """Every journaled probe, in the order the probes ran; a line that cannot be
        replayed, or repeats a probe, is left out (see `repair`).

        The one reader of journal.jsonl (tuning.journal_lines): each line within bounds,
        through `ProbeResult.from_journal` and the session's checks.
        """
        return self._read().results

    def _read(self) -> JournalRead:
        return read_journal(self.path / JOURNAL, self._facts())

    def repair(self) -> JournalRepair:
        """Make the journal whole before appending to it, and say what changed.

        Every readable line of this session is kept (a whole last line missing its
        newline gets one), in the order its probes ran; a torn last line is dropped; a
        line elsewhere that cannot be read, holds an impossible figure or is not this
        session's (tuning.journal_lines), and a line repeating a probe journaled before
        it, are moved to DAMAGED with their reasons. Dropped and moved lines are copied
        there first.
        """
        file = self.path / JOURNAL
        read = self._read()
        # a last line without its newline that cannot be read was cut short as it was written
        torn = [line for line in read.damaged if not line.whole]
        damaged = [line for line in read.damaged if line.whole]
        moved = [(x.number, "cut short while being written", x.text) for x in torn]
        moved += [(x.number, x.why or "", x.text) for x in damaged]
        moved += [(r.line.number, r.why, r.line.text) for r in read.repeats]
        bad = [{"line": n, "why": why, "text": text} for n, why, text in sorted(moved)]
        report = JournalRepair(
            kept=len(read.kept),
            torn=bool(torn),
            damaged=tuple((x.number, x.why or "") for x in damaged),
            newline_added=any(not line.whole for line in read.kept),
            repeated=tuple((r.line.number, r.line.probe or 0) for r in read.repeats),
            reordered=tuple((x.number, x.probe or 0) for x in read.reordered),
        )
        if bad:
            with (self.path / DAMAGED).open("a", encoding="utf-8") as out:
                out.write("".join(json.dumps(entry) + "\n" for entry in bad))
        if bad or report.newline_added or report.reordered:
            tmp = file.with_name(f".{JOURNAL}.tmp")
            tmp.write_text("".join(line.text + "\n" for line in read.kept), encoding="utf-8")
            os.replace(tmp, file)
        return report

    def _facts(self) -> SessionFacts | None:
        """What a journal line must agree with, from session.json; None where it cannot be
        read (a line is then checked for its own fields alone)."""
        try:
            data = read_json(self.path / SESSION)
        except (OSError, ValueError):
            return None
        return SessionFacts.from_session(data) if isinstance(data, dict) else None

    def write_summary(self, summary: dict[str, Any]) -> None:
        with self.storing(SUMMARY, "the summary"):
            self._write_json(SUMMARY, summary)

    def summary(self) -> Summary:
        """The finished session's summary.json, typed (tuneup.tuning.results.summary).

        Raises:
            SummaryDamaged: it is not a summary tuneup wrote (cut short, overwritten, out of
                bounds, JSON of another shape: `summary.shape_problem`): it can be
                rebuilt from the journal (tuneup.tuning.session.rebuild).
            UsageError: there is none (the session did not finish).
        """
        file = self.path / SUMMARY
        if not file.is_file():
            raise UsageError(
                f"{self.path} has no {SUMMARY}: the session did not finish "
                f"(resume it with `tuneup probe --resume {quoted(self.path)}`)"
            )
        try:
            data = read_json(file)
        except json.JSONDecodeError as exc:
            raise SummaryDamaged(self.path, f"not JSON: {exc.msg}, line {exc.lineno}") from None
        except OutOfBounds as exc:  # "it holds Infinity, which is no JSON number"
            raise SummaryDamaged(self.path, f"it {exc}") from None
        except ValueError as exc:  # an integer of thousands of digits
            raise SummaryDamaged(self.path, f"not JSON: {exc}") from None
        why = shape_problem(data)
        if why is not None:  # JSON, but not a summary tuneup wrote: the journal rebuilds it
            raise SummaryDamaged(self.path, why)
        return Summary.from_document(data)

    def set_aside_summary(self) -> Path:
        """Move a damaged summary.json aside (to be written again); where it went."""
        kept = self.path / f"{SUMMARY}.damaged"
        with self.storing(SUMMARY, "the damaged summary's copy"):
            os.replace(self.path / SUMMARY, kept)
        return kept

    def _write_json(self, name: str, data: dict[str, Any]) -> None:
        target = self.path / name
        tmp = target.with_name(f".{name}.tmp")
        text = json.dumps(_finite(data), indent=2, allow_nan=False, default=_plain)
        try:
            tmp.write_text(text + "\n", encoding="utf-8")
            os.replace(tmp, target)
        except OSError:
            with contextlib.suppress(OSError):  # a full disk leaves no half-written temporary
                tmp.unlink(missing_ok=True)
            raise


def _finite(value: Any) -> Any:
    """NaN and infinities become null: strict JSON, readable by any tool."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """JSON for the few non-JSON values results carry (enums, paths, tuples)."""
    if hasattr(value, "value"):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"cannot journal {type(value).__name__}")
