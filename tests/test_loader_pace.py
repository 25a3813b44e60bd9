"""A loader whose workers deliver in rounds must not fool the warm-up or size trials wrong.

The first whole H200 ladder (bench/results/gpu-h200-2026-11-27) ran 2 probes in 533 s:
two DataLoader workers hand batches over in pairs, and warm-up windows of two steps
that caught a pair (or the queue filled during cuDNN's 37 s first step) "settled" at
the GPU's pace, 60x the loader's. Trials meant for 0.5 s then took 30 s each. Here a
discrete-event loader (workers, their prefetch queue, a slow first step) replays that.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from tuneup.config import loader_round
from tuneup.probe.figures import ProbeFigures
from tuneup.probe.plan import MeasurementPlan, plan_probe
from tuneup.probe.types import ProbeBudget
from tuneup.worker.phases import run_probe

BATCH = 64
COPY_S = 0.0114


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sync(self) -> None:
        pass


class RoundLoader:
    """A DataLoader in order: batch k from worker k % workers, each batch `batch_s` of that
    worker's time (give or take `jitter` of it, as files and caches vary), at most
    `prefetch` of a worker's batches made and not yet taken."""

    def __init__(
        self, clock: Clock, workers: int, batch_s: float, seed: int, jitter: float = 0.2
    ) -> None:
        self.clock, self.workers, self.batch_s, self.prefetch = clock, workers, batch_s, 2
        self.draw = random.Random(seed)
        self.jitter = jitter
        self.ready: list[float] = []  # when batch k is ready
        self.taken: list[float] = []  # when batch k was taken

    def _ready_at(self, k: int) -> float:
        while len(self.ready) <= k:
            n = len(self.ready)
            own_before = self.ready[n - self.workers] if n >= self.workers else 0.0
            slot = n - self.workers * self.prefetch  # the batch whose taking frees a slot
            freed = self.taken[slot] if slot >= 0 else 0.0
            made_in = self.batch_s * (1 + self.draw.uniform(-self.jitter, self.jitter))
            self.ready.append(max(own_before, freed) + made_in)
        return self.ready[k]

    def take(self) -> None:
        """The next batch, on the device: its copy takes 11 ms (the H200's IO of a batch from
        the queue, 0.5 s / 44 steps)."""
        k = len(self.taken)
        self.clock.t = max(self.clock.t, self._ready_at(k))
        self.taken.append(self.clock.t)
        self.clock.t += COPY_S


class LoaderBoundWorkload:
    """FULL waits for the loader then computes `compute_s`; the first step also pays
    `first_s` (cuDNN trying its algorithms); IO takes batches; SYNTHETIC computes."""

    graph_capture_s = 0.0
    scaler_overflows = 0
    compile_cache = ""

    def __init__(self, loader: RoundLoader, compute_s: float, first_s: float) -> None:
        self.loader, self.compute_s, self.first_s = loader, compute_s, first_s
        self.clock = loader.clock
        self.steps = 0
        self.kept = 0

    def _compute(self) -> None:
        self.clock.t += self.compute_s + (self.first_s if self.steps == 0 else 0.0)
        self.steps += 1

    def prepare(self, phase: str) -> None:
        if phase == "io":  # as SetupWorkload: the queue is taken, untimed
            for _ in range(self.loader.workers * self.loader.prefetch):
                self.loader.take()

    def full(self, steps: int, keep_losses: int = 0) -> int:
        for _ in range(steps):
            self.loader.take()
            self._compute()
        self.kept += keep_losses
        return steps

    def io(self, steps: int) -> int:
        for _ in range(steps):
            self.loader.take()
        return steps

    def synthetic(self, steps: int) -> int:
        for _ in range(steps):
            self._compute()
        return steps

    def read_losses(self) -> list[float]:
        values, self.kept = [1.0 / (i + 1) for i in range(self.kept)], 0
        return values

    def mem_peak_mb(self) -> float | None:
        return None


def h200_baseline_plan(workers: int) -> MeasurementPlan:
    """The h200 preset's baseline plan (trial_s 0.5, 2-5 trials, warm-up cap 6 s, 20 loss
    steps), with the loader round the worker sets from the probe's config."""
    budget = ProbeBudget(
        trial_s=0.5,
        min_trials=2,
        max_trials=5,
        trial_noise=0.005,
        warmup_cap_s=6.0,
        loss_steps=20,
        limit_s=300.0,
    )
    return dataclasses.replace(plan_probe(budget), loader_round=loader_round("lowmem", workers))


def measure(
    workers: int, batch_s: float, seed: int = 0
) -> tuple[ProbeFigures, list[dict[str, Any]]]:
    clock = Clock()
    loader = RoundLoader(clock, workers, batch_s, seed)
    workload = LoaderBoundWorkload(loader, 0.063, first_s=37.0)
    events: list[dict[str, Any]] = []
    result = run_probe(
        workload,  # type: ignore[arg-type]
        h200_baseline_plan(workers),
        samples_per_batch=BATCH,
        timer=clock,
        emit=lambda kind, **fields: events.append({"event": kind, **fields}),
    )
    return result, [e for e in events if e["event"] == "trial"]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("workers", "batch_s"), [(2, 1.5), (4, 1.55), (8, 2.1), (12, 2.6)])
def test_a_loader_bound_probe_measures_the_loaders_pace_in_trials_of_about_their_length(
    workers: int, batch_s: float, seed: int
) -> None:
    result, trials = measure(workers, batch_s, seed)
    pace = BATCH * workers / batch_s  # samples/s the workers keep up
    assert result.full_sps == pytest.approx(pace, rel=0.15)
    assert result.io_sps == pytest.approx(pace, rel=0.15)
    round_s = workers * BATCH / pace
    for trial in trials:
        if trial["phase"] != "synthetic":  # a loader round, or about trial_s when longer
            assert trial["seconds"] <= max(4 * 0.5, 1.5 * round_s), trial
    # The recorded H200 baseline's trials took 193 s (2 workers); its rounds take 1.5 s.
    assert result.timed_s < 40.0


def test_the_round_floor_and_the_trial_price_are_one_rule() -> None:
    plan = h200_baseline_plan(8)
    assert plan.trial_steps(0.01, "io") == 50  # trial_s fills 50 steps: more than a round
    assert plan.trial_steps(0.26, "full") == 8  # one round of 8 workers, not 2 steps
    assert plan.trial_steps(0.26, "synthetic") == 2  # SYNTHETIC reads no loader
    assert plan.trial_seconds(0.26, "io") == pytest.approx(8 * 0.26)
    assert plan.window_steps(0.26, "io") == 8
    assert loader_round("lowmem", 0) == 1 and loader_round("gpu", 8) == 1


def test_short_windows_never_settle_and_a_capped_warm_up_takes_the_pace_of_all_its_windows() -> (
    None
):
    from tuneup.worker.warmup import WarmupTracker

    tracker = WarmupTracker(tolerance=0.05, cap_s=6.0, short_s=0.0625)
    tracker.add(1, 37.0)  # the first step: cuDNN's search, the queue filling meanwhile
    tracker.add(2, 0.0228)  # two batches from the queue, 11 ms each
    tracker.add(2, 0.0228)  # two more: they agree, but drew the queue, not the loader
    assert not tracker.stable
    tracker.add(2, 1.5)  # the loader's pace: 0.75 s a step
    assert tracker.done  # the cap (6 s) has passed, unsettled
    # its steady step is the pace over the three windows after the first, not the last's
    assert tracker.steady_step_s == pytest.approx((0.0228 * 2 + 1.5) / 6)
