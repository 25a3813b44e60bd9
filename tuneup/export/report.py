"""`tuneup export DIR --format md`: a short report a user can paste into a ticket.

What the session recommends and why it is faster, in the tutorial's terms:
the headline with its confirmed range, the data the run reads (and what may
move where the probes read a smaller box), each stage's decision, where a step's
time went (the profiles' breakdowns: before and after side by side where the
configurations differ, the baseline's alone where it was kept, a repeat as a
repeat; on a GPU the device's work by part, the host's spans beside it), the
findings that name the next move with their numbers, what is left to gain, and
the traces to open (Chrome trace format: Perfetto or chrome://tracing).
Pure: a summary document in, text out (`tuneup export` reads its profiles
again from their traces first: tuning/results/profile_traces.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneup.quoting import one_line
from tuneup.tuning.results.profiles import profile_lines
from tuneup.tuning.results.summary import TargetAnswer
from tuneup.tuning.results.verified import Verified
from tuneup.tuning.results.verify_words import (
    claim_text,
    how_text,
    rates_text,
    real_text,
    verdict_text,
)

REPORT = "md"


def render_report(
    summary: Mapping[str, Any], folder_name: str, answers: tuple[TargetAnswer, ...] = ()
) -> str:
    """The session's report in Markdown (the module docstring); `answers`: each target's
    (tuning.results.targets), listed where they differ."""
    recommendation = summary.get("recommendation") or {}
    title = one_line(f"{summary.get('preset', '?')} ({folder_name})")
    lines = [f"# tuneup: {title}", ""]
    headline = recommendation.get("headline")
    if headline:
        lines += [str(headline), ""]
    lines += _answers(answers)
    lines += _verified(summary.get("verify"))
    real = summary.get("real_data")  # the boxes the run reads, weighed (session/realdata.py)
    if isinstance(real, Mapping) and real.get("line"):
        lines += [f"Real data: {one_line(str(real['line']))}.", ""]
    stages = [s for s in summary.get("stages") or [] if isinstance(s, Mapping)]
    if stages:
        lines += ["## Stages", ""]
        lines += [f"- **{s.get('stage')}**: {s.get('reason', '')}" for s in stages]
        lines.append("")
    profile = summary.get("profile")
    if isinstance(profile, Mapping):
        table = profile_lines(profile)
        lines += ["## Where a step's time goes", "", "```", *table[1 : _table_end(table)], "```"]
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


def _answers(answers: tuple[TargetAnswer, ...]) -> list[str]:
    """A line per run the user may do, where the answers differ (a target that cannot run
    the recommendation): its settings beyond the baseline and its own factor."""
    if len(answers) < 2 or all(a.same for a in answers[1:]):
        return []
    lines = ["## Each run's answer", ""]
    for answer in answers:
        changes = ", ".join(f"{k}={v}" for k, v in answer.changes.items()) or "the baseline"
        if not answer.tuned:
            said = f"not tuned: {answer.note}"
        elif answer.factor is not None and answer.upheld is not False:
            said = f"{answer.factor:.2f}x the baseline"
            if answer.low is not None and answer.high is not None:
                said += f" (likely {answer.low:.2f}-{answer.high:.2f}x)"
        else:
            said = answer.note or "not confirmed against the baseline"
        lines.append(one_line(f"- **{answer.label}**: {changes}: {said}"))
    return [*lines, ""]


def _verified(block: Any) -> list[str]:
    """The real runs against the claim, a row per target; nothing where no verify ran."""
    verified = Verified.from_dict(block)
    if verified is None:
        return []
    lines = ["## Verified", "", _cell(how_text(verified)), ""]
    if verified.targets:
        lines += ["| target | claimed | real | samples/s | verdict |", "|---|---|---|---|---|"]
        for check in verified.targets:
            row = (
                check.label or check.target,
                claim_text(check),
                real_text(check),
                rates_text(check) or "-",
                verdict_text(check),
            )
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        lines.append("")
    for check in verified.targets:
        if check.command:
            lines.append(
                f"- {_cell(check.label or check.target)}, its run: `{_cell(check.command)}`"
            )
    lines += [f"- not run: {_cell(t)} ({_cell(why)})" for t, why in verified.skipped]
    if verified.stopped:
        lines.append(f"- stopped: {_cell(verified.stopped)} (what finished is kept)")
    if verified.command:
        lines.append(f"- reproduce: `{_cell(verified.command)}`")
    return [*lines, ""]


def _cell(text: str) -> str:
    """Text on one line that cannot end a table cell or a code span."""
    return one_line(text).replace("|", "\\|").replace("`", "'")


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
