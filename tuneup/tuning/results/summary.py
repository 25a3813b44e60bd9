"""summary.json read back: one parser (`Summary.from_document`) into frozen, typed values.

The file is written by the session (`verdicts.summary_dict` plus the preset,
the trainer and the scaling estimate); everything that reads it back (the
CLI's final lines, the app's RESULTS and TUNE screens, `tuneup export`) reads
these attributes. A key an older session did not write, or a value of the
wrong type, reads as its default, so old results folders still open; a file that is
not a summary at all (no recommended values, or a block of another kind:
`shape_problem`) is damaged, and the journal rebuilds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tuneup.probe.jsonvalues import (
    as_list,
    as_map,
    count,
    empty,
    frozen_map,
    number,
    optional_text,
    text,
    texts,
)
from tuneup.tuning.results.verified import Verified


@dataclass(frozen=True, kw_only=True)
class Rates:
    """A configuration's knob values and its phases' median samples/s (FULL's IQR in %)."""

    values: Mapping[str, Any] = field(default_factory=empty)
    io_sps: float | None = None
    synthetic_sps: float | None = None
    full_sps: float | None = None
    iqr_pct: float | None = None


@dataclass(frozen=True, kw_only=True)
class Recommendation(Rates):
    """The confirmed recommendation: its values, what changed from the baseline, and why."""

    changes: Mapping[str, Any] = field(default_factory=empty)
    path: tuple[str, ...] = ()
    headline: str = ""
    batch_note: str | None = None
    recorded: bool = False  # the file holds the recommended values (they may be none changed)


@dataclass(frozen=True, kw_only=True)
class Speedup:
    """The confirmed speedup over the baseline, its spread over the pairs, and the method."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    pairs: int = 0
    method: str = ""


@dataclass(frozen=True, kw_only=True)
class ConfirmationSummary:
    """What the confirmation upheld of the search's path."""

    status: str = "?"
    search_path: tuple[str, ...] = ()
    path: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class Bottleneck:
    """Where the time went at one moment (before or after the tuning)."""

    kind: str = ""
    sentence: str = ""


@dataclass(frozen=True, kw_only=True)
class StageOutcome:
    """One stage's line: what won (None: the incumbent stayed), its gain and why, the phase
    that decided it, and whether it was left unresolved at the machine's noise."""

    stage: str = "?"
    winner: str | None = None
    gain_pct: float | None = None
    reason: str = ""
    failed: tuple[str, ...] = ()
    not_tried: tuple[str, ...] = ()
    decided_on: str | None = None
    unresolved: bool = False
    needed_pct: float | None = None  # the gain its pairs had to clear (None: no pairs)


@dataclass(frozen=True, kw_only=True)
class TargetAnswer:
    """The answer for one program the user trains with (probe.targets): its values and
    its own measured factor over the baseline.

    Attributes:
        target: its key ("tuneup", "tutorial", "command").
        label: how the user knows it ("the tutorial's train.py").
        values: the knob values it runs; changes: those that differ from the baseline's.
        factor, low, high: its confirmed speedup over the baseline (FULL) and the likely
            range of its pairs; None where nothing measured it (`tuned` False).
        full_sps: its confirmed FULL samples/s.
        upheld: its confirmation upheld it (None: none ran, e.g. the recommendation's own
            answer with nothing adopted).
        tuned: its values were tuned for it; False where a session recorded before
            targets existed leaves this target's answer untuned (`note` says what).
        same: it runs the recommendation as it is (its figures are the recommendation's).
        left_out: the recommended knobs it cannot run, each with why.
        note: what a user must know of this answer, in one line ("" when nothing).
    """

    target: str = "?"
    label: str = ""
    values: Mapping[str, Any] = field(default_factory=empty)
    changes: Mapping[str, Any] = field(default_factory=empty)
    factor: float | None = None
    low: float | None = None
    high: float | None = None
    full_sps: float | None = None
    upheld: bool | None = None
    tuned: bool = True
    same: bool = False
    left_out: Mapping[str, str] = field(default_factory=empty)
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Partial:
    """A ladder stopped before its end: why, and the stages it did not finish."""

    why: str = ""
    not_run: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ScalingSummary:
    """The scaling estimate's table as text lines, or why it could not be made."""

    lines: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Summary:
    """A session's summary.json (a finished one, or one stopped before its end: `partial`).

    Attributes:
        margin_pct: the smallest FULL gain the most pairs of a stage could establish
            (paired.PhaseNoise.resolvable): a bound, not what any decision cleared.
        needed_pct: what each paired decision had to clear (its phase's noise): the
            figure a reader compares the gains with (`needed_text`).
        notes: what the session saw of the machine (unstable, contended,
            drifting): the `stability` block's notes.
        confirmation: None when none ran (nothing was adopted).
        before, after: the bottleneck verdicts; None when not written.
        scaling: None without a 1-rank reference probe.
        unmeasured: (stage, why) of each stage the ladder could not measure (its probes
            failed or ran contended): `--retry-failed` measures them again.
        verify: what `tuneup verify` found of the real runs (None: none ran).
        document: the file's whole content, read-only, passed on unchanged
            (`tuneup probe --json`); read the attributes instead.
    """

    preset: str = "?"
    trainer: str = "?"
    search: str = "staged"
    margin_pct: float = 0.0
    needed_pct: tuple[float, ...] = ()
    baseline: Rates = field(default_factory=Rates)
    recommendation: Recommendation = field(default_factory=Recommendation)
    speedup: Speedup = field(default_factory=Speedup)
    confirmation: ConfirmationSummary | None = None
    notes: tuple[str, ...] = ()
    before: Bottleneck | None = None
    after: Bottleneck | None = None
    stages: tuple[StageOutcome, ...] = ()
    scaling: ScalingSummary | None = None
    partial: Partial | None = None
    unmeasured: tuple[tuple[str, str], ...] = ()
    targets: tuple[TargetAnswer, ...] = ()
    verify: Verified | None = None
    document: Mapping[str, Any] = field(default_factory=empty, compare=False, repr=False)

    def target(self, name: str) -> TargetAnswer | None:
        """The answer for target `name`; None when the session has none for it."""
        return next((t for t in self.targets if t.target == name), None)

    def needed_text(self) -> str:
        """The gain the decisions' pairs had to clear ("2.0%", "2.0-2.2%"): the noise they
        used, per phase and moment (the floor, or the instability repeats showed); "" when
        no decision ran on pairs."""
        if not self.needed_pct:
            return ""
        low, high = min(self.needed_pct), max(self.needed_pct)
        if f"{low:.1f}" == f"{high:.1f}":
            return f"{low:.1f}%"
        return f"{low:.1f}-{high:.1f}%"

    @classmethod
    def from_document(cls, data: Mapping[str, Any]) -> Summary:
        """The summary in a decoded summary.json; missing or mistyped keys take defaults."""
        rec = as_map(data.get("recommendation"))
        gain = as_map(data.get("speedup"))
        conf = as_map(data.get("confirmation"))
        verdict = as_map(data.get("bottleneck"))
        scaling = data.get("scaling")
        partial = data.get("partial")
        stages = tuple(
            _stage(entry) for entry in as_list(data.get("stages")) if isinstance(entry, Mapping)
        )
        return cls(
            preset=text(data.get("preset"), "?"),
            trainer=text(data.get("trainer"), "?"),
            search=text(data.get("search"), "staged"),
            margin_pct=number(data.get("margin_pct")) or 0.0,
            needed_pct=_needed(stages, conf),
            baseline=Rates(**_rates(as_map(data.get("baseline")))),
            recommendation=Recommendation(
                **_rates(rec),
                changes=frozen_map(rec.get("changes")),
                path=texts(rec.get("path")),
                headline=text(rec.get("headline"), ""),
                batch_note=optional_text(rec.get("batch_note")),
                recorded=isinstance(rec.get("values"), Mapping),
            ),
            speedup=Speedup(
                value=number(gain.get("value")),
                low=number(gain.get("low")),
                high=number(gain.get("high")),
                pairs=count(gain.get("pairs")) or 0,
                method=text(gain.get("method"), ""),
            ),
            confirmation=ConfirmationSummary(
                status=text(conf.get("status"), "?"),
                search_path=texts(conf.get("search_path")),
                path=texts(conf.get("path")),
                note=optional_text(conf.get("note")),
            )
            if conf
            else None,
            notes=texts(as_map(data.get("stability")).get("notes")),
            before=_bottleneck(verdict.get("before")),
            after=_bottleneck(verdict.get("after")),
            stages=stages,
            scaling=ScalingSummary(
                lines=texts(scaling.get("lines")),
                error=optional_text(scaling.get("error")),
            )
            if isinstance(scaling, Mapping)
            else None,
            partial=Partial(why=text(partial.get("why"), ""), not_run=texts(partial.get("not_run")))
            if isinstance(partial, Mapping)
            else None,
            unmeasured=tuple(
                (text(entry.get("stage"), "?"), text(entry.get("why"), ""))
                for entry in as_list(data.get("unmeasured"))
                if isinstance(entry, Mapping)
            ),
            targets=tuple(
                _target(t) for t in as_list(data.get("targets")) if isinstance(t, Mapping)
            ),
            verify=Verified.from_dict(data.get("verify")),
            document=MappingProxyType(dict(data)),
        )


# The blocks every summary tuneup wrote holds, from the first, by kind: a file that lacks
# the recommendation's values, or holds one of these as another kind, is not a summary.
_BLOCKS: dict[str, tuple[type, str]] = {
    "recommendation": (Mapping, "a mapping"),
    "baseline": (Mapping, "a mapping"),
    "speedup": (Mapping, "a mapping"),
    "stages": (list, "a list"),
    "preset": (str, "text"),
    "trainer": (str, "text"),
}


def shape_problem(data: Any) -> str | None:
    """Why a decoded summary.json is not a summary tuneup wrote ("not a JSON object", "it
    holds no recommended values", "'stages' is text, not a list"); None when it may be one
    (an older one lacking a newer block is)."""
    if not isinstance(data, Mapping):
        return "not a JSON object"
    for key, (kind, said) in _BLOCKS.items():
        if key in data and not isinstance(data[key], kind):
            return f"{key!r} is {_kind(data[key])}, not {said}"
    if not isinstance(as_map(data.get("recommendation")).get("values"), Mapping):
        return "it holds no recommended values"
    if not all(isinstance(entry, Mapping) for entry in as_list(data.get("stages"))):
        return "'stages' holds an entry that is not a mapping"
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    return "a list" if isinstance(value, list) else "a mapping"


def _rates(block: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "values": frozen_map(block.get("values")),
        "io_sps": number(block.get("io_sps")),
        "synthetic_sps": number(block.get("synthetic_sps")),
        "full_sps": number(block.get("full_sps")),
        "iqr_pct": number(block.get("iqr_pct")),
    }


def _bottleneck(value: Any) -> Bottleneck | None:
    if not isinstance(value, Mapping):
        return None
    return Bottleneck(kind=text(value.get("kind"), ""), sentence=text(value.get("sentence"), ""))


def _stage(entry: Mapping[str, Any]) -> StageOutcome:
    return StageOutcome(
        stage=text(entry.get("stage"), "?"),
        winner=optional_text(entry.get("winner")) or None,
        gain_pct=number(entry.get("gain_pct")),
        reason=text(entry.get("reason"), ""),
        failed=texts(entry.get("failed")),
        not_tried=texts(entry.get("not_tried")),
        decided_on=optional_text(entry.get("decided_on")) or None,
        unresolved=entry.get("unresolved") is True,
        needed_pct=number(entry.get("needed_pct")),
    )


def _target(entry: Mapping[str, Any]) -> TargetAnswer:
    left = as_map(entry.get("left_out"))
    upheld = entry.get("upheld")
    return TargetAnswer(
        target=text(entry.get("target"), "?"),
        label=text(entry.get("label"), ""),
        values=frozen_map(entry.get("values")),
        changes=frozen_map(entry.get("changes")),
        factor=number(entry.get("factor")),
        low=number(entry.get("low")),
        high=number(entry.get("high")),
        full_sps=number(entry.get("full_sps")),
        upheld=upheld if isinstance(upheld, bool) else None,
        tuned=entry.get("tuned") is not False,
        same=entry.get("same") is True,
        left_out=MappingProxyType({str(k): text(v, "") for k, v in left.items()}),
        note=text(entry.get("note"), ""),
    )


def _needed(stages: tuple[StageOutcome, ...], confirmation: Mapping[str, Any]) -> tuple[float, ...]:
    """The gains the paired decisions had to clear, in %: each stage's, then each
    confirmation attempt's (an older summary holds only the latter)."""
    found = [s.needed_pct for s in stages if s.needed_pct is not None]
    for attempt in as_list(confirmation.get("attempts")):
        ratio = number(as_map(attempt).get("needed"))
        if ratio is not None:
            found.append(100 * (ratio - 1))
    return tuple(found)
