"""Whether a journal line belongs to its session, checked as it is read.

A line is typed by `ProbeResult.from_journal` (its fields and their kinds); here it
is held against the session.json beside it: a probe of this session carries its
id, names a stage this session may run, and differs from its base config only in
knobs a stage sets. A line that fails (copied from another session's journal,
or forged) is moved aside by the journal's repair, never replayed.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.probe.stages import scan_stages, stage_names
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, ProbeResult

SESSION_ID = "id"
"""session.json's key for the session's id, which each probe it journals carries."""


def new_session_id() -> str:
    """A new session's id: twelve hex digits, random."""
    return uuid.uuid4().hex[:12]


@functools.cache
def _tuned_knobs() -> frozenset[str]:
    """Every knob some registered stage sets: the only ones a probe's config may change."""
    stages, _warnings = scan_stages()
    return frozenset(k for stage in stages.values() for k in stage.knobs)


@functools.cache
def _registered() -> frozenset[str]:
    return frozenset(stage_names())


@dataclass(frozen=True)
class SessionFacts:
    """What a journal line must agree with: the session's id, stages and base config."""

    session_id: str = ""
    stages: frozenset[str] = frozenset()
    base: Mapping[str, Any] | None = None

    @classmethod
    def from_session(cls, info: Mapping[str, Any]) -> SessionFacts:
        stages = info.get("stages")
        base = info.get("base_config")
        return cls(
            session_id=str(info.get(SESSION_ID) or ""),
            stages=frozenset(str(s) for s in stages) if isinstance(stages, list) else frozenset(),
            base=base if isinstance(base, Mapping) else None,
        )

    def problem(self, result: ProbeResult) -> str | None:
        """Why `result` is not a probe of this session ("is not this session's (...)");
        None when it may be (a line older than the id is held to its stage and config)."""
        if self.session_id and result.session and result.session != self.session_id:
            return (
                f"is another session's (its id is {result.session}, this session's "
                f"{self.session_id})"
            )
        own = [BASELINE_STAGE, *sorted(self.stages), CONFIRM_STAGE]
        if result.stage not in own and result.stage not in _registered():
            return (
                f"is not this session's (stage {result.stage!r} is none of its stages: "
                f"{', '.join(own)})"
            )
        if self.base is None:
            return None
        config, base, tuned = result.config, self.base, _tuned_knobs()
        off = sorted(
            k for k in {*config, *base} if k not in tuned and config.get(k) != base.get(k)
        )
        if not off:
            return None
        more = f" and {len(off) - 1} more knob(s)" if len(off) > 1 else ""
        return (
            f"is another session's ({off[0]} is {config.get(off[0])!r} where this session's "
            f"base has {base.get(off[0])!r}, and no stage sets it{more})"
        )
