"""Warm-up to a stable step time, and the one-time costs it reveals (see phases.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tuneup.probe.types import Budget
from tuneup.worker.trials import Emit, Gather, Timer, Workload, one_rank


def within(a: float, b: float, tolerance: float) -> bool:
    """True when two step times differ by at most ``tolerance`` of the smaller one."""
    low, high = min(a, b), max(a, b)
    if low <= 0:
        return high <= 0
    return high / low - 1.0 <= tolerance


@dataclass
class WarmupTracker:
    """The warm-up stopping rule, fed window by window.

    Args:
        window: steps per timed window.
        max_steps: warm-up cap; never below ``min_steps``.
        tolerance: relative step-time difference that counts as stable.
        min_steps: steps that must run whatever the timing (the loss steps).
    """

    window: int
    max_steps: int
    tolerance: float
    min_steps: int = 0
    steps: int = 0
    seconds: float = 0.0
    step_times: list[float] = field(default_factory=list)

    @property
    def cap(self) -> int:
        return max(self.max_steps, self.min_steps, 1)

    def next_window(self) -> int:
        """Steps to run next: a full window, cut short at the cap."""
        return max(1, min(self.window, self.cap - self.steps))

    def add(self, steps: int, seconds: float) -> None:
        self.steps += steps
        self.seconds += seconds
        self.step_times.append(seconds / steps)

    @property
    def stable(self) -> bool:
        times = self.step_times
        return len(times) >= 2 and within(times[-2], times[-1], self.tolerance)

    @property
    def done(self) -> bool:
        if not self.step_times or self.steps < self.min_steps:
            return False
        return self.stable or self.steps >= self.cap

    @property
    def steady_step_s(self) -> float | None:
        return self.step_times[-1] if self.step_times else None


def one_time_costs(
    tracker: WarmupTracker,
    *,
    graph_capture_s: float = 0.0,
    start_costs: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The costs paid once per run, in seconds (see the module docstring)."""
    costs: dict[str, float] = dict(start_costs or {})
    steady = tracker.steady_step_s or 0.0
    costs["first_steps"] = max(0.0, tracker.seconds - graph_capture_s - steady * tracker.steps)
    if graph_capture_s > 0:
        costs["graph_capture"] = graph_capture_s
    return costs


def break_even_steps(one_time_s: dict[str, float], steady_step_s: float | None) -> float | None:
    """One-time cost in steady steps: how many steps it takes to amortise it."""
    if not steady_step_s or steady_step_s <= 0:
        return None
    return sum(one_time_s.values()) / steady_step_s


def warm_up(
    workload: Workload,
    budget: Budget,
    *,
    timer: Timer,
    emit: Emit,
    gather: Gather = one_rank,
) -> tuple[WarmupTracker, list[float]]:
    """The loss steps and the warm-up windows; emits ``loss`` events once the loss steps end."""
    tracker = WarmupTracker(
        window=budget.warmup_min_steps,
        max_steps=budget.warmup_max_steps,
        tolerance=budget.warmup_tolerance,
        min_steps=budget.loss_steps,
    )
    losses: list[float] = []
    losses_read = budget.loss_steps == 0
    while not tracker.done:
        steps = tracker.next_window()
        keep = min(steps, max(0, budget.loss_steps - tracker.steps))
        timer.sync()
        start = timer.now()
        workload.full(steps, keep_losses=keep)
        timer.sync()
        tracker.add(steps, max(gather(timer.now() - start)))
        if not losses_read and tracker.steps >= budget.loss_steps:
            losses = workload.read_losses()  # outside the timed window
            losses_read = True
            for step, value in enumerate(losses, start=1):
                emit("loss", step=step, value=value)
    return tracker, losses
