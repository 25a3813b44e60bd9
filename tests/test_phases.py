"""The probe's measuring rules with a fake clock and workload, then against the real trainer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tuneup.errors import UsageError
from tuneup.probe.plan import MeasurementPlan, plan_probe
from tuneup.probe.stats import clearly_slower, iqr_pct, median, quantile
from tuneup.probe.types import ProbeBudget
from tuneup.worker.phases import run_probe
from tuneup.worker.trials import leading_outlier, rank_rates, run_trials
from tuneup.worker.warmup import one_time_costs, warm_up, within
from tuneup.worker.workload import BatchStream


class FakeTimer:
    """A clock that moves only when the fake workload works; counts device syncs."""

    def __init__(self) -> None:
        self.t = 0.0
        self.syncs = 0

    def now(self) -> float:
        return self.t

    def sync(self) -> None:
        self.syncs += 1


class FakeWorkload:
    """Steps take scripted times (the last repeats); losses count down from 1."""

    def __init__(self, timer: FakeTimer, step_times: list[float], *, io_s: float = 0.01) -> None:
        self.timer = timer
        self.step_times = step_times
        self.io_s = io_s
        self.steps = 0
        self.kept: list[float] = []
        self.reads = 0
        self.syncs_inside_work = 0
        self.graph_capture_s = 0.0
        self.scaler_overflows = 2
        self.compile_cache = ""
        self.prepared: list[str] = []

    def _step(self) -> None:
        index = min(self.steps, len(self.step_times) - 1)
        self.timer.t += self.step_times[index]
        self.steps += 1

    def prepare(self, phase: str) -> None:
        self.prepared.append(phase)

    def full(self, steps: int, keep_losses: int = 0) -> int:
        before = self.timer.syncs
        for i in range(steps):
            self._step()
            if i < keep_losses:
                self.kept.append(1.0 / self.steps)
        self.syncs_inside_work += self.timer.syncs - before
        return steps

    def io(self, steps: int) -> int:
        self.timer.t += steps * self.io_s
        return steps

    def synthetic(self, steps: int) -> int:
        for _ in range(steps):
            self._step()
        return steps

    def mem_peak_mb(self) -> float | None:
        return 512.0

    def read_losses(self) -> list[float]:
        self.reads += 1
        values, self.kept = self.kept, []
        return values


class Events:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.records.append({"event": kind, **fields})

    def kinds(self) -> list[str]:
        return [r["event"] for r in self.records]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] == kind]


def plan(
    phases: tuple[str, ...] = ("full",),
    *,
    judged: str | None = None,
    stop_below: float | None = None,
    **budget: Any,
) -> MeasurementPlan:
    """A plan of `phases` under a budget of the given fields (a test's own phases)."""
    defaults = {"trial_s": 1.0, "min_trials": 3, "max_trials": 3, "loss_steps": 0}
    made = plan_probe(ProbeBudget(**{**defaults, **budget}), stop_below_sps=stop_below)
    judged = judged or ("full" if "full" in phases else phases[0])
    return dataclasses.replace(made, phases=tuple(phases), judged=judged)


def test_statistics_match_hand_computed_values() -> None:
    assert median([4.0, 1.0, 3.0, 2.0]) == pytest.approx(2.5)
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == pytest.approx(2.0)
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == pytest.approx(4.6)
    assert iqr_pct([8.0, 10.0, 12.0]) == pytest.approx(20.0)  # (11 - 9) / 10
    assert iqr_pct([5.0]) == 0.0


def test_within_is_relative_and_symmetric() -> None:
    assert within(1.0, 1.04, 0.05) and within(1.04, 1.0, 0.05)
    assert not within(1.0, 1.06, 0.05) and not within(1.06, 1.0, 0.05)


def test_warmup_times_the_first_step_alone_then_stops_at_two_agreeing_windows() -> None:
    timer = FakeTimer()
    # step 1 pays 1 s of compilation, then every step takes 0.1 s
    workload = FakeWorkload(timer, [1.1, 0.1])
    events = Events()
    tracker, losses = warm_up(
        lambda n, keep: workload.full(n, keep), plan(trial_s=1.0), timer=timer, emit=events
    )
    # windows: 1 step (1.1 s), then a quarter trial of 0.1 s steps (2 steps), twice
    assert tracker.step_times == pytest.approx([1.1, 0.1, 0.1])
    assert tracker.steps == 5
    assert tracker.stable and tracker.steady_step_s == pytest.approx(0.1)
    assert tracker.excess_s == pytest.approx(1.0)
    assert losses == [] and events.of("loss") == []


def test_warmup_stops_at_its_time_cap_when_never_steady() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.1 * 1.5**i for i in range(50)])  # always slowing down
    tracker, _ = warm_up(
        lambda n, keep: workload.full(n, keep),
        plan(trial_s=1.0, warmup_cap_s=5.0),
        timer=timer,
        emit=Events(),
    )
    assert not tracker.stable
    assert 5.0 <= tracker.seconds < 5.0 + 10.0  # it stops at the first window past the cap


