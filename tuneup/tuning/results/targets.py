"""Each target's answer as a session's summary gives it, an older session's included.

A session writes its targets' answers in summary.json (`targets`). One recorded before
targets existed holds only the recommendation: it is its trainer's own answer, another
target runs it as it is where it can, and where it cannot, that target's answer is the
recommendation with the knobs it cannot run at the baseline's values, untuned, and says
so with the ceiling the baseline's IO measured for them. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tuneup.probe.targets import Target
from tuneup.tuning.results.summary import Summary, TargetAnswer


def target_answers(
    summary: Summary, own: Target, others: tuple[Target, ...]
) -> tuple[TargetAnswer, ...]:
    """The session's answer for its trainer (`own`) and for each of `others`, in order: as
    summary.json records them, else derived (a target the session did not tune)."""
    recorded = {answer.target: answer for answer in summary.targets}
    answer = recorded.get(own.name) or own_answer(summary, own)
    return (
        answer,
        *(recorded.get(target.name) or _derived(summary, answer, target) for target in others),
    )


def own_answer(summary: Summary, own: Target) -> TargetAnswer:
    """The recommendation as its trainer's answer (what the search confirmed)."""
    rec, gain = summary.recommendation, summary.speedup
    upheld = None if summary.confirmation is None else bool(rec.changes)
    return TargetAnswer(
        target=own.name,
        label=own.label,
        values=rec.values,
        changes=rec.changes,
        factor=gain.value,
        low=gain.low,
        high=gain.high,
        full_sps=rec.full_sps,
        upheld=upheld,
    )


def _derived(summary: Summary, answer: TargetAnswer, target: Target) -> TargetAnswer:
    rec, base = summary.recommendation, summary.baseline
    reset = target.reset_knobs(rec.values)
    if not reset:
        return TargetAnswer(
            **{**_fields(answer), "target": target.name, "label": target.label, "same": True}
        )
    cannot = target.unrunnable(rec.values)
    values = {**rec.values, **{k: base.values[k] for k in reset if k in base.values}}
    changes = {k: v for k, v in values.items() if base.values.get(k, _NONE) != v}
    return TargetAnswer(
        target=target.name,
        label=target.label,
        values=MappingProxyType(values),
        changes=MappingProxyType(changes),
        tuned=False,
        left_out=MappingProxyType(cannot),
        note=untuned_note(target, cannot, {k: values[k] for k in reset if k in values}, summary),
    )


def untuned_note(
    target: Target, cannot: Mapping[str, str], kept: Mapping[str, Any], summary: Summary
) -> str:
    """What an older session's answer for `target` leaves untuned, and its ceiling."""
    rec, base = summary.recommendation, summary.baseline
    left = ", ".join(f"{k}={rec.values.get(k)} ({why})" for k, why in cannot.items())
    held = ", ".join(f"{k}={v}" for k, v in kept.items())
    line = (
        f"this session tuned nothing for {target.label}, which cannot run {left}: it gets "
        f"the baseline's {held}, untuned"
    )
    if base.io_sps:
        line += f", whose IO the baseline measured at {base.io_sps:.0f} samples/s"
        if base.full_sps:
            line += f": at most about {base.io_sps / base.full_sps:.1f}x the baseline"
            if summary.speedup.value:
                line += f" (the recommendation: {summary.speedup.value:.1f}x)"
    return line + "; a session of this tuneup tunes it an answer of its own"


def _fields(answer: TargetAnswer) -> dict[str, Any]:
    return {name: getattr(answer, name) for name in answer.__dataclass_fields__}


_NONE = object()
