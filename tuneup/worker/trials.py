"""Trials: timed runs of a phase, synchronised at their edges only, and the ranks' rates.

The two interfaces every measurement is driven through live here, :class:`Timer`
(clock and device sync) and :class:`Workload` (the three kinds of work), so the
rules are tested with fakes (see phases.py for the order of a probe).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tuneup.probe.plan import MeasurementPlan
from tuneup.probe.stats import clearly_slower, median, relative_mad, relative_spread

Emit = Callable[..., None]
"""``emit(kind, **fields)``: writes one event (see :mod:`tuneup.probe.events`)."""

Gather = Callable[[float], list[float]]
"""Every rank's value of this rank's seconds, in rank order (``[seconds]`` on one rank)."""

STRAGGLER_THRESHOLD = 0.10
"""A rank whose median FULL trial takes 10% longer than the median rank's is a straggler:
beyond the few percent trials vary by on a quiet node."""

TRIAL_OVERRUN = 4.0
"""A trial that lasted more than this many ``trial_s`` was sized from a pace the loop does
not keep (the first H200 ladder: trials of 44 steps meant for 0.5 s took 30 s each, five
per phase): the next trial is sized from its own pace."""


class Timer(Protocol):
    """Clock and device synchronisation, injected so tests can fake both."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    def sync(self) -> None:
        """Wait for queued device work to finish (a no-op on the CPU)."""
        ...


class Workload(Protocol):
    """The work a probe times; every method returns the number of batches it processed."""

    graph_capture_s: float

    @property
    def scaler_overflows(self) -> int:
        """fp16 loss-scaler overflows so far (0 without a scaler)."""
        ...

    @property
    def compile_cache(self) -> str:
        """ "warm" or "cold": whether torch.compile found its graphs compiled; "" without it."""
        ...

    def prepare(self, phase: str) -> None:
        """Untimed set-up before a phase's trials (SYNTHETIC caches its batch here)."""
        ...

    def full(self, steps: int, keep_losses: int = 0) -> int:
        """Real training steps; the losses of the first ``keep_losses`` are kept."""
        ...

    def io(self, steps: int) -> int:
        """Loader batches moved to the device, no model."""
        ...

    def synthetic(self, steps: int) -> int:
        """Training steps on one cached device batch."""
        ...

    def read_losses(self) -> list[float]:
        """The kept losses as floats (one device sync), emptying the list."""
        ...

    def mem_peak_mb(self) -> float | None:
        """Peak device memory the framework allocated, in MiB; None where unknown."""
        ...


def one_rank(seconds: float) -> list[float]:
    return [seconds]


@dataclass(frozen=True)
class Trial:
    """One timed run of K steps of a phase; `seconds` is the slowest rank's."""

    phase: str
    index: int  # 1-based
    batches: int
    seconds: float
    samples_per_s: float
    rank_seconds: tuple[float, ...] = ()  # every rank's own, in rank order

    def to_event(self) -> dict[str, Any]:
        event: dict[str, Any] = {
            "phase": self.phase,
            "index": self.index,
            "samples_per_s": self.samples_per_s,
            "batches": self.batches,
            "seconds": self.seconds,
        }
        if len(self.rank_seconds) > 1:
            event["rank_seconds"] = list(self.rank_seconds)
        return event


def rank_rates(
    trials: list[Trial], local_batch: float, threshold: float = STRAGGLER_THRESHOLD
) -> tuple[list[float], list[int]]:
    """Each rank's median samples/s over `trials`, and the ranks that straggle.

    A rank's rate is its local batch times the batches over its own seconds.
    A straggler's median seconds exceed the median rank's by more than `threshold`.
    """
    ranks = min((len(t.rank_seconds) for t in trials), default=0)
    rates: list[float] = []
    times: list[float] = []
    for rank in range(ranks):
        own = [t.rank_seconds[rank] for t in trials]
        times.append(median(own))
        own_rates = [
            local_batch * t.batches / s if s > 0 else math.inf
            for t, s in zip(trials, own, strict=True)
        ]
        rates.append(median(own_rates))
    typical = median(times) if times else 0.0
    stragglers = [r for r, s in enumerate(times) if s > typical * (1.0 + threshold)]
    return rates, stragglers


def leading_outlier(rates: list[float]) -> bool:
    """Whether the first trial is far slower than the rest: late one-time work, not speed.

    Slower than the others' median by more than 10% and by more than four of
    their own relative deviations (a compile or an autotune that finished
    after the warm-up, or the first batches of a fresh loader epoch).
    """
    if len(rates) < 3:
        return False
    rest = rates[1:]
    centre = median(rest)
    if centre <= 0 or not math.isfinite(centre):
        return False
    return rates[0] < centre * (1.0 - max(0.10, 4.0 * relative_spread(rest)))