def test_loss_steps_run_first_even_past_the_warmup_cap_and_are_read_once() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.1])  # stable from the start
    events = Events()
    tracker, losses = warm_up(
        lambda n, keep: workload.full(n, keep),
        plan(trial_s=1.0, warmup_cap_s=0.01),
        timer=timer,
        emit=events,
        loss_steps=7,
        read_losses=workload.read_losses,
    )
    assert tracker.steps >= 7
    assert workload.reads == 1
    assert losses == pytest.approx([1.0 / n for n in range(1, 8)])
    assert [e["step"] for e in events.of("loss")] == list(range(1, 8))
    assert [e["value"] for e in events.of("loss")] == losses


def test_a_trial_lasts_trial_s_whatever_the_step_time() -> None:
    # a 60 ms GPU step and a 0.5 s loader-bound one are timed alike: 1 s a trial
    for step_s, steps in ((0.06, 17), (0.5, 2)):
        timer = FakeTimer()
        workload = FakeWorkload(timer, [step_s])
        trials = run_trials(
            "full",
            workload.full,
            plan(trial_s=1.0),
            steps=1,  # a bad first guess: the next trials follow the measured step
            samples_per_batch=8,
            timer=timer,
            emit=Events(),
        )
        assert [t.batches for t in trials][1:] == [steps, steps]
        assert all(t.samples_per_s == pytest.approx(8 / step_s) for t in trials)


def test_trials_stop_once_they_agree_and_take_the_most_when_they_do_not() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.1])  # steady to the last digit
    agreeing = run_trials(
        "synthetic",
        workload.synthetic,
        plan(("synthetic",), min_trials=2, max_trials=5, trial_noise=0.01),
        steps=10,
        samples_per_batch=1,
        timer=timer,
        emit=Events(),
    )
    assert len(agreeing) == 2
    noisy = FakeWorkload(timer, [0.1, 0.13, 0.1, 0.12, 0.1, 0.14] * 10)
    disagreeing = run_trials(
        "synthetic",
        noisy.synthetic,
        plan(("synthetic",), min_trials=2, max_trials=5, trial_noise=0.01),
        steps=1,
        samples_per_batch=1,
        timer=timer,
        emit=Events(),
    )
    assert len(disagreeing) == 5


def test_trials_sync_only_at_their_edges_and_count_global_samples() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.5])
    events = Events()
    trials = run_trials(
        "full",
        workload.full,
        plan(trial_s=3.0, min_trials=4, max_trials=4),
        steps=6,
        samples_per_batch=8,
        timer=timer,
        emit=events,
    )
    assert timer.syncs == 2 * 4
    assert workload.syncs_inside_work == 0
    assert [t.index for t in trials] == [1, 2, 3, 4]
    assert all(t.batches == 6 and t.seconds == pytest.approx(3.0) for t in trials)
    assert all(t.samples_per_s == pytest.approx(6 * 8 / 3.0) for t in trials)
    assert len(events.of("trial")) == 4


def test_the_slowest_rank_sets_the_rate() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.5])
    trials = run_trials(
        "synthetic",
        workload.synthetic,
        plan(("synthetic",), min_trials=1, max_trials=1),
        steps=2,
        samples_per_batch=4,
        timer=timer,
        emit=Events(),
        gather=lambda seconds: [seconds, seconds * 2],  # rank 1 took twice as long
    )
    assert trials[0].samples_per_s == pytest.approx(2 * 4 / 2.0)


