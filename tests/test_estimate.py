"""The ladder-duration estimate: the documented model, the fit sentence, the time budget's plan."""

from __future__ import annotations

import dataclasses

import pytest

from tuneup.costs.estimate import (
    CONFIRM,
    WHOLE,
    Habits,
    LadderShape,
    ProbeCosts,
    ProbeKind,
    StageShape,
    StepModel,
    fits,
    guess_costs,
    kind_seconds,
    ladder_shape,
    pairs_seen,
    probe_seconds,
    stage_shape,
    time_left_text,
)
from tuneup.probe.durations import parse_duration
from tuneup.probe.plan import plan_probe
from tuneup.probe.types import PHASES, Candidate, ProbeBudget, ProbeResult, Status
from tuneup.tuning.clock.measured import Heard, measured_costs
from tuneup.tuning.clock.planner import plan_ladder
from tuneup.tuning.clock.time_left import stage_shapes
from tuneup.tuning.search.search_records import StagePlan

BUDGET = ProbeBudget(trial_s=0.5, min_trials=2, max_trials=4, warmup_cap_s=10, loss_steps=10)
COSTS = ProbeCosts(
    spawn_s=40.0,
    setup_s=2.0,
    first_s=10.0,
    step_s={"io": 0.2, "synthetic": 0.05, "full": 0.25},
    trials={"io": 4.0, "synthetic": 2.0, "full": 3.0},
)


def test_a_probe_costs_its_start_loss_steps_warmups_and_trials_by_hand() -> None:
    syn = plan_probe(BUDGET, judged="synthetic", whole=False)
    # warm set-up 2 + loss 10 x 0.25 + warm-up (first step 0.05 + 2 windows of 2 whole
    # steps, as the worker runs them) + 2 trials of 10 steps of 0.05 s
    assert probe_seconds(syn, COSTS) == pytest.approx(2 + 2.5 + (0.05 + 0.2) + 1.0)
    # new kernels to the warm worker add their first steps; a fresh process its start
    assert probe_seconds(syn, COSTS, new=True) == pytest.approx(5.75 + 10.0)
    assert probe_seconds(syn, COSTS, fresh=True) == pytest.approx(5.75 - 2.0 + 40.0)


def test_a_probe_of_io_alone_records_no_loss_and_never_pays_a_models_first_steps() -> None:
    io = plan_probe(BUDGET, judged="io", whole=False)
    # 2 + warm-up (0.2 + 2 windows of 2 steps of 0.2 s) + 4 trials of the 2 whole steps
    # that fill 0.5 s best (0.4 s: the worker runs whole steps, the price says so)
    assert probe_seconds(io, COSTS) == pytest.approx(2 + 0.2 + 0.8 + 1.6)


def test_a_loader_round_lengthens_the_windows_and_trials_that_read_the_loader() -> None:
    io = plan_probe(BUDGET, judged="io", whole=False)
    eight = dataclasses.replace(COSTS, loader_round=8)
    # 2 + warm-up (0.2 + 2 windows of a round, 8 x 0.2) + 4 trials of a round
    assert probe_seconds(io, eight) == pytest.approx(2 + 0.2 + 2 * 1.6 + 4 * 1.6)
    syn = plan_probe(BUDGET, judged="synthetic", whole=False)  # reads no loader: as before
    assert probe_seconds(syn, eight) == pytest.approx(probe_seconds(syn, COSTS))


def test_a_probe_never_costs_more_than_its_limit() -> None:
    slow = dataclasses.replace(COSTS, spawn_s=10_000.0)
    assert probe_seconds(plan_probe(BUDGET), slow, fresh=True) == BUDGET.limit_s


def test_a_trainer_that_shares_no_process_pays_every_start() -> None:
    alone = dataclasses.replace(COSTS, shares=False)
    syn = plan_probe(BUDGET, judged="synthetic", whole=False)
    assert probe_seconds(syn, alone) == probe_seconds(syn, COSTS, fresh=True)


