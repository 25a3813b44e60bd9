"""The loss guard: which probes get marked diverged, and which arithmetic changes pass."""

from __future__ import annotations

import math

from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.search.guard import check_loss
from tuneup.tuning.session.session_terms import SearchTerms

BASELINE = [0.12, 0.10, 0.085, 0.075, 0.068]


def test_nan_or_inf_anywhere_is_diverged():
    assert "nan" in check_loss([0.12, math.nan, 0.09], BASELINE)
    assert "inf" in check_loss([0.12, 0.1, math.inf], None)


def test_arithmetic_noise_within_tolerance_passes():
    # AMP/TF32 move the loss by a few percent at most: 10% worse is still the same training.
    assert check_loss([x * 1.10 for x in BASELINE], BASELINE) is None
    assert check_loss([x * 0.7 for x in BASELINE], BASELINE) is None  # better is never a problem


def test_clearly_worse_than_baseline_is_diverged():
    reason = check_loss([0.12, 0.11, 0.105, 0.1, 0.095], BASELINE)
    assert reason is not None
    assert "baseline" in reason and "5" in reason  # names the step it compared


def test_compares_at_the_last_common_step():
    short = [0.12, 0.10, 0.2]  # worse at step 3 only
    assert check_loss(short, BASELINE) is not None
    assert check_loss(BASELINE[:3], BASELINE) is None


def test_absolute_term_keeps_tiny_losses_from_tripping():
    tiny = [0.004, 0.002, 0.001]
    assert check_loss([0.004, 0.002, 0.0016], tiny) is None  # +60% relative, +0.0006 absolute
    assert check_loss([0.004, 0.002, 0.0016], tiny, abs_tolerance=0.0) is not None


def test_loss_growing_over_the_run_is_diverged_without_a_baseline():
    assert "grew" in check_loss([0.12, 0.2, 0.5, 1.3], None)
    assert check_loss([0.12, 0.11, 0.1], None) is None
    assert check_loss([], BASELINE) is None


def test_another_batch_is_compared_at_equal_samples_seen():
    from tuneup.tuning.search.guard import batch_ratio, equal_samples, equal_samples_note

    baseline = [0.12, 0.10, 0.09, 0.08, 0.07, 0.065, 0.06, 0.058]  # batch 8
    doubled = [0.11, 0.075, 0.066, 0.06, 0.055, 0.05, 0.048, 0.046]  # batch 16
    assert batch_ratio({"global_batch_size": 16}, {"global_batch_size": 8}) == 2.0
    assert batch_ratio({}, {"global_batch_size": 64}) == 1.0  # the default batch is 64
    assert equal_samples(doubled, baseline, 2.0) == (4, 8)  # its step 4 = the baseline's 8
    assert check_loss(doubled, baseline, batch_ratio=2.0) is None  # 0.06 vs 0.058
    lagging = [0.12, 0.11, 0.105, 0.10, 0.10, 0.10, 0.10, 0.10]
    reason = check_loss(lagging, baseline, batch_ratio=2.0)
    assert reason is not None and "(the samples of the baseline's step 8)" in reason
    note = equal_samples_note(doubled, baseline, 2.0)
    assert note is not None and "its loss is 0.06 against the baseline's 0.058 (+3%)" in note


def test_a_bigger_batch_in_lr_warm_up_is_judged_on_nan_and_growth_only():
    from tuneup.tuning.search.guard import lr_warming_up

    sqrt = {"scaling": "sqrt", "start_lr": 2e-4, "end_lr": 0.0, "warmup_steps": 128}
    assert lr_warming_up({"global_batch_size": 128, "base_batch_size": 64, "lr_schedule": sqrt})
    assert not lr_warming_up({"global_batch_size": 64, "base_batch_size": 64})
    none = {**sqrt, "scaling": "none"}
    assert not lr_warming_up({"global_batch_size": 128, "lr_schedule": none})


def test_a_session_judges_each_probe_s_loss_once_and_journals_the_verdict(tmp_path, monkeypatch):
    from tuneup_plugins.sim import sim_backend, sim_stage_plans

    from tuneup.hardware.types import MachineInfo
    from tuneup.preset.load import load_preset
    from tuneup.probe.types import Candidate, Status
    from tuneup.tuning.results.journal import ResultsDir
    from tuneup.tuning.search import guard, search_runner
    from tuneup.tuning.search.search_records import StagePlan
    from tuneup.tuning.session import probe_session as session

    judged: list[int] = []

    def counted(losses, values, baseline_losses, baseline_values):
        judged.append(id(losses))  # a probe's losses: the same list each time it is judged
        return guard.loss_verdict(losses, values, baseline_losses, baseline_values)

    monkeypatch.setattr(session, "loss_verdict", counted)
    monkeypatch.setattr(search_runner, "loss_verdict", counted)
    machine = MachineInfo(cuda=True, gpu_count=1, cpus_usable=16)
    lr = StagePlan("lr", [Candidate("lr=huge", {"lr_schedule": {"start_lr": 0.05}})])
    run = session.ProbeSession(
        preset=load_preset("cpu-smoke"),
        adapter=load_trainer("sim"),
        backend=sim_backend(3),
        results=ResultsDir(tmp_path),
        machine=machine,
        base_values={},
        plans=[*sim_stage_plans(machine)[:1], lr],
        terms=SearchTerms(confirm_pairs=0),
    )
    run.start(resume=False)
    outcome = run.run()

    assert judged and len(judged) == len(set(judged))
    reckless = [p for p in outcome.probes if p.stage == "lr" and p.variant]
    assert reckless and all(p.status is Status.DIVERGED for p in reckless)
    journaled = [p for p in ResultsDir(tmp_path).results() if p.stage == "lr" and p.variant]
    assert [p.status for p in journaled] == [p.status for p in reckless]