def test_every_rank_s_seconds_are_kept_and_the_slowest_sets_the_job_s_rate() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.5])  # this rank: 1 s a trial of 2 steps
    events = Events()
    # Four ranks of 2 samples each; rank 2 takes 30% longer than the others.
    result = run_probe(
        workload,
        plan(trial_s=1.0, warmup_cap_s=0.1),
        samples_per_batch=8,
        timer=timer,
        emit=events,
        gather=lambda s: [s, s * 1.02, s * 1.3, s],
    )

    trial = events.of("trial")[0]
    assert trial["rank_seconds"] == pytest.approx([1.0, 1.02, 1.3, 1.0])
    assert trial["seconds"] == pytest.approx(1.3)
    assert result.full_sps == pytest.approx(2 * 8 / 1.3)
    assert result.ranks == 4
    assert result.rank_sps == pytest.approx([4.0, 4.0 / 1.02, 4.0 / 1.3, 4.0])
    assert result.stragglers == (2,)
    # The job can never beat its slowest rank times the ranks.
    assert result.full_sps <= min(result.rank_sps) * 4 * (1 + 1e-9)


def test_one_rank_is_its_own_rank_rate_and_trials_carry_no_rank_list() -> None:
    timer = FakeTimer()
    events = Events()
    result = run_probe(
        FakeWorkload(timer, [0.5]), plan(), samples_per_batch=4, timer=timer, emit=events
    )

    assert "rank_seconds" not in events.of("trial")[0]
    assert (result.ranks, result.stragglers) == (1, ())
    assert result.rank_sps == pytest.approx([result.full_sps])


def test_stragglers_are_ranks_beyond_the_threshold_over_the_median_rank() -> None:
    from tuneup.worker.trials import Trial

    def trial(*seconds: float) -> Trial:
        return Trial("full", 1, 10, max(seconds), 0.0, seconds)

    # medians per rank: 1.0, 1.05, 1.2, 1.0 -> median rank 1.025 s
    trials = [trial(1.0, 1.05, 1.2, 0.9), trial(1.0, 1.05, 1.2, 1.1), trial(1.0, 1.0, 1.3, 1.0)]
    rates, stragglers = rank_rates(trials, local_batch=2)

    assert stragglers == [2]
    assert rank_rates(trials, local_batch=2, threshold=0.01)[1] == [1, 2]
    assert rates[0] == pytest.approx(20.0)
    assert rank_rates([], local_batch=2) == ([], [])


def test_probe_emits_loss_warmup_trials_result_in_order_and_records_its_plan() -> None:
    timer = FakeTimer()
    timer.t = 100.0
    workload = FakeWorkload(timer, [1.1, 0.1], io_s=0.02)
    events = Events()
    result = run_probe(
        workload,
        plan(("full", "io"), trial_s=0.5, loss_steps=4),
        samples_per_batch=4,
        timer=timer,
        emit=events,
        start_costs={"spawn": 2.0},
    )
    kinds = events.kinds()
    assert kinds[:4] == ["loss"] * 4 and kinds[-1] == "result"
    assert kinds.index("warmup") < kinds.index("trial")
    assert [e["phase"] for e in events.of("trial")] == ["full"] * 3 + ["io"] * 3
    assert workload.prepared == ["full", "io"]

    warmup = events.of("warmup")[0]
    assert warmup["steady_step_s"] == pytest.approx(0.1)
    # the first step took 1.1 s against 0.1 s steady: 1 s of one-time work
    assert warmup["one_time_s"] == pytest.approx({"spawn": 2.0, "first_steps": 1.0})
    assert warmup["break_even_steps"] == pytest.approx(3.0 / 0.1)

    assert result.full_sps == pytest.approx(4 / 0.1)  # 5 steps of 0.1 s a trial
    assert result.io_sps == pytest.approx(4 / 0.02)
    assert result.synthetic_sps is None
    assert result.full_sps_trials == pytest.approx([40.0] * 3)
    assert result.io_sps_trials == pytest.approx([200.0] * 3)
    assert result.losses == pytest.approx([1.0, 1 / 2, 1 / 3, 1 / 4])
    assert result.loss_start == 1.0 and result.loss_end == pytest.approx(0.25)
    assert result.scaler_overflows == 2 and result.mem_peak_mb == 512.0
    recorded = result.plan
    assert recorded["phases"] == ["full", "io"] and recorded["trial_s"] == 0.5
    assert recorded["steps"] == {"full": 5, "io": 25}  # what half a second held
    assert set(recorded["warmup_s"]) == {"full", "io"}


def test_a_probe_of_io_alone_trains_nothing_and_records_no_loss() -> None:
    budget = ProbeBudget(loss_steps=8)
    io_alone = plan_probe(budget, judged="io", whole=False)
    assert io_alone.phases == ("io",) and io_alone.loss_steps == 0
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.1], io_s=0.02)
    result = run_probe(workload, io_alone, samples_per_batch=1, timer=timer, emit=Events())
    assert workload.steps == 0  # the model never ran
    assert result.losses == () and result.full_sps is None