def test_the_ladder_is_counted_in_probes_of_each_kind() -> None:
    stages = [StageShape("workers", 3, "io"), StageShape("amp", 2, "synthetic")]
    habits = Habits(pairs_per_stage=1.0, adopt_rate=0.5)
    shape = ladder_shape(stages, baseline_repeats=2, confirm_pairs=2, habits=habits)
    counts = shape.counts
    assert counts[ProbeKind(WHOLE, fresh=True, new=True)] == 1  # the first baseline probe
    assert counts[ProbeKind(WHOLE)] == pytest.approx(1 + 0.5 + 0.5)  # repeat and checks
    # the anchors (before the screen unless the stage before adopted, after it) and pairs
    assert counts[ProbeKind(("synthetic",))] == pytest.approx(0.5 + 1 + 2)
    # a loader's screen trains nothing: no first steps of new kernels
    assert counts[ProbeKind(("io",))] == pytest.approx(3 + 3.5)
    assert counts[ProbeKind(("synthetic",), new=True)] == 2  # a new config's screen
    assert counts[CONFIRM] == 4
    assert shape.probes == 2 + (3 + 3.5 + 0.5) + (2 + 3.5 + 0.5) + 4


def test_a_ladder_with_nothing_to_adopt_is_its_baseline_alone() -> None:
    shape = ladder_shape([StageShape("tf32", 0, "synthetic")], baseline_repeats=2)
    assert shape.probes == 2 and CONFIRM not in shape.counts


def test_more_candidates_take_longer() -> None:
    short = ladder_shape([StageShape("a", 1)]).seconds(BUDGET, COSTS)
    long = ladder_shape([StageShape("a", 4)]).seconds(BUDGET, COSTS)
    assert long > short


def test_habits_learn_from_decided_stages_and_start_at_the_prior() -> None:
    assert pairs_seen([]) == Habits()
    # a stage of 2 candidates that took 8 probes and adopted: 2 screens, its anchors
    # (0.5 before + 1 after), its check, and the rest in pairs
    learned = pairs_seen([(8, 2, True)], prior=Habits(1.0, 0.5), weight=1.0)
    assert learned.pairs_per_stage == pytest.approx((1.0 + (8 - 2 - 1.5 - 1) / 2) / 2)
    assert learned.adopt_rate == pytest.approx(0.75)


def test_measured_costs_come_from_the_probes_and_price_them_as_they_ran() -> None:
    fresh = ProbeResult(
        "baseline",
        {},
        {"global_batch_size": 8},
        Status.OK,
        full_sps=32.0,
        synthetic_sps=160.0,
        io_sps=40.0,
        full_sps_trials=[32.0] * 3,
        synthetic_sps_trials=[160.0] * 2,
        io_sps_trials=[40.0] * 4,
        one_time_s={"spawn": 5.0, "first_steps": 20.0},
        wall_s=40.0,
        plan=plan_probe(BUDGET).to_dict(),
    )
    served = dataclasses.replace(fresh, one_time_s={"setup": 1.5}, served_before=1, wall_s=9.0)
    costs = measured_costs([(fresh, True), (served, False)], BUDGET, COSTS)
    assert costs.measured
    assert costs.spawn_s == 25.0  # a fresh start runs to its first step done
    assert costs.setup_s == 1.5
    assert costs.step_s == pytest.approx({"io": 0.2, "synthetic": 0.05, "full": 0.25})
    assert costs.trials == {"io": 4.0, "synthetic": 2.0, "full": 3.0}
    assert costs.first_s == COSTS.first_s  # no warm probe of a new configuration yet
    # the model with each probe's own figures against its wall: what it cannot see
    assert 0.5 <= costs.scale <= 3.0


def test_the_scale_prices_a_probes_running_part_and_never_its_first_steps_again() -> None:
    # As on the H200: small warm probes ran 1.6x what the model says of their loss steps,
    # warm-ups and trials (the release before them, the runner's events), while a batch
    # of 128's probe was a 66 s cuDNN search and ran as modeled. The next such probe is its
    # search plus its scaled running part, not 1.6 x the search.
    syn = plan_probe(BUDGET, judged="synthetic", whole=False)
    running = probe_seconds(syn, dataclasses.replace(COSTS, setup_s=0.0))
    assert probe_seconds(syn, dataclasses.replace(COSTS, scale=1.6), new=True) == pytest.approx(
        2.0 + 10.0 + 1.6 * running
    )

    def warm(first: float, wall: float) -> ProbeResult:
        return ProbeResult(
            "amp", {}, {"global_batch_size": 8}, Status.OK, synthetic_sps=160.0,
            synthetic_sps_trials=[160.0] * 2, one_time_s={"setup": 2.0, "first_steps": first},
            wall_s=wall, served_before=1, plan=syn.to_dict(),
        )  # fmt: skip

    small = [(warm(0.0, 2.0 + 1.6 * running), False) for _ in range(3)]
    search = warm(66.0, 2.0 + 66.0 + running)
    costs = measured_costs([*small, (search, True)], BUDGET, COSTS)
    assert costs.scale == pytest.approx(1.6)
    priced = probe_seconds(syn, dataclasses.replace(costs, first_s=66.0), new=True)
    assert priced == pytest.approx(search.wall_s + 0.6 * running)  # within 1 s of it
    assert priced < 1.05 * search.wall_s


