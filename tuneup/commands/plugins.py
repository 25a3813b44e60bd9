"""`tuneup plugins list`: every stage and trainer adapter, where it comes from, whether it loads."""

from __future__ import annotations

import sys
from typing import TextIO

from tuneup.errors import ExitCode
from tuneup.plugin_registry import PluginInfo, checkout_unregistered
from tuneup.probe.stages import describe_stages, scan_stages
from tuneup.trainers.adapters import describe_trainers, scan_trainers

_HEADERS = ("KIND", "NAME", "ORIGIN", "STATUS")


def plugin_rows() -> list[PluginInfo]:
    """Stages then trainers, each sorted by name; imports every plugin to learn its status."""

    return describe_stages() + describe_trainers()


def plugin_warnings() -> list[str]:
    """One line per broken stage or trainer plugin (they are skipped wherever tuneup scans),
    and per built-in one a source checkout declares but has not registered yet."""

    return scan_stages()[1] + scan_trainers()[1] + checkout_unregistered()


def warn_broken_plugins(stream: TextIO | None = None) -> list[str]:
    """Print each broken or unregistered plugin as a warning on stderr; the lines, for a
    screen that says them too.

    For commands that offer every plugin (the app's setup screen lists the stages): the
    user hears about a broken one even without naming it (a plugin that fails is
    otherwise silently unusable). Imports every plugin; `tuneup probe` says only those
    its ladder met (`stage_plans.plugin_alerts`), so that a listing ladder imports no other.
    """
    out = sys.stderr if stream is None else stream
    warnings = plugin_warnings()
    for line in warnings:
        print(f"tuneup: warning: {line}", file=out)
    return warnings


def format_table(rows: list[PluginInfo]) -> list[str]:
    """Aligned columns: kind, name, origin, status; the status column is never cut."""
    cells = [(r.kind, r.name, r.origin, r.status) for r in rows]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(_HEADERS[:3])]
    lines = []
    for row in [_HEADERS, *cells]:
        head = "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        lines.append(f"{head}  {row[3]}")
    return lines


def run_plugins_list(stream: TextIO | None = None) -> int:
    """Print the table on stdout, and a one-line count of broken plugins on stderr."""
    out = sys.stdout if stream is None else stream
    rows = plugin_rows()
    for line in format_table(rows):
        print(line, file=out)
    broken = [r for r in rows if not r.ok]
    if broken:
        names = ", ".join(f"{r.kind} '{r.name}'" for r in broken)
        print(f"tuneup: {len(broken)} plugin(s) skipped: {names}", file=sys.stderr)
    for line in checkout_unregistered():  # listed nowhere above: the metadata lacks it
        print(f"tuneup: warning: {line}", file=sys.stderr)
    return ExitCode.OK