def test_a_probe_of_synthetic_alone_runs_its_loss_steps_on_the_real_loop_first() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.1])
    events = Events()
    syn = plan_probe(ProbeBudget(loss_steps=5, trial_s=0.5), judged="synthetic", whole=False)
    assert syn.phases == ("synthetic",)
    result = run_probe(workload, syn, samples_per_batch=1, timer=timer, emit=events)
    assert len(result.losses) == 5 and workload.reads == 1
    assert {e["phase"] for e in events.of("trial")} == {"synthetic"}
    assert result.plan["loss_s"] == pytest.approx(0.5)


def test_a_plan_measures_the_phase_that_judges_it_or_every_phase() -> None:
    budget = ProbeBudget()
    assert plan_probe(budget).phases == ("full", "io", "synthetic")
    assert plan_probe(budget, carried=("io",)).phases == ("full", "synthetic")
    assert plan_probe(budget, judged="io", whole=False, carried=("io",)).phases == ("io",)
    assert plan_probe(budget, judged="synthetic", available=("full",)).judged == "full"
    assert plan_probe(budget, loss=False).loss_steps == 0
    looser = plan_probe(budget, trial_noise=0.05)
    assert looser.trial_noise == 0.05 and plan_probe(budget, trial_noise=0.0001).trial_noise == (
        budget.trial_noise
    )


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"max_trials": 0}, "max_trials"),
        ({"min_trials": 3, "max_trials": 2}, "min_trials"),
        ({"trial_s": 0.0}, "trial_s"),
        ({"loss_steps": -1}, "loss_steps"),
    ],
)
def test_bad_plans_are_refused(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError, match=words):
        dataclasses.replace(plan_probe(ProbeBudget()), **fields).check()
    with pytest.raises(UsageError, match="'disk'"):
        dataclasses.replace(plan_probe(ProbeBudget()), phases=("full", "disk")).check()


def test_batch_stream_starts_a_new_epoch_when_the_loader_runs_out() -> None:
    stream = BatchStream([1, 2, 3])
    assert [stream.next() for _ in range(7)] == [1, 2, 3, 1, 2, 3, 1]
    assert stream.epochs == 3
    with pytest.raises(UsageError, match="no batch"):
        BatchStream([]).next()


def test_probe_losses_match_tuneup_train_step_for_step(
    tiny_config: Any, tmp_path: Path, restore_torch_state: None
) -> None:
    """Step n of a probe is step n of a real run with the same config (across an epoch edge)."""
    import json

    from tuneup.unet.build import build_training
    from tuneup.unet.distributed import DistEnv
    from tuneup.unet.loop import run_training
    from tuneup.unet.metrics import MetricsWriter
    from tuneup.worker.workload import DeviceTimer, SetupWorkload

    cfg = tiny_config(num_epochs=2, Nsamples_val=0, log_every=1)  # 4 steps per epoch
    metrics_path = tmp_path / "metrics.jsonl"
    writer = MetricsWriter(metrics_path)
    run_training(build_training(cfg, DistEnv()), metrics=writer)
    writer.close()
    records = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    trained = [r["loss"] for r in records if r["kind"] == "train"][:6]

    setup = build_training(cfg, DistEnv())
    timer = DeviceTimer(setup.device)
    events = Events()
    result = run_probe(
        SetupWorkload(setup, timer),
        plan(("full", "io", "synthetic"), trial_s=0.01, min_trials=1, max_trials=1, loss_steps=6),
        samples_per_batch=setup.global_batch,
        timer=timer,
        emit=events,
    )
    assert len(trained) == 6
    assert result.losses == pytest.approx(trained, rel=1e-6)
    assert all(v > 0 for v in (result.io_sps, result.synthetic_sps, result.full_sps))


def test_a_slow_first_trial_is_dropped_and_replaced_not_reported() -> None:
    # a compile that outlasted the warm-up: the first trial's 6 steps take 20 s
    timer = FakeTimer()
    workload = FakeWorkload(timer, [20.0 / 6] * 6 + [0.5])
    events = Events()
    trials = run_trials(
        "full",
        workload.full,
        plan(trial_s=3.0),
        steps=6,
        samples_per_batch=8,
        timer=timer,
        emit=events,
    )
    # trial 1 dropped; trial 2, sized from its pace (1 step, 0.5 s), is run again at 6
    assert [t.index for t in trials] == [3, 4, 5]
    assert all(t.seconds == pytest.approx(3.0) for t in trials)
    assert len(events.of("trial")) == 5  # every trial is still an event


