"""Paired decisions: what the pairs say, and the session's noise measured from repeats."""

from __future__ import annotations

import math

import pytest

from tuneup.tuning.search.paired import NoiseTracker, Verdict, hodges_lehmann, judge


def pairs_of(*ratios: float) -> list[tuple[float, float]]:
    return [(100.0, 100.0 * r) for r in ratios]


def test_one_pair_never_adopts_however_large_the_gain():
    one = judge(pairs_of(2.0), sigma=0.01, needed=0.02)
    assert one.verdict is Verdict.MORE
    two = judge(pairs_of(2.0, 2.02), sigma=0.01, needed=0.02)
    assert two.verdict is Verdict.ADOPT and two.speedup == pytest.approx(2.01, rel=0.01)
    assert two.low is not None and two.low > 1.9


def test_a_gain_within_the_noise_is_not_adopted_and_a_loss_is_rejected_early():
    noisy = judge(pairs_of(1.05, 1.04), sigma=0.05, needed=0.02)
    assert noisy.verdict is Verdict.MORE  # 5% with 5% pair noise: not shown yet
    # at max_pairs, a comparison below the needed gain that the noise cannot rule out is
    # left unresolved, with its estimate; one above it goes on (3x at most), then is too
    flat = judge(pairs_of(1.01, 1.00, 1.02, 1.01), sigma=0.05, needed=0.02, max_pairs=4)
    assert flat.verdict is Verdict.UNRESOLVED
    assert "unresolved at this machine's noise: 1.010x over 4 pairs" in flat.why
    promising = pairs_of(1.05, 1.04, 1.05, 1.06)
    assert judge(promising, sigma=0.05, needed=0.02, max_pairs=4).verdict is Verdict.MORE
    capped = judge(promising * 3, sigma=0.05, needed=0.02, max_pairs=4)
    assert capped.verdict is Verdict.UNRESOLVED and capped.pairs == 12
    # where the noise is small enough the same figures rule the gain out: not faster
    ruled_out = judge(pairs_of(1.01, 1.00, 1.01, 1.00), sigma=0.002, needed=0.02, max_pairs=4)
    assert ruled_out.verdict is Verdict.REJECT
    loss = judge(pairs_of(0.8), sigma=0.02, needed=0.02)
    assert loss.verdict is Verdict.REJECT and loss.why.startswith("not faster")


def test_the_confirmation_waits_for_its_pairs_before_rejecting():
    early = judge(pairs_of(0.5), sigma=0.01, needed=0.02, min_pairs=3, min_reject=3)
    assert early.verdict is Verdict.MORE
    late = judge(pairs_of(0.5, 0.5, 0.5), sigma=0.01, needed=0.02, min_pairs=3, min_reject=3)
    assert late.verdict is Verdict.REJECT


def test_nothing_smaller_than_the_needed_gain_is_adopted():
    steady = pairs_of(1.06, 1.06, 1.06, 1.06)
    assert judge(steady, sigma=0.005, needed=0.02).verdict is Verdict.ADOPT
    unstable = judge(steady, sigma=0.005, needed=0.10)  # repeats differ by 10% here
    assert unstable.verdict is Verdict.REJECT and unstable.needed == pytest.approx(1.10)


def test_one_wild_pair_cannot_carry_the_rest():
    # a burst slowed the incumbent's probe of one pair: that pair says 2x
    wild = judge(pairs_of(2.0, 1.0, 1.0), sigma=0.01, needed=0.02)
    assert wild.verdict is not Verdict.ADOPT
    assert wild.speedup == pytest.approx(1.0)
    assert hodges_lehmann([0.0, 0.0, 0.0, 0.0, 0.7]) == pytest.approx(0.0)


def test_noise_comes_from_repeats_and_ignores_a_step_change():
    noise = NoiseTracker()
    noise.set_trials([[100.0, 101.0, 99.0, 100.5, 99.5]])
    assert noise.instability is None and 0 < noise.sigma < 0.02
    for sps in (100.0, 102.0, 100.0, 98.0, 100.0, 101.0, 99.0, 100.0):
        noise.seen("a", sps)
    quiet = noise.sigma
    assert 0.01 < quiet < 0.04 and not noise.unstable and noise.note() is None
    noise.seen("a", 300.0)  # another job ended: three times faster from here
    noise.seen("a", 301.0)
    assert noise.sigma == pytest.approx(quiet, rel=0.3)  # the step is left out
    assert noise.moved("a") == pytest.approx(2.01, rel=0.01)


def test_an_unstable_machine_says_so_and_raises_the_needed_gain():
    noise = NoiseTracker()
    for sps in (100.0, 130.0, 100.0, 75.0, 100.0, 125.0, 95.0):
        noise.seen("a", sps)
    assert noise.unstable and noise.instability is not None and noise.instability > 0.2
    assert noise.needed == noise.instability
    note = noise.note()
    assert note is not None and note.startswith("machine unstable: repeats of the same config")
    assert "gains below that are not reported" in note
    assert noise.resolvable(5) > noise.needed


def test_repeats_are_consecutive_measurements_of_the_same_config():
    noise = NoiseTracker()
    noise.seen("a", 100.0)
    noise.seen("b", 200.0)
    noise.seen("a", 110.0)
    assert noise.repeats == [pytest.approx(math.log(1.1))]