def test_a_stage_whose_candidates_keep_the_kernels_pays_their_loss_steps_not_first_steps():
    # fused Adam or another loader changes no conv key: on the H200 its probe was 4 s,
    # while bf16's paid a 12.5 s cuDNN search; a budget's plan must not price both alike
    optimizer = StagePlan(
        "optimizer", [Candidate("optimizer", {"optimizer_impl": "fused"})], judged="synthetic"
    )
    amp = StagePlan("amp", [Candidate("amp", {"amp_mode": "bf16"})], judged="synthetic")
    graphs = StagePlan("graphs", [Candidate("graphs", {"cuda_graphs": True})], judged="synthetic")
    shapes = {s.name: s for s in stage_shapes([optimizer, amp, graphs])}
    assert (shapes["optimizer"].new_kernels, shapes["amp"].new_kernels) == (0, 1)
    assert shapes["graphs"].new_kernels == 1
    habits = Habits(0.0, 0.0)
    kept = stage_shape(shapes["optimizer"], habits).seconds(BUDGET, COSTS)
    searched = stage_shape(shapes["amp"], habits).seconds(BUDGET, COSTS)
    assert searched - kept == pytest.approx(COSTS.first_s)
    # its first probe still records the loss steps (10 FULL steps of 0.25 s)
    counts = stage_shape(shapes["optimizer"], habits).counts
    first = ProbeKind(("synthetic",), first=True)
    assert counts[first] == 1 and not any(k.new for k in counts)
    plain = kind_seconds(ProbeKind(("synthetic",)), BUDGET, COSTS)
    assert kind_seconds(first, BUDGET, COSTS) - plain == pytest.approx(10 * 0.25)


def test_a_larger_batchs_new_kernels_pay_a_search_that_grows_with_the_batch():
    # cuDNN's benchmark runs every algorithm at the batch: on the second H200 ladder
    # bf16 + channels_last searched 33 s at batch 64, 66 s at 128. A budget that priced
    # batches 128 and 256 at one mean first step planned them as cheap as bf16's 12 s.
    costs = dataclasses.replace(COSTS, batch_exponent=1.0)
    batches = StagePlan(
        "batch_size",
        [Candidate("batch_size", {"global_batch_size": b}) for b in (128, 256)],
        judged="full",
    )
    (shape,) = stage_shapes([batches], batch=64)
    assert shape.new_batches == (2.0, 4.0)
    habits = Habits(0.0, 0.0)
    grown = stage_shape(shape, habits).seconds(BUDGET, costs)
    flat = stage_shape(shape, habits).seconds(BUDGET, COSTS)
    assert grown - flat == pytest.approx(COSTS.first_s * (2 + 4 - 2))
    # without the baseline's batch (or where first steps do not grow) nothing changes
    (unknown,) = stage_shapes([batches])
    assert stage_shape(unknown, habits).seconds(BUDGET, costs) == pytest.approx(flat)

    def searched(batch: int, first: float) -> ProbeResult:
        return ProbeResult(
            "batch_size", {}, {"global_batch_size": batch}, Status.OK, full_sps=100.0,
            full_sps_trials=[100.0] * 2, one_time_s={"setup": 2.0, "first_steps": first},
            wall_s=first + 5.0, served_before=1, plan=plan_probe(BUDGET).to_dict(),
        )  # fmt: skip

    # what a ladder measured at batch 128 is read back to the baseline's batch, so the
    # next search at 256 is priced at 256, not at 128's mean
    learned = measured_costs([(searched(128, 66.0), True)], BUDGET, costs, base_batch=64)
    assert learned.first_s == pytest.approx(33.0)
    at_256 = probe_seconds(plan_probe(BUDGET), learned, new=True, batch=4.0)
    at_64 = probe_seconds(plan_probe(BUDGET), learned, new=True)
    assert at_256 - at_64 == pytest.approx(3 * 33.0)