def test_trials_are_extended_at_most_max_trials_times() -> None:
    timer = FakeTimer()
    slower = [4.0, 3.0, 2.0, 1.5, 1.0, 0.5]  # every trial much slower than the next
    workload = FakeWorkload(timer, [*slower, 0.5])
    trials = run_trials(
        "full",
        workload.full,
        plan(trial_s=0.01),
        steps=1,
        samples_per_batch=1,
        timer=timer,
        emit=Events(),
    )
    assert max(t.index for t in trials) <= 6
    assert not leading_outlier([10.0, 10.2, 9.9]) and leading_outlier([5.0, 10.2, 9.9])


def test_the_result_counts_the_trials_it_dropped_and_how_long_it_measured() -> None:
    timer = FakeTimer()
    # the first step and a warm-up window of 2 steps that agree, then a stall in trial 1
    workload = FakeWorkload(timer, [0.5] * 3 + [5.0, 0.5])
    result = run_probe(
        workload,
        plan(trial_s=0.5, warmup_cap_s=2.0),
        samples_per_batch=1,
        timer=timer,
        emit=Events(),
    )
    assert result.trials_discarded == 1
    assert result.full_sps_trials == pytest.approx([2.0, 2.0, 2.0])
    assert result.timed_s == pytest.approx(5.0 + 3 * 0.5)


def test_a_probe_clearly_short_of_its_bar_stops_after_two_trials_of_its_judged_phase() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.1])  # 4 samples a step: 40 samples/s
    events = Events()
    result = run_probe(
        workload,
        plan(("full", "io", "synthetic"), trial_s=0.5, loss_steps=2, stop_below=50.0),
        samples_per_batch=4,
        timer=timer,
        emit=events,
    )
    assert [e["phase"] for e in events.of("trial")] == ["full", "full"]
    assert result.full_sps == pytest.approx(40.0)
    assert result.io_sps is None and result.synthetic_sps is None
    assert result.stopped_early == (
        "stopped after 2 FULL trials: the best, 40 samples/s, is under the 50 it had to "
        "reach; IO and SYNTHETIC not measured"
    )
    assert result.timed_s == pytest.approx(1.0)


def test_a_bar_on_synthetic_stops_synthetic_and_never_full() -> None:
    timer = FakeTimer()
    events = Events()
    result = run_probe(
        FakeWorkload(timer, [0.1]),
        plan(("synthetic",), judged="synthetic", trial_s=0.5, stop_below=50.0),
        samples_per_batch=4,
        timer=timer,
        emit=events,
    )
    assert [e["phase"] for e in events.of("trial")] == ["synthetic", "synthetic"]
    assert result.stopped_early.startswith("stopped after 2 SYNTHETIC trials")


def test_a_probe_that_reaches_its_bar_is_measured_whole() -> None:
    timer = FakeTimer()
    workload = FakeWorkload(timer, [0.1])
    result = run_probe(
        workload,
        plan(("full", "io"), trial_s=0.5, stop_below=39.0),
        samples_per_batch=4,
        timer=timer,
        emit=Events(),
    )
    assert result.stopped_early == ""
    assert len(result.full_sps_trials) == 3 and result.io_sps is not None


def test_early_stop_needs_two_trials_and_their_best_decides() -> None:
    assert not clearly_slower([10.0], 50.0)  # one trial never stops a probe
    assert clearly_slower([10.0, 12.0], 50.0)
    assert not clearly_slower([10.0, 60.0], 50.0)  # a slow first trial is late one-time work
    assert not clearly_slower([10.0, 12.0], None)


