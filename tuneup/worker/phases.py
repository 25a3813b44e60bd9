"""Measuring one probe: fixed-seed loss, warm-up to a stable step time, then the phases.

The order, and why:

1. **Loss.** The first ``loss_steps`` steps are real training steps (loader,
   device copy, graph capture, learning rate, step) from the freshly built,
   fixed-seed model, so step *n* of any probe is comparable with step *n* of
   the baseline whatever the probe changed in the arithmetic (TF32, AMP,
   fused Adam, JIT, graphs). The loss tensors stay on the device and are read
   back once, after the last of them.
2. **Warm-up.** The loss steps are also the start of the warm-up: steps are
   timed in windows of ``warmup_min_steps`` (device synchronised at window
   edges only) and warm-up ends at the first window whose step time is
   within ``warmup_tolerance`` of the previous window's, once the loss steps
   are done, or when ``warmup_max_steps`` is reached (never before the loss
   steps). The last window's step time is the steady step time.
3. **Phases**, in the spec's order: T trials of K steps each, synchronised at
   trial edges only. IO moves loader batches to the device without the
   model; SYNTHETIC runs one cached device batch through the step; FULL is
   the real loop. Samples/s count the global batch (all ranks).

Several ranks: at each trial (and warm-up window) edge, every rank's seconds
are gathered (one collective, outside the timed span) and the slowest rank's
set the job's samples/s. The result also gives each rank's own FULL rate
(``rank_sps``: its local batch over its own seconds) and the ``stragglers``:
ranks whose median FULL trial takes more than :data:`STRAGGLER_THRESHOLD`
longer than the median rank's. Under DDP the ranks wait for each other at
every step's gradient all-reduce, so their FULL times agree up to the trial
edges and a slow rank slows them all alike; stragglers show plainly where
ranks do not synchronise (``noddp``).

One-time costs are reported apart from the measurement (``one_time_s``):
``spawn`` (process start to setup built, measured by the worker),
``graph_capture`` (CUDA graph capture, when on), and ``first_steps``: what the
warm-up took beyond its steps at the steady step time, i.e. compilation,
cuDNN autotuning and allocator growth. ``break_even_steps`` is their sum in
steady steps: a run shorter than that spends more time starting than
training (compare it with the run's steps, not with another probe's).

Everything is driven through two small interfaces, :class:`Timer` (clock and
device sync) and :class:`Workload` (the three kinds of work), so the rules
are tested with fakes; :class:`DeviceTimer` and :class:`SetupWorkload` bind
them to a real :class:`~tuneup.trainer.build.TrainingSetup`. torch is
imported only by those two.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tuneup.errors import UsageError
from tuneup.probe.stats import iqr_pct, median, quantile, relative_spread  # noqa: F401
from tuneup.probe.types import PHASES, Budget

if TYPE_CHECKING:
    import torch

    from tuneup.config import TrainConfig
    from tuneup.trainer.build import TrainingSetup

Emit = Callable[..., None]
"""``emit(kind, **fields)``: writes one event (see :mod:`tuneup.probe.events`)."""

Gather = Callable[[float], list[float]]
"""Every rank's value of this rank's seconds, in rank order (``[seconds]`` on one rank)."""

STRAGGLER_THRESHOLD = 0.10
"""A rank whose median FULL trial takes 10% longer than the median rank's is a straggler:
beyond the few percent trials vary by on a quiet node."""


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
    scaler_overflows: int

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


def _alone(seconds: float) -> list[float]:
    return [seconds]


# The loader's state when a phase starts is part of what it measures. FULL comes
# straight after the warm-up (FULL steps too), so its prefetch queue is where the
# real loop keeps it; IO drains what FULL left queued before its trials; SYNTHETIC,
# which reads no batch, comes last, so the queue it lets fill up flatters nothing.
MEASURE_ORDER = ("full", "io", "synthetic")


def measure_order(phases: Iterable[str]) -> list[str]:
    """The phases asked for, in the order that starts each from its loader's steady state."""
    wanted = set(phases)
    return [p for p in MEASURE_ORDER if p in wanted]


# ---- pure rules -------------------------------------------------------------


def check_budget(budget: Budget, phases: Iterable[str]) -> None:
    """Refuse a budget or phase list the worker cannot measure with."""
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise UsageError(f"unknown phase {unknown[0]!r}: phases are {', '.join(PHASES)}")
    at_least_one = {
        "trial_steps": budget.trial_steps,
        "trials": budget.trials,
        "warmup_min_steps": budget.warmup_min_steps,
    }
    for name, value in at_least_one.items():
        if value < 1:
            raise UsageError(f"budget {name} must be at least 1, got {value}")
    for name in ("warmup_max_steps", "loss_steps"):
        if getattr(budget, name) < 0:
            raise UsageError(f"budget {name} must be 0 or more, got {getattr(budget, name)}")
    if budget.warmup_tolerance < 0:
        raise UsageError(
            f"budget warmup_tolerance must be 0 or more, got {budget.warmup_tolerance}"
        )


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
    tracker: WarmupTracker, *, graph_capture_s: float = 0.0, spawn_s: float | None = None
) -> dict[str, float]:
    """The costs paid once per run, in seconds (see the module docstring)."""
    costs: dict[str, float] = {}
    if spawn_s is not None:
        costs["spawn"] = spawn_s
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


