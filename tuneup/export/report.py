"""`tuneup export DIR --format md`: a short report a user can paste into a ticket.

What the session recommends and why it is faster, in the tutorial's terms:
the headline with its confirmed range, each stage's decision, where a step's
time went before and after (the profiles' breakdowns side by side), the
findings that name the next move with their numbers, what is left to gain, and
the traces to open (Chrome trace format: Perfetto or chrome://tracing).
Pure: a summary document in, text out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneup.quoting import one_line
from tuneup.tuning.results.profiles import profile_lines

REPORT = "md"


def render_report(summary: Mapping[str, Any], folder_name: str) -> str:
    """The session's report in Markdown (the module docstring)."""
    recommendation = summary.get("recommendation") or {}
    title = one_line(f"{summary.get('preset', '?')} ({folder_name})")
    lines = [f"# tuneup: {title}", ""]
    headline = recommendation.get("headline")
    if headline:
        lines += [str(headline), ""]
    stages = [s for s in summary.get("stages") or [] if isinstance(s, Mapping)]
    if stages:
        lines += ["## Stages", ""]
        lines += [f"- **{s.get('stage')}**: {s.get('reason', '')}" for s in stages]
        lines.append("")
    profile = summary.get("profile")
    if isinstance(profile, Mapping):
        table = profile_lines(profile)
        lines += ["## Where a step's time goes", "", "```", *table[1:_table_end(table)], "```"]
        lines.append("")
        found = [f for f in profile.get("findings") or [] if isinstance(f, Mapping)]
        if found:
            lines += ["## Findings", ""] + [f"- {f.get('text', '')}" for f in found] + [""]
        if profile.get("left"):
            lines += ["## What is left", "", str(profile["left"]), ""]
        traces = _traces(profile)
        if traces:
            lines += ["## Traces", "", "Chrome trace format (Perfetto, chrome://tracing):", ""]
            lines += [f"- `probes/{name}`" for name in traces] + [""]
    else:
        lines += ["No probe of this session was profiled (its trainer takes no profile).", ""]
    return "\n".join(lines)


def _table_end(lines: list[str]) -> int:
    """Where profile_lines' table ends and its findings begin."""
    for index, line in enumerate(lines):
        if line.startswith(("finding: ", "left: ")):
            return index
    return len(lines)


def _traces(profile: Mapping[str, Any]) -> list[str]:
    profiled = [profile.get("baseline"), *[a.get("profile") for a in profile.get("adopted") or []]]
    names = [p.get("trace") for p in profiled if isinstance(p, Mapping) and p.get("trace")]
    return list(dict.fromkeys(str(n) for n in names))
