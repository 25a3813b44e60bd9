"""The results directory: session.json, journal.jsonl (one line per probe), summary.json.

The journal is appended and flushed to disk as each probe finishes, so an
interrupted session loses nothing it measured; a torn last line (power lost
mid-write) is skipped on reading.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.types import ProbeResult

SESSION = "session.json"
JOURNAL = "journal.jsonl"
SUMMARY = "summary.json"


class ResultsDir:
    """One session's folder; every write is whole-file atomic or an append+fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def create(self, session: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_json(SESSION, session)

    def session(self) -> dict[str, Any]:
        file = self.path / SESSION
        if not file.is_file():
            raise UsageError(f"{self.path} is not a tuneup results folder (no {SESSION})")
        try:
            return json.loads(file.read_text())
        except json.JSONDecodeError:
            raise UsageError(f"{file} is damaged: start a new session with --out") from None

    def append(self, result: ProbeResult) -> None:
        """Journal one finished probe: one line, flushed and synced before returning."""
        line = json.dumps(_finite(result.to_journal()), allow_nan=False, default=_plain) + "\n"
        with (self.path / JOURNAL).open("a", encoding="utf-8") as file:
            file.write(line)
            file.flush()
            os.fsync(file.fileno())

    def results(self) -> list[ProbeResult]:
        """Every journaled probe, in order; an unreadable (torn) line is skipped."""
        file = self.path / JOURNAL
        if not file.is_file():
            return []
        found = []
        for raw in file.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                found.append(ProbeResult.from_journal(json.loads(raw)))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
        return found

    def repair(self) -> None:
        """Drop a torn last line so appends after a resume start on a clean line."""
        file = self.path / JOURNAL
        if not file.is_file():
            return
        text = file.read_text(encoding="utf-8", errors="replace")
        if text and not text.endswith("\n"):
            kept = text[: text.rfind("\n") + 1]
            file.write_text(kept, encoding="utf-8")

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_json(SUMMARY, summary)

    def summary(self) -> dict[str, Any]:
        file = self.path / SUMMARY
        if not file.is_file():
            raise UsageError(
                f"{self.path} has no {SUMMARY}: the session did not finish "
                f"(resume it with `tuneup probe --resume {self.path}`)"
            )
        return json.loads(file.read_text())

    def _write_json(self, name: str, data: dict[str, Any]) -> None:
        target = self.path / name
        tmp = target.with_name(f".{name}.tmp")
        text = json.dumps(_finite(data), indent=2, allow_nan=False, default=_plain)
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, target)


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
