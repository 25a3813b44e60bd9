"""Warm-up until the step time is steady, and the one-time costs it reveals (see phases.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tuneup.probe.plan import SHORT_WINDOW_SHARE, MeasurementPlan
from tuneup.worker.trials import Emit, Gather, Timer, one_rank

WarmupWork = Callable[[int, int], int]
"""``work(steps, keep_losses)``: run steps, keeping the losses of the first `keep_losses`."""


def within(a: float, b: float, tolerance: float) -> bool:
    """True when two step times differ by at most ``tolerance`` of the smaller one."""
    low, high = min(a, b), max(a, b)
    if low <= 0:
        return high <= 0
    return high / low - 1.0 <= tolerance


@dataclass
class WarmupTracker:
    """The warm-up stopping rule, fed window by window.

    Only windows that lasted at least `short_s` can settle it: a shorter one drew
    batches a loader had made ahead (its queue) and says nothing of its pace. Where the
    cap ends it unsettled, the steady step is the pace over every window after the first
    (one window's luck would size every trial after it). The cap never ends it on the
    first step alone: that step is one-time work (cuDNN's search of a new conv key takes
    13-66 s on an H200), never the pace, and a warm-up ended there booked it as warm-up
    and sized the trials from it (the second H200 ladder's fp32 probe in a resumed worker).

    Args:
        tolerance: relative step-time difference that counts as stable.
        cap_s: the warm-up ends once it has taken this long, steady or not.
        min_steps: steps that must run whatever the timing (the loss steps).
        phase: the phase it warms (its windows span a loader round where it reads one).
        short_s: a window shorter than this cannot settle the warm-up.
    """

    tolerance: float
    cap_s: float
    min_steps: int = 0
    phase: str = "full"
    short_s: float = 0.0
    steps: int = 0
    seconds: float = 0.0
    step_times: list[float] = field(default_factory=list)
    window_s: list[float] = field(default_factory=list)

    def next_window(self, plan: MeasurementPlan) -> int:
        """Steps to run next: the first step alone, then about a quarter of a trial."""
        if not self.step_times:
            return 1
        return plan.window_steps(self.step_times[-1], self.phase)

    def add(self, steps: int, seconds: float) -> None:
        self.steps += steps
        self.seconds += seconds
        self.step_times.append(seconds / steps)
        self.window_s.append(seconds)

    @property
    def stable(self) -> bool:
        times, lasted = self.step_times, self.window_s
        # (a window of no measurable time, a fake clock's, is no queue: it may settle)
        if len(times) < 2 or any(0 < w < self.short_s for w in lasted[-2:]):
            return False
        return within(times[-2], times[-1], self.tolerance)

    @property
    def done(self) -> bool:
        if len(self.step_times) < 2 or self.steps < self.min_steps:
            return False
        return self.stable or self.seconds >= self.cap_s

    @property
    def steady_step_s(self) -> float | None:
        if not self.step_times:
            return None
        if self.stable or len(self.step_times) < 2:
            return self.step_times[-1]
        after_first = zip(self.window_s[1:], self.step_times[1:], strict=True)
        steps = sum(lasted / step for lasted, step in after_first)
        return sum(self.window_s[1:]) / steps if steps > 0 else self.step_times[-1]

    @property
    def excess_s(self) -> float:
        """What the warm-up took beyond its steps at the steady step time: one-time work."""
        steady = self.steady_step_s or 0.0
        return max(0.0, self.seconds - steady * self.steps)


def one_time_costs(
    trackers: list[WarmupTracker],
    *,
    graph_capture_s: float = 0.0,
    start_costs: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The costs paid once per run, in seconds (see phases.py's module docstring)."""
    costs: dict[str, float] = dict(start_costs or {})
    excess = sum(t.excess_s for t in trackers)
    costs["first_steps"] = max(0.0, excess - graph_capture_s)
    if graph_capture_s > 0:
        costs["graph_capture"] = graph_capture_s
    return costs


def break_even_steps(one_time_s: dict[str, float], steady_step_s: float | None) -> float | None:
    """One-time cost in steady steps: how many steps it takes to amortise it."""
    if not steady_step_s or steady_step_s <= 0:
        return None
    return sum(one_time_s.values()) / steady_step_s


def warm_up(
    work: WarmupWork,
    plan: MeasurementPlan,
    *,
    timer: Timer,
    emit: Emit,
    gather: Gather = one_rank,
    loss_steps: int = 0,
    read_losses: Callable[[], list[float]] | None = None,
    phase: str = "full",
) -> tuple[WarmupTracker, list[float]]:
    """Windows of `work` until the step time is steady (or the cap); the first `loss_steps`
    steps keep their losses, read once they are done (one device sync, outside any window)
    and emitted as ``loss`` events."""
    tracker = WarmupTracker(
        plan.warmup_tolerance,
        plan.warmup_cap_s,
        min_steps=loss_steps,
        phase=phase,
        short_s=SHORT_WINDOW_SHARE * plan.window_s,
    )
    losses: list[float] = []
    losses_read = loss_steps == 0
    while not tracker.done:
        steps = tracker.next_window(plan)
        keep = min(steps, max(0, loss_steps - tracker.steps))
        timer.sync()
        start = timer.now()
        ran = work(steps, keep) or steps
        timer.sync()
        tracker.add(ran, max(gather(timer.now() - start)))
        if not losses_read and tracker.steps >= loss_steps:
            losses = read_losses() if read_losses is not None else []
            losses_read = True
            for step, value in enumerate(losses, start=1):
                emit("loss", step=step, value=value)
    return tracker, losses
