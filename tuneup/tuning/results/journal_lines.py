"""journal.jsonl read within bounds, line by line, each line parsed once and held against
the lines before it.

A line longer than any tuneup writes (MAX_LINE) is read past, never parsed; the others
go through tuneup.bounded (strict JSON: no NaN or infinity, nested no deeper than a
journal line), `ProbeResult.from_journal` (its fields and their kinds) and
tuning.journal_check (an impossible figure, another session's probe). Each line this
tuneup writes carries its probe's number (PROBE), counted from 1 in the order the
probes ran: a number seen before is a repeat, whose first line is kept (a journal
copied into itself replays as it was), and lines whose numbers fall are put back in
that order (a shuffled journal replays as it ran). A line of an older tuneup carries no
number and stays where it stands. Reading finds them (`read_journal`);
`ResultsDir.repair` moves them to DAMAGED or back in order, and says so once
(`JournalRepair.notes`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneup.bounded import OutOfBounds, loads
from tuneup.probe.types import ProbeResult
from tuneup.tuning.results.journal_check import SessionFacts, impossible_figure

PROBE = "probe"
"""A journal line's key for its probe's number in the session (1, 2, ...)."""
DAMAGED = "journal.damaged.jsonl"
"""Where the lines a repair takes out of the journal go, each with why."""

# A line tuneup writes is a few KiB, a profiled probe's tens; far longer is damage, read
# past without being held in memory whole (its start is kept for the damaged file).
MAX_LINE = 4 * 2**20
KEPT_OF_LONG_LINE = 4096
_CHUNK = 2**20


Parsed = tuple[ProbeResult | None, int | None, str | None]
"""A line read: its probe (None: it cannot be replayed), its number, why it cannot."""


@dataclass(frozen=True)
class Line:
    """One line of the journal as read.

    Attributes:
        number: its line number in the file, from 1.
        text: the line as it was, without its newline (the start of one over MAX_LINE).
        whole: it ended with its newline (only a last line may not).
        result: the probe it holds; None when it cannot be replayed (`why`).
        probe: its probe's number; None for an older tuneup's line (or an unreadable one).
        why: why it cannot be replayed ("could not be read (...)", "holds ...",
            "is another session's (...)"); None when it can.
    """

    number: int
    text: str
    whole: bool = True
    result: ProbeResult | None = None
    probe: int | None = None
    why: str | None = None


@dataclass(frozen=True)
class Repeat:
    """A line whose probe number an earlier line (`first`) holds: the first is kept."""

    line: Line
    first: Line

    @property
    def why(self) -> str:
        number, first = self.line.probe, self.first.number
        if self.line.text.strip() == self.first.text.strip():
            return f"repeats probe {number} of line {first}"
        return f"holds probe {number}'s number, as line {first} does (the first is kept)"


@dataclass(frozen=True)
class JournalRead:
    """A journal as read: what replays, in the order its probes ran, and what does not.

    Attributes:
        kept: the lines that replay, in the order their probes ran.
        damaged: the lines that cannot, each with its `why` (a torn last line too).
        repeats: lines repeating a probe an earlier line holds (not replayed).
        reordered: kept lines that stood after a probe that ran later than theirs.
        next_probe: the number the next probe journaled takes.
    """

    kept: tuple[Line, ...] = ()
    damaged: tuple[Line, ...] = ()
    repeats: tuple[Repeat, ...] = ()
    reordered: tuple[Line, ...] = ()
    next_probe: int = 1

    @property
    def results(self) -> list[ProbeResult]:
        return [line.result for line in self.kept if line.result is not None]


@dataclass(frozen=True)
class JournalRepair:
    """What `ResultsDir.repair` did to a journal before a resume."""

    kept: int = 0
    torn: bool = False  # the last line was cut short: dropped (a copy is in DAMAGED)
    damaged: tuple[tuple[int, str], ...] = ()  # (line number, why) moved to DAMAGED
    newline_added: bool = False  # a whole last line lacked its newline: kept
    # (line number, probe number) of lines repeating a probe journaled before: moved
    repeated: tuple[tuple[int, int], ...] = ()
    # (line number, probe number) of lines that stood after a later probe: put back
    reordered: tuple[tuple[int, int], ...] = ()

    def notes(self, folder: Path) -> list[str]:
        """One line per change (one for all the repeats, one for the order), for the user."""
        lines = []
        if self.torn:
            lines.append(
                f"journal: dropped its last line, cut short while being written (its probe "
                f"will be measured again; a copy is in {folder / DAMAGED})"
            )
        for number, why in self.damaged:
            lines.append(
                f"journal: line {number} {why}: moved to {folder / DAMAGED}; its probe "
                "will be measured again"
            )
        if self.repeated:
            verb = "repeat probes" if len(self.repeated) > 1 else "repeats a probe"
            lines.append(
                f"journal: {_which(self.repeated)} {verb} journaled before: moved to "
                f"{folder / DAMAGED} (the first line of each probe is kept: nothing is "
                "measured again)"
            )
        if self.reordered:
            later = "later probes" if len(self.reordered) > 1 else "a later probe"
            lines.append(
                f"journal: {_which(self.reordered)} stood after {later}: put back in the "
                "order the probes ran"
            )
        return lines


def _which(found: tuple[tuple[int, int], ...]) -> str:
    """Which lines, as runs ("line 7 (probe 3)", "lines 40-78 (probes 1-39)"), not one by one."""
    lines, probes = spans([n for n, _ in found]), spans([p for _, p in found])
    if len(found) == 1:
        return f"line {lines} (probe {probes})"
    return f"lines {lines} (probes {probes})"


def spans(numbers: list[int]) -> str:
    """Numbers as runs: [1, 2, 3, 7, 9, 10] -> "1-3, 7, 9-10"."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def read_journal(path: Path, facts: SessionFacts | None) -> JournalRead:
    """Every line of the journal at `path` read and checked (`facts`: what a line must
    agree with; None: its own fields alone). No journal reads as an empty one."""
    if not path.is_file():
        return JournalRead()
    lines = list(_lines(path, facts))
    readable = [line for line in lines if line.why is None]
    kept, repeats, reordered = in_order(readable)
    numbers = [line.probe for line in lines if line.probe is not None]
    return JournalRead(
        kept=tuple(kept),
        damaged=tuple(line for line in lines if line.why is not None),
        repeats=tuple(repeats),
        reordered=tuple(reordered),
        next_probe=max([len(lines), *numbers]) + 1,
    )


