"""How much of a ladder a busy machine may take, and the line that says it is too busy.

A probe another process's burst got in the way of (contended: hostload.py) is
measured again, since its figure says more about the burst than about the
configuration; a probe under a steady load is kept (its pair saw the same
load), but it runs slower, often many times slower where the load fights the
probe's threads. On a machine that stays busy neither ends: every probe is
measured again and again, or every probe takes ten times its estimate. So
what a load takes is bounded, in probes spoiled (contended ones) and in
seconds (the walls of the contended and the loaded probes):

* a stage stops, unmeasured, once it has lost STAGE_PROBES probes or spent
  STAGE_SHARE of the ladder's allowance under load; the stage says why, and
  the ladder goes on;
* the ladder stops every stage left the same way once it has lost
  LADDER_PROBES probes or spent its allowance under load (LADDER_SHARE of its
  own estimate, at least MIN_LADDER_S): the answer keeps what was measured,
  and names the load, how much, and the fix;
* the baseline, which everything needs, keeps its latest contended probe once
  its stage's bound is reached, and is never stopped.

Pure: results in, a verdict out. The session says the line as it happens (`say`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tuneup.probe.durations import duration_text
from tuneup.probe.types import BASELINE_STAGE, ProbeResult
from tuneup.tuning.search.search_records import StageCut

STAGE_PROBES = 4  # contended probes a stage may lose before it stops
LADDER_PROBES = 12  # ... and the whole ladder
LADDER_SHARE = 2.0  # the ladder's seconds under load: twice its estimate...
MIN_LADDER_S = 120.0  # ...and never under two minutes
STAGE_SHARE = 0.5  # a stage's seconds under load: half the ladder's allowance

FIX = (
    "measure it again later with --resume DIR --retry-failed, on a quiet node, or bound "
    "the time it may take with --budget"
)


class MachineBusy(StageCut):
    """A busy machine spoiled as many probes as the stage may lose (`ladder`: as many as
    the ladder may): the stage stops, unmeasured. The message is the line that says so."""

    def __init__(self, line: str, *, ladder: bool) -> None:
        super().__init__(line)
        self.ladder = ladder


@dataclass
class LoadBound:
    """The probes a busy machine may spoil and the seconds it may take, per stage and per
    ladder (the module docstring).

    Attributes:
        ladder_s: the ladder's allowance in seconds (None: probes alone bound it).
        say: told the line when a bound is reached (the session's note), at once.
        spoiled: the contended probes, in order; `loaded`: the steady load's.
    """

    ladder_s: float | None = None
    stage_probes: int = STAGE_PROBES
    ladder_probes: int = LADDER_PROBES
    say: Callable[[str], None] | None = None
    spoiled: list[ProbeResult] = field(default_factory=list)
    loaded: list[ProbeResult] = field(default_factory=list)
    _stage: str | None = None
    _in_stage: list[ProbeResult] = field(default_factory=list)  # spoiled, this stage
    _loaded_in_stage: list[ProbeResult] = field(default_factory=list)

    @classmethod
    def for_estimate(
        cls, estimate_s: float | None, say: Callable[[str], None] | None = None
    ) -> LoadBound:
        """The bound of a ladder estimated at `estimate_s` (None: not known)."""
        seconds = None if estimate_s is None else max(MIN_LADDER_S, LADDER_SHARE * estimate_s)
        return cls(ladder_s=seconds, say=say)

    @property
    def stage_s(self) -> float | None:
        return None if self.ladder_s is None else STAGE_SHARE * self.ladder_s

    @property
    def ladder_spent(self) -> bool:
        """The ladder lost all it may: no stage left is run."""
        under_load = _seconds(self.spoiled + self.loaded)
        return len(self.spoiled) >= self.ladder_probes or (
            self.ladder_s is not None and under_load >= self.ladder_s
        )

    @property
    def left(self) -> int:
        """Probes the ladder may still lose (what the time left counts on, at most)."""
        return max(0, self.ladder_probes - len(self.spoiled))

    def lost(self, stage: str, result: ProbeResult) -> None:
        """`result` ran contended: it counts against `stage` and the ladder, in probes and
        seconds.

        Raises:
            MachineBusy: that was the last the stage (or the ladder) may lose; never in the
                baseline, which keeps its latest probe (`baseline_done` says when).
        """
        self._enter(stage)
        self.spoiled.append(result)
        self._in_stage.append(result)
        self._check(stage)

    def under_load(self, stage: str, result: ProbeResult) -> None:
        """`result` ran under a steady load and counts: its seconds count against `stage`
        and the ladder. Raises MachineBusy as `lost` does."""
        self._enter(stage)
        self.loaded.append(result)
        self._loaded_in_stage.append(result)
        self._check(stage)

    def baseline_done(self) -> bool:
        """The baseline lost as many probes as a stage may: it keeps the one it has."""
        return self._stage == BASELINE_STAGE and len(self._in_stage) >= self.stage_probes

    def _enter(self, stage: str) -> None:
        if stage != self._stage:
            self._stage, self._in_stage, self._loaded_in_stage = stage, [], []

    def _check(self, stage: str) -> None:
        if stage == BASELINE_STAGE:
            return
        if self.ladder_spent:
            self._stop(self.line(ladder=True), ladder=True)
        stage_s = self.stage_s
        if len(self._in_stage) >= self.stage_probes or (
            stage_s is not None and _seconds(self._in_stage + self._loaded_in_stage) >= stage_s
        ):
            self._stop(self.line(ladder=False), ladder=False)

    def _stop(self, line: str, *, ladder: bool) -> None:
        if self.say is not None:
            self.say(f"{line}; {FIX}")
        raise MachineBusy(line, ladder=ladder)

    def line(self, *, ladder: bool) -> str:
        """What used the CPUs, how much, and what it took: the line a stop says."""
        lost = self.spoiled if ladder else self._in_stage
        loaded = self.loaded if ladder else self._loaded_in_stage
        where = "the ladder stops" if ladder else f"stage {self._stage} stops"
        took = []
        if lost:
            took.append(f"{len(lost)} probe(s) spoiled ({duration_text(_seconds(lost))})")
        if loaded:
            took.append(f"{duration_text(_seconds(loaded))} of probes slowed under it")
        return f"the machine is too busy, {where}: {load_words(lost + loaded)}; " + " and ".join(
            took
        )


def load_words(results: list[ProbeResult]) -> str:
    """ "other processes used 0.6-1.9 of 2 CPUs in bursts (python3 1.1, pytest 0.4)": what
    the contended probes among `results` saw."""
    seen = [r.contention for r in results if r.contention is not None]
    figures = sorted(c.other_cpus for c in seen if c.other_cpus is not None)
    if not figures:
        notes = sorted({c.note for c in seen if c.note})
        return "; ".join(notes) or "other processes loaded the machine"
    usable = next((c.usable_cpus for c in seen if c.usable_cpus), None)
    low, high = f"{figures[0]:.1f}", f"{figures[-1]:.1f}"
    used = low if low == high else f"{low}-{high}"
    of = f" of {usable} CPUs" if usable else " CPUs"
    busiest = next((c.busiest for c in reversed(seen) if c.busiest), "")
    named = f" ({busiest})" if busiest else ""
    bursts = [r.contended for r in results if r.contention is not None]
    how = " in bursts" if all(bursts) else " steadily" if not any(bursts) else ""
    return f"other processes used {used}{of}{how}{named}"


def _seconds(results: list[ProbeResult]) -> float:
    return sum(max(r.wall_s, 0.0) for r in results)