def run_trials(
    phase: str,
    work: Callable[[int], int],
    *,
    trials: int,
    steps: int,
    samples_per_batch: int,
    timer: Timer,
    emit: Emit,
    gather: Gather = _alone,
    extend: int | None = None,
) -> list[Trial]:
    """T trials of ``work(steps)``, the device synchronised only at each trial's edges.

    Each trial's rate is the global batch over the slowest rank's seconds. A
    leading trial far slower than the rest (`leading_outlier`) is dropped and
    one more trial run in its place, up to `extend` times (default: T), so
    one-time work that outlasted the warm-up never reaches the figures; every
    trial, dropped or not, is still emitted as an event.
    """
    results: list[Trial] = []
    budget = trials + (trials if extend is None else extend)
    index = 0
    while len(results) < trials or leading_outlier([t.samples_per_s for t in results]):
        if leading_outlier([t.samples_per_s for t in results]):
            results.pop(0)
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
    return results


def warm_up(
    workload: Workload,
    budget: Budget,
    *,
    timer: Timer,
    emit: Emit,
    gather: Gather = _alone,
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


def run_probe(
    workload: Workload,
    budget: Budget,
    phases: Iterable[str],
    *,
    samples_per_batch: int,
    timer: Timer,
    emit: Emit,
    spawn_s: float | None = None,
    gather: Gather = _alone,
) -> dict[str, Any]:
    """Loss, warm-up, then each phase; emits every event but ``start`` and returns the result.

    Args:
        workload: the work to time (a :class:`SetupWorkload` in the worker).
        budget: warm-up rule, K, T and the loss steps.
        phases: names from PHASES, measured in this order.
        samples_per_batch: the global batch, so samples/s are the job's.
        timer: clock and device sync.
        emit: event sink, ``emit(kind, **fields)``.
        spawn_s: process start to setup built, when the caller measured it.
        gather: every rank's seconds at a trial edge (a collective under DDP);
            the slowest rank's count. ``[seconds]`` on one rank.
    """
    world = 1

    def gathered(seconds: float) -> list[float]:
        nonlocal world
        values = gather(seconds)
        world = len(values)
        return values

    began = timer.now()
    tracker, losses = warm_up(workload, budget, timer=timer, emit=emit, gather=gathered)
    warmup_s = timer.now() - began
    one_time = one_time_costs(tracker, graph_capture_s=workload.graph_capture_s, spawn_s=spawn_s)
    steady = tracker.steady_step_s
    break_even = break_even_steps(one_time, steady)
    emit(
        "warmup",
        seconds=warmup_s,
        steps=tracker.steps,
        steady_step_s=steady,
        stable=tracker.stable,
        one_time_s=one_time,
        break_even_steps=break_even,
    )
    work: dict[str, Callable[[int], int]] = {
        "io": workload.io,
        "synthetic": workload.synthetic,
        "full": workload.full,
    }
    rates: dict[str, list[float]] = {}
    full_trials: list[Trial] = []
    discarded = 0
    for phase in measure_order(phases):
        workload.prepare(phase)
        trials = run_trials(
            phase,
            work[phase],
            trials=budget.trials,
            steps=budget.trial_steps,
            samples_per_batch=samples_per_batch,
            timer=timer,
            emit=emit,
            gather=gathered,
        )
        rates[phase] = [t.samples_per_s for t in trials]
        discarded += trials[0].index - 1 if trials else 0
        if phase == "full":
            full_trials = trials
    full = rates.get("full", [])
    rank_sps, stragglers = rank_rates(full_trials, samples_per_batch / world)
    result: dict[str, Any] = {
        "io_sps": median(rates["io"]) if "io" in rates else None,
        "synthetic_sps": median(rates["synthetic"]) if "synthetic" in rates else None,
        "full_sps": median(full) if full else None,
        "full_sps_trials": full,
        "io_sps_trials": rates.get("io", []),
        "synthetic_sps_trials": rates.get("synthetic", []),
        "iqr_pct": iqr_pct(full) if full else None,
        "loss_start": losses[0] if losses else None,
        "loss_end": losses[-1] if losses else None,
        "losses": losses,
        "scaler_overflows": workload.scaler_overflows,
        "mem_peak_mb": workload.mem_peak_mb(),
        "warmup_s": warmup_s,
        "warmup_steps": tracker.steps,
        "steady_step_s": steady,
        "one_time_s": one_time,
        "break_even_steps": break_even,
        "ranks": world,
        "rank_sps": rank_sps,
        "stragglers": stragglers,
        "trials_discarded": discarded,
    }
    emit("result", **result)
    return result


# ---- binding to a real training setup ----------------------------------------


class BatchStream:
    """A finite loader as an endless stream: when an epoch runs out, the next one starts.

    Restarting the iterator is what a new epoch of training does (fresh crops,
    workers restarted unless persistent), so the cost shows up where it would.
    """

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader
        self.epochs = 0
        self._it: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.next()

    def next(self) -> Any:
        if self._it is not None:
            try:
                return next(self._it)
            except StopIteration:
                pass
        self._it = iter(self.loader)
        self.epochs += 1
        try:
            return next(self._it)
        except StopIteration:
            raise UsageError(
                "the training loader gives no batch: raise Nsamples or lower the batch size"
            ) from None


def prefetched_batches(cfg: TrainConfig) -> int:
    """Batches a loader holds ready ahead of the loop: workers x prefetch_factor, or DALI's."""
    if cfg.data_loader_config.startswith("dali"):
        return cfg.dali_prefetch
    if cfg.num_data_workers <= 0:
        return 0
    per_worker = cfg.prefetch_factor if cfg.prefetch_factor is not None else 2  # torch's default
    return cfg.num_data_workers * per_worker + (1 if cfg.pin_memory else 0)


class DeviceTimer:
    """``time.perf_counter`` and ``torch.cuda.synchronize`` on the setup's device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def now(self) -> float:
        return time.perf_counter()

    def sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)


class SetupWorkload:
    """The three kinds of work on a real TrainingSetup; the step count drives the LR schedule."""

    def __init__(self, setup: TrainingSetup, timer: Timer) -> None:
        if setup.train_loader is None:
            raise UsageError("the probe needs the training loader: build with with_loaders=True")
        self.setup = setup
        self.timer = timer
        self.stream = BatchStream(setup.train_loader)
        self._batches = setup.device_batches(self.stream)
        self.steps_done = 0
        self.graph_capture_s = 0.0
        self._graph_checked = False
        self._pending: list[torch.Tensor] = []
        self._cached: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def scaler_overflows(self) -> int:
        return self.setup.step.scaler_overflows

    def _device_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return next(self._batches)

    def _ensure_graph(self, inp: torch.Tensor, tar: torch.Tensor) -> None:
        """Capture on the first batch; the capture's own time is a one-time cost of its own."""
        if self._graph_checked:
            return
        self._graph_checked = True
        if not self.setup.cfg.cuda_graphs:
            return
        self.setup.ensure_graph(inp, tar)
        self.graph_capture_s += getattr(self.setup.step, "capture_s", 0.0)

    def full(self, steps: int, keep_losses: int = 0) -> int:
        from tuneup.trainer.optim import set_lr

        setup = self.setup
        for i in range(steps):
            inp, tar = self._device_batch()
            self._ensure_graph(inp, tar)
            self.steps_done += 1
            set_lr(setup.optimizer, setup.schedule(self.steps_done))
            loss = setup.step(inp, tar)
            if i < keep_losses:
                self._pending.append(loss)
        return steps

    def io(self, steps: int) -> int:
        for _ in range(steps):
            self._device_batch()
        return steps

    def prepare(self, phase: str) -> None:
        if phase == "synthetic" and self._cached is None:
            self._cached = self._device_batch()
            self.timer.sync()
        if phase == "io":
            # Batches the loader prepared while the model ran would make IO's first
            # trial a read of the queue: take them, untimed, so IO times the loader.
            for _ in range(prefetched_batches(self.setup.cfg)):
                self._device_batch()
            self.timer.sync()

    @property
    def cached_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The device batch SYNTHETIC steps on (taken from the loader on first use)."""
        self.prepare("synthetic")
        assert self._cached is not None
        return self._cached

    def synthetic(self, steps: int) -> int:
        self.prepare("synthetic")
        assert self._cached is not None
        inp, tar = self._cached
        for _ in range(steps):
            self.setup.step(inp, tar)
        return steps

    def read_losses(self) -> list[float]:
        import torch

        if not self._pending:
            return []
        values = torch.stack(self._pending).float().cpu().tolist()
        self._pending.clear()
        return values

    def mem_peak_mb(self) -> float | None:
        """The CUDA caching allocator's peak (tensors only: NVML's reading is larger)."""
        import torch

        if self.setup.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.setup.device) / 2**20