FAR_MIN = 0.25
"""A trial is far from its siblings when it is off their median by more than this..."""
FAR_DEVIATIONS = 5.0
"""...and by more than this many of their own relative deviations (relative_mad: another
wild trial among them does not hide this one)."""


def far_trial(rates: list[float]) -> int | None:
    """The index of the trial farthest from its siblings when it is far from them (a
    stopped process, a burst): off the others' median, as a factor either way, by more
    than FAR_MIN and by more than FAR_DEVIATIONS of their relative deviations; None when
    none is, or with fewer than three trials (two cannot say which is off)."""
    if len(rates) < 3:
        return None
    worst: int | None = None
    worst_off = 0.0
    for index, rate in enumerate(rates):
        rest = rates[:index] + rates[index + 1 :]
        centre = median(rest)
        if centre <= 0 or not math.isfinite(centre) or not math.isfinite(rate):
            continue
        # As a factor either way: a trial 10x slower is off by 9, not by 0.9 (a rate's
        # shortfall is bounded by 1, so a noisy machine's spread hid a stopped trial).
        off = max(rate, centre) / min(rate, centre) - 1.0 if rate > 0 else math.inf
        if off > max(FAR_MIN, FAR_DEVIATIONS * relative_mad(rest)) and off > worst_off:
            worst, worst_off = index, off
    return worst


def far_count(rates: list[float]) -> int:
    """How many trials stay far from their siblings (far_trial, taken out one by one)."""
    left, count = list(rates), 0
    while (index := far_trial(left)) is not None:
        left.pop(index)
        count += 1
    return count


def run_trials(
    phase: str,
    work: Callable[[int], int],
    plan: MeasurementPlan,
    *,
    steps: int,
    samples_per_batch: int,
    timer: Timer,
    emit: Emit,
    gather: Gather = one_rank,
    stop_below: float | None = None,
) -> list[Trial]:
    """Trials of ``work`` of ``plan.trial_s`` each, the device synchronised at their edges only.

    The first trial runs `steps` steps (from the warm-up's steady step); each
    later one as many as the fastest step time seen so far says fill ``trial_s``
    (a trial slowed by a stall does not shrink the next: timing noise only adds),
    unless a trial overran ``TRIAL_OVERRUN`` x ``trial_s``: then its own pace sizes
    the next, and a trial that lasted under ``trial_s`` / ``TRIAL_OVERRUN`` where its
    pace fills more steps is run again at that size, not kept. A phase that reads the
    loader holds a loader round at least. A
    phase takes trials until `plan.enough_trials` (they agree, or there are
    ``max_trials``). Each trial's rate is the global batch over the slowest
    rank's seconds. A leading trial far slower than the rest (`leading_outlier`)
    is dropped and one more run in its place, so one-time work that outlasted the
    warm-up never reaches the figures; so is any trial far from its siblings
    (`far_trial`: a stopped process, a burst), never averaged away. Both up to
    2 x ``max_trials`` trials in all; a far trial left then is kept, and the probe
    says so (`far_count`). Every trial, dropped or not, is still emitted as an event.
    With `stop_below` (samples/s), the trials end early once they are `clearly_slower`
    than it.
    """
    results: list[Trial] = []
    budget = 2 * plan.max_trials
    index = 0
    fastest = plan.trial_s / max(steps, 1)  # the step time `steps` was sized from

    def rates() -> list[float]:
        return [t.samples_per_s for t in results]

    while True:
        so_far = rates()
        leading, far = leading_outlier(so_far), far_trial(so_far)
        if plan.enough_trials(so_far) and not leading and far is None:
            break
        if leading:
            results.pop(0)
        elif index < budget and far is not None:
            results.pop(far)  # measured again; at the budget's end it stays, flagged
        if index >= budget:
            break
        index += 1
        timer.sync()
        start = timer.now()
        batches = work(steps)
        timer.sync()
        rank_seconds = tuple(gather(timer.now() - start))
        seconds = max(rank_seconds)
        rate = batches * samples_per_batch / seconds if seconds > 0 else math.inf
        trial = Trial(phase, index, batches, seconds, rate, rank_seconds)
        emit("trial", **trial.to_event())
        results.append(trial)
        if clearly_slower(rates(), stop_below):
            break
        if batches > 0 and seconds > 0:
            pace = seconds / batches
            # An overrun trial re-sizes the next from its own pace, slower or not: the
            # warm-up read a queue, not the loader (or the step itself changed). A trial
            # far shorter than trial_s was sized from a pace the loop left (a leading
            # trial's one-time work): it is measured again at its size, not kept.
            overran = seconds > TRIAL_OVERRUN * plan.trial_s
            if seconds * TRIAL_OVERRUN < plan.trial_s and plan.trial_steps(pace, phase) > batches:
                results.pop()
            fastest = pace if overran else min(fastest, pace)
            steps = plan.trial_steps(fastest, phase)
    return results
