"""The doctor's report: a rich table for people, one JSON object for scripts and support."""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuneup.doctor.checks import FAIL, OK, WARN, Check
from tuneup.doctor.honesty import Honesty

_STYLE = {OK: "green", WARN: "yellow", FAIL: "bold red"}


def report_dict(checks: list[Check], honesty: Honesty | None) -> dict[str, Any]:
    """Every check's row, the timed check's raw figures (None with --quick), and the counts."""
    return {
        "checks": [c.to_dict() for c in checks],
        "honesty": None if honesty is None else honesty.to_dict(),
        "failed": sum(c.level == FAIL for c in checks),
        "warned": sum(c.level == WARN for c in checks),
    }


def write_json(out: TextIO, report: dict[str, Any]) -> None:
    out.write(json.dumps(report, indent=2, default=str) + "\n")


def write_table(out: TextIO, checks: list[Check]) -> None:
    """One row per check, its fix on a line of its own under what was found (80 columns fit)."""

    console = Console(file=out, highlight=False, soft_wrap=False)
    table = Table(title="tuneup doctor")
    table.add_column("check", no_wrap=True)
    table.add_column("", no_wrap=True)
    table.add_column("what was found, and the fix", overflow="fold")
    for check in checks:
        level = f"[{_STYLE[check.level]}]{check.level}[/]"
        text = escape(check.detail)
        if check.fix:
            text += f"\n[bold]fix:[/] {escape(check.fix)}"
        table.add_row(check.name, level, text)
    console.print(table)
    failed = sum(c.level == FAIL for c in checks)
    warned = sum(c.level == WARN for c in checks)
    console.print(f"{failed} failed, {warned} warning(s)")
