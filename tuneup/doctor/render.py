"""The doctor's report: a rich table for people, one JSON object for scripts and support."""

from __future__ import annotations

import json
from typing import Any, TextIO

from tuneup.doctor.checks import FAIL, OK, WARN, Check
from tuneup.doctor.honesty import HONEST, Honesty

_STYLE = {OK: "green", WARN: "yellow", FAIL: "bold red"}


def report_dict(
    checks: list[Check], honesty: Honesty | None, honesty_error: str | None
) -> dict[str, Any]:
    return {
        "checks": [c.to_dict() for c in checks],
        "honesty": None if honesty is None else honesty.to_dict(),
        "honesty_error": honesty_error,
        "failed": sum(c.level == FAIL for c in checks),
        "warned": sum(c.level == WARN for c in checks),
    }


def write_json(out: TextIO, report: dict[str, Any]) -> None:
    out.write(json.dumps(report, indent=2, default=str) + "\n")


def honesty_lines(h: Honesty) -> list[str]:
    verdict = "honest" if h.honest else f"off by more than {100 * (HONEST[1] - 1):.0f}%"
    lines = [
        f"trainer SYNTHETIC {h.trainer_sps:.1f} vs bare loop {h.bare_sps:.1f} samples/s on "
        f"{h.device}: ratio {h.ratio:.3f} ({verdict}; pairs "
        + ", ".join(f"{r:.3f}" for r in h.ratios)
        + ")"
    ]
    if h.tflops is not None:
        mfu = f", MFU {100 * h.mfu:.1f}% of {h.peak_tflops:g}" if h.mfu is not None else ""
        lines.append(f"achieved {h.tflops:.2f} TFLOP/s{mfu}")
    if h.h2d_pinned_gbs is not None:
        lines.append(
            f"host to device: {h.h2d_pinned_gbs:.1f} GB/s pinned, "
            f"{h.h2d_pageable_gbs:.1f} GB/s pageable"
        )
    else:
        lines.append("MFU and host-to-device bandwidth: n/a (no CUDA)")
    return lines


def write_table(
    out: TextIO, checks: list[Check], honesty: Honesty | None, honesty_error: str | None
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, highlight=False, soft_wrap=False)
    table = Table(title="tuneup doctor", show_lines=False)
    table.add_column("check")
    table.add_column("", no_wrap=True)
    table.add_column("what was found")
    table.add_column("fix")
    for check in checks:
        level = f"[{_STYLE[check.level]}]{check.level}[/]"
        table.add_row(check.name, level, check.detail, check.fix)
    console.print(table)
    if honesty is not None:
        for line in honesty_lines(honesty):
            console.print(line)
    if honesty_error is not None:
        console.print(f"[bold red]honesty check failed:[/] {honesty_error}")
    failed = sum(c.level == FAIL for c in checks)
    warned = sum(c.level == WARN for c in checks)
    console.print(f"{failed} failed, {warned} warning(s)")