def test_the_guess_prices_every_phase_at_the_step_model() -> None:
    guess = guess_costs(BUDGET, StepModel(startup_s=30, step_s=0.1, served_startup_s=5))
    assert guess.step_s == {p: 0.1 for p in PHASES}
    assert guess.shares and not guess.measured
    assert not guess_costs(BUDGET, StepModel()).shares


def test_the_time_left_says_what_it_rests_on() -> None:
    assert time_left_text(125, "measured here") == "about 2 min 05 s left (measured here)"
    assert time_left_text(20 * 60, "a guess from the trainer's step model") == (
        "about 20 min left (a guess from the trainer's step model)"
    )


def test_fits_names_the_limit_it_breaks() -> None:
    assert fits(300, 600, None) == (True, "estimated 5 min, fits the 10 min budget")
    ok, message = fits(900, 600, 3600)
    assert not ok and "over the 10 min time budget" in message
    ok, message = fits(900, None, 600)
    assert not ok and "more than the 10 min left in the allocation" in message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("10m", 600),
        ("1.5h", 5400),
        ("1h30m", 5400),
        ("1h30", 5400),  # as a clock reads: 1 h 30 min
        ("2m30", 150),
        ("1h 5", 3900),
        ("01:00:00", 3600),
        ("5:30", 330),
    ],
)
def test_durations_read_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "words"),
    [("10", "no unit"), ("10x", "not a duration"), ("0m", "no time"), ("30s5", "no unit")],
)
def test_a_duration_without_its_unit_says_how_to_write_one(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as said:
        parse_duration(text)
    assert "1h30" in str(said.value)  # the way to write one, in the same line


STAGES = [
    StageShape("workers", 3, "io", 1.0),
    StageShape("tf32", 1, "synthetic", 0.0),
    StageShape("amp", 3, "synthetic", 0.5),
    StageShape("jit", 2, "synthetic", 0.05),
]


def test_a_ladder_that_fits_keeps_everything() -> None:
    plan = plan_ladder(STAGES, BUDGET, COSTS, None)
    assert plan.stages == ("workers", "tf32", "amp", "jit") and not plan.left_out
    assert plan.budget == BUDGET and plan.fits


def test_a_tight_budget_shortens_the_trials_then_leaves_out_the_least_gain_per_second() -> None:
    whole = plan_ladder(STAGES, BUDGET, COSTS, None).estimate_s
    half = dataclasses.replace(BUDGET, trial_s=BUDGET.trial_s / 2)
    shorter = plan_ladder(STAGES, half, COSTS, None).estimate_s
    just = plan_ladder(STAGES, BUDGET, COSTS, shorter + 0.01)  # shorter trials suffice
    assert just.fits and not just.left_out and just.budget.trial_s == half.trial_s
    tight = plan_ladder(STAGES, BUDGET, COSTS, whole * 0.6)
    assert tight.fits and tight.estimate_s <= whole * 0.6
    # what the stages left out free goes back to the trials, as far as it fits
    kept = [s for s in STAGES if s.name in tight.stages]
    longer = dataclasses.replace(tight.budget, trial_s=tight.budget.trial_s * 2)
    assert tight.budget.trial_s == BUDGET.trial_s or (
        plan_ladder(kept, longer, COSTS, None).estimate_s > whole * 0.6
    )
    left = [name for name, _, _ in tight.left_out]
    assert left[0] == "tf32" or "tf32" in left  # it expects nothing: the first to go
    assert "workers" in tight.stages  # the largest expected gain stays
    assert "left out to fit" in (tight.reason(left[0]) or "")
    assert any("left out" in line for line in tight.lines(4))


def _batch_and_amp() -> list[StagePlan]:
    batches = [Candidate(f"batch {b}", {"global_batch_size": b}) for b in (256, 128)]
    amp = [Candidate("bf16", {"amp_mode": "bf16"})]
    return [
        StagePlan("amp", amp, judged="synthetic", expected_gain=0.5),
        StagePlan("batch_size", batches, expected_gain=0.05),
    ]


def test_a_budget_leaves_out_a_stages_dearest_candidate_before_the_stage() -> None:
    # the H200 (2026-11-27c): batch 256's cuDNN search took 162 s, batch 128's 66 s and won;
    # a budget that left the whole batch stage out lost the whole ladder's answer
    costs = dataclasses.replace(COSTS, first_s=30.0, batch_exponent=1.13)
    shapes = stage_shapes(_batch_and_amp(), batch=64)
    whole = plan_ladder(shapes, BUDGET, costs, None).estimate_s
    fewer = plan_ladder([*shapes[:1], shapes[1].fewer[0]], BUDGET, costs, None).estimate_s
    fits = plan_ladder(shapes, BUDGET, costs, (whole + fewer) / 2)
    assert fits.fits and fits.stages == ("amp", "batch_size") and not fits.left_out
    assert fits.left_of("batch_size") == ("batch 256",)  # the dearest, listed first or not
    assert any(line.startswith("left out of batch_size: batch 256") for line in fits.lines(2))
    # candidates priced alike offer nothing to leave out first: which of bf16, fp16 and
    # bf16 + channels_last brings AMP's gain no price says (on the H200 the last did)
    amp = StagePlan(
        "amp",
        [
            Candidate("bf16", {"amp_mode": "bf16"}),
            Candidate("fp16", {"amp_mode": "fp16"}),
            Candidate("bf16 + cl", {"amp_mode": "bf16", "channels_last": True}),
        ],
        judged="synthetic",
        expected_gain=0.5,
    )
    assert stage_shapes([amp], batch=64)[0].fewer == ()
    # where not even batch 128 fits, the stage goes whole, said as before
    tight = plan_ladder(shapes, BUDGET, costs, fewer * 0.8)
    assert "batch_size" not in tight.stages and tight.left_of("batch_size") == ()
    assert "left out to fit" in (tight.reason("batch_size") or "")


def test_a_stage_run_under_such_a_plan_says_what_it_left_out_and_keeps_to_it() -> None:
    from tuneup.tuning.session.time_fit import TimeFit

    costs = dataclasses.replace(COSTS, first_s=30.0, batch_exponent=1.13)
    plans = _batch_and_amp()
    shapes = stage_shapes(plans, batch=64)
    whole = plan_ladder(shapes, BUDGET, costs, None).estimate_s
    fewer = plan_ladder([*shapes[:1], shapes[1].fewer[0]], BUDGET, costs, None).estimate_s
    limit = (whole + fewer) / 2
    fit = TimeFit(plan_ladder(shapes, BUDGET, costs, limit), "budget", 0.1)
    batch = fit.trimmed(plans[1])
    assert [c.label for c in batch.candidates] == ["batch 128"]
    assert batch.not_tried[0].startswith("batch 256: left out to fit your")
    assert fit.trimmed(plans[0]) is plans[0]  # amp keeps its candidates
    # a stage proposed again on the incumbent when its turn comes loses the same candidates,
    # by the labels the plan named, and no other where it no longer proposes them
    again = dataclasses.replace(plans[1], refresh=lambda values: _batch_and_amp()[1])
    refreshed = fit.trimmed(again).refresh
    assert refreshed is not None
    assert [c.label for c in refreshed({}).candidates] == ["batch 128"]
    other = [Candidate("batch 32", {"global_batch_size": 32}), plans[1].candidates[1]]
    moved = dataclasses.replace(plans[1], refresh=lambda values: StagePlan("batch_size", other))
    refreshed = fit.trimmed(moved).refresh
    assert refreshed is not None
    assert [c.label for c in refreshed({}).candidates] == ["batch 32", "batch 128"]
    assert not refreshed({}).not_tried


def test_a_budget_too_small_for_the_baseline_says_so() -> None:
    plan = plan_ladder(STAGES, BUDGET, COSTS, 10.0)
    assert not plan.fits and plan.stages == ()
    assert not plan.baseline_fits and plan.baseline_s > 10.0  # refused before any probe
    alone = plan.baseline_s
    just = plan_ladder(STAGES, BUDGET, COSTS, alone * 1.01)
    assert just.baseline_fits and just.stages == () and just.fits  # the baseline, nothing else
    assert "left out to fit your" in (just.reason("workers") or "")


def test_trials_are_never_shortened_below_the_floor_they_are_given() -> None:
    whole = plan_ladder(STAGES, BUDGET, COSTS, None).estimate_s
    # a resume's recorded budget is already shortened: its floor is still the preset's
    shortened = dataclasses.replace(BUDGET, trial_s=BUDGET.trial_s / 4)
    again = plan_ladder(STAGES, shortened, COSTS, whole * 0.3, shortest_trial_s=BUDGET.trial_s / 4)
    assert again.budget.trial_s == pytest.approx(BUDGET.trial_s / 4)
    alone = plan_ladder(STAGES, shortened, COSTS, whole * 0.3)  # no floor given: its own
    assert alone.baseline_s < again.baseline_s  # the baseline priced at shorter trials


def test_a_kind_is_priced_by_the_plan_it_stands_for() -> None:
    # a configuration's first probe records its loss; a later one of the same seed need not
    new = ProbeKind(("synthetic",), new=True)
    assert kind_seconds(new, BUDGET, COSTS) == pytest.approx(
        probe_seconds(plan_probe(BUDGET, judged="synthetic", whole=False), COSTS, new=True)
    )
    again = plan_probe(BUDGET, judged="synthetic", whole=False, loss=False)
    assert kind_seconds(ProbeKind(("synthetic",)), BUDGET, COSTS) == pytest.approx(
        probe_seconds(again, COSTS)
    )
    assert LadderShape({ProbeKind(("io",)): 2.0}).seconds(BUDGET, COSTS) == pytest.approx(
        2 * kind_seconds(ProbeKind(("io",)), BUDGET, COSTS)
    )


def test_a_compile_script_or_capture_alone_is_priced_apart_from_a_cudnn_search():
    # on the H200 a warm worker's cuDNN search took 13-162 s, TorchScript's and a CUDA
    # graph's first steps 0.1-0.2 s: one mean first step priced the jit and CUDA graph
    # stages as searches, and the whole ladder 15% over the twin's. A compile (tens of
    # seconds cold) stays priced at first_s.
    costs = dataclasses.replace(COSTS, kernel_s=0.2)
    jit = StagePlan(
        "jit", [Candidate("jit", {"jit": m}) for m in ("script", "compile")], judged="synthetic"
    )
    amp = StagePlan("amp", [Candidate("amp", {"amp_mode": "bf16"})], judged="synthetic")
    shapes = {s.name: s for s in stage_shapes([jit, amp], batch=64)}
    assert shapes["jit"].new_searches == (False, True) and shapes["amp"].new_searches == (True,)
    habits = Habits(0.0, 0.0)
    apart = stage_shape(shapes["jit"], habits).seconds(BUDGET, costs)
    as_searches = stage_shape(shapes["jit"], habits).seconds(BUDGET, COSTS)
    assert as_searches - apart == pytest.approx(COSTS.first_s - 0.2)
    # a search is priced as before; and without kernel_s (an older record) as a search
    assert stage_shape(shapes["amp"], habits).seconds(BUDGET, costs) == pytest.approx(
        stage_shape(shapes["amp"], habits).seconds(BUDGET, COSTS)
    )
    assert COSTS.kernels_alone() == COSTS.first_s

    def warm(config: dict, first: float) -> ProbeResult:
        return ProbeResult(
            "s", {}, config, Status.OK, synthetic_sps=100.0, synthetic_sps_trials=[100.0] * 2,
            one_time_s={"setup": 1.0, "first_steps": first}, wall_s=first + 4.0,
            served_before=1, plan=plan_probe(BUDGET).to_dict(),
        )  # fmt: skip

    heard = [(warm({"amp_mode": "bf16"}, 30.0), True), (warm({"jit": "script"}, 0.3), True)]
    learned = measured_costs(heard, BUDGET, COSTS, base_batch=64)
    assert (learned.first_s, learned.kernel_s) == (pytest.approx(30.0), pytest.approx(0.3))
    # a script on a conv key new to its process searched too: its 40 s is a search's
    both = Heard(warm({"jit": "script", "amp_mode": "fp16"}, 40.0), True, new_key=True)
    learned = measured_costs([*heard, both], BUDGET, COSTS, base_batch=64)
    assert (learned.first_s, learned.kernel_s) == (pytest.approx(35.0), pytest.approx(0.3))