def in_order(lines: list[Line]) -> tuple[list[Line], list[Repeat], list[Line]]:
    """Readable lines, in file order, as they replay: (kept, in the order their probes ran;
    repeats of a probe an earlier line holds; kept lines that stood out of that order).
    A line without a number (an older tuneup's) keeps its place."""
    seen: dict[int, Line] = {}
    kept: list[Line] = []
    repeats: list[Repeat] = []
    for line in lines:
        if line.probe is not None:
            if line.probe in seen:
                repeats.append(Repeat(line, seen[line.probe]))
                continue
            seen[line.probe] = line
        kept.append(line)
    reordered, highest = [], 0
    for line in kept:
        if line.probe is None:
            continue
        if line.probe < highest:
            reordered.append(line)
        highest = max(highest, line.probe)
    if reordered:
        ran = iter(sorted((x for x in kept if x.probe is not None), key=lambda x: x.probe or 0))
        kept = [next(ran) if line.probe is not None else line for line in kept]
    return kept, repeats, reordered


def read_line(raw: str, facts: SessionFacts | None) -> Parsed:
    """A journal line as (result, its probe number, why it cannot be one of this session's
    probes): "could not be read (...)", "holds ...", "is another session's (...)"."""
    try:
        data = loads(raw)
    except OutOfBounds as exc:  # "holds Infinity, which is no JSON number", "nests ..."
        return None, None, str(exc)
    except json.JSONDecodeError as exc:
        return None, None, f"could not be read (not JSON: {exc.msg} at column {exc.colno})"
    except ValueError as exc:  # an integer of thousands of digits
        return None, None, f"could not be read (not JSON: {exc})"
    if not isinstance(data, dict):
        return None, None, "could not be read (not a JSON object)"
    probe, why = _probe_number(data)
    if why:
        return None, None, why
    try:
        result = ProbeResult.from_journal(data)
    except KeyError as exc:
        return None, probe, f"could not be read (no {exc.args[0]!r} field)"
    except (TypeError, ValueError) as exc:
        return None, probe, f"could not be read (a field of the wrong kind: {exc})"
    why = impossible_figure(result) or (facts.problem(result) if facts is not None else None)
    return (None, probe, why) if why else (result, probe, None)


def _probe_number(data: dict[str, Any]) -> tuple[int | None, str | None]:
    """The line's probe number (None: an older tuneup's line), or why it is none."""
    if PROBE not in data:
        return None, None
    value = data[PROBE]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value, None
    return None, f"could not be read (its probe number is {json.dumps(value)[:40]}, not 1 or more)"


def _lines(path: Path, facts: SessionFacts | None) -> Iterator[Line]:
    """Each non-blank line of the file, read and checked; one over MAX_LINE is read past."""
    with path.open("rb") as file:
        number = 0
        while True:
            chunk = file.readline(MAX_LINE + 1)
            if not chunk:
                return
            number += 1
            if len(chunk) > MAX_LINE and not chunk.endswith(b"\n"):
                yield _long_line(number, chunk, file)
                continue
            whole = chunk.endswith(b"\n")
            text = chunk.decode("utf-8", errors="replace").removesuffix("\n")
            if not text.strip():
                continue
            result, probe, why = read_line(text, facts)
            yield Line(number, text, whole, result, probe, why)


def _long_line(number: int, start: bytes, file: Any) -> Line:
    """A line over MAX_LINE: read to its end in chunks, its start kept, never parsed."""
    size, chunk = len(start), start
    while chunk and not chunk.endswith(b"\n"):
        chunk = file.readline(_CHUNK)
        size += len(chunk)
    whole = chunk.endswith(b"\n")
    size -= 1 if whole else 0
    return Line(
        number,
        start[:KEPT_OF_LONG_LINE].decode("utf-8", errors="replace"),
        whole,
        why=f"is {size:,} bytes long, over the {MAX_LINE:,} a journal line may be",
    )