class QueuedLoader:
    """A loader with a prefetch queue on the fake clock: batches arrive every `load_s`
    while anything runs, up to `depth` waiting; a step takes `compute_s` after its batch."""

    def __init__(self, timer: FakeTimer, *, load_s: float, compute_s: float, depth: int) -> None:
        self.timer, self.load_s, self.compute_s, self.depth = timer, load_s, compute_s, depth
        self.queue, self.seen = 0.0, 0.0
        self.graph_capture_s = 0.0
        self.scaler_overflows = 0
        self.compile_cache = ""

    def _fill(self) -> None:
        self.queue = min(self.depth, self.queue + (self.timer.t - self.seen) / self.load_s)
        self.seen = self.timer.t

    def _take(self) -> None:
        self._fill()
        if self.queue < 1.0:
            self.timer.t += (1.0 - self.queue) * self.load_s
            self._fill()
        self.queue -= 1.0

    def prepare(self, phase: str) -> None:
        if phase == "io":
            for _ in range(self.depth):
                self._take()

    def full(self, steps: int, keep_losses: int = 0) -> int:
        for _ in range(steps):
            self._take()
            self.timer.t += self.compute_s
        return steps

    def io(self, steps: int) -> int:
        for _ in range(steps):
            self._take()
        return steps

    def synthetic(self, steps: int) -> int:
        self.timer.t += steps * self.compute_s
        self._fill()
        return steps

    def mem_peak_mb(self) -> float | None:
        return None

    def read_losses(self) -> list[float]:
        return []


@pytest.mark.parametrize(
    ("load_s", "compute_s", "full_rate", "io_rate"),
    [(2.0, 1.0, 0.5, 0.5), (0.5, 1.0, 1.0, 2.0)],
    ids=["loader-bound", "compute-bound"],
)
def test_no_phase_reads_a_queue_another_phase_filled(load_s, compute_s, full_rate, io_rate) -> None:
    # 16 batches wait after SYNTHETIC (or after a compute-bound FULL); a phase that
    # starts on them times the queue, not the loader: the first trial runs too fast.
    timer = FakeTimer()
    workload = QueuedLoader(timer, load_s=load_s, compute_s=compute_s, depth=16)
    events = Events()
    run_probe(
        workload,
        plan(("io", "synthetic", "full"), trial_s=8.0, warmup_cap_s=40.0),
        samples_per_batch=1,
        timer=timer,
        emit=events,
    )
    rates = {
        phase: [t["samples_per_s"] for t in events.of("trial") if t["phase"] == phase]
        for phase in ("full", "io")
    }
    assert rates["full"] == pytest.approx([full_rate] * 3, rel=0.02)
    assert rates["io"] == pytest.approx([io_rate] * 3, rel=0.02)


@pytest.mark.parametrize(
    ("knobs", "queued"),
    [
        ({"num_data_workers": 0}, 0),
        ({"num_data_workers": 16, "pin_memory": False}, 32),  # torch's prefetch_factor 2
        ({"num_data_workers": 4, "prefetch_factor": 4, "pin_memory": True}, 17),
        ({"data_loader_config": "dali-lowmem", "dali_prefetch": 3}, 3),
    ],
)
def test_io_first_takes_what_the_loader_had_queued(tiny_config, knobs, queued) -> None:
    from tuneup.worker.workload import prefetched_batches

    assert prefetched_batches(tiny_config(**knobs)) == queued


def test_a_first_step_past_the_cap_is_booked_as_first_step_not_as_the_pace() -> None:
    # the second H200 ladder: a warm probe whose conv key was new to its process spent 33 s
    # in its first step (cuDNN's search), past the 6 s cap; steps then took 63 ms
    timer = FakeTimer()
    workload = FakeWorkload(timer, [33.0, 0.063])
    tracker, _ = warm_up(
        lambda n, keep: workload.full(n, keep),
        plan(trial_s=0.5, warmup_cap_s=6.0),
        timer=timer,
        emit=Events(),
    )
    assert len(tracker.step_times) >= 2
    assert tracker.steady_step_s == pytest.approx(0.063)
    costs = one_time_costs([tracker])
    assert costs["first_steps"] == pytest.approx(33.0 - 0.063, rel=1e-3)


def test_a_profile_that_fails_costs_the_probe_nothing_and_says_why() -> None:
    """The trials are measured before the profile: its failure (the profiler's own, a trace
    that cannot be read) leaves the probe's figures, and its profile says why it has none."""
    timer = FakeTimer()
    events = Events()

    def profile(steps: int, steady_step_s: float | None) -> dict[str, Any]:
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED:\nthe driver has no profiling support")

    profiled = dataclasses.replace(plan(), profile=True)
    result = run_probe(
        FakeWorkload(timer, [0.5]),
        profiled,
        samples_per_batch=4,
        timer=timer,
        emit=events,
        profile=profile,
    )
    assert result.full_sps == pytest.approx(8.0) and len(result.full_sps_trials) == 3
    assert result.profile == {
        "missing": "no breakdown: the profile failed: RuntimeError: CUPTI_ERROR_NOT_INITIALIZED: "
        "the driver has no profiling support"
    }
    assert events.of("result")[0]["profile"] == result.profile
