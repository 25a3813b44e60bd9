"""Window statistics: what a probe's GPU figures say, from hand-made readings."""

from __future__ import annotations

import pytest

from tuneup.hardware.types import GpuProcess, GpuSample
from tuneup.telemetry.window import busiest, combine, percentile, window_stats


def reading(index: int, t: float, **values: object) -> GpuSample:
    return GpuSample(index=index, time=t, **values)  # type: ignore[arg-type]


def test_utilisation_memory_clock_and_count_come_from_readings_inside_the_window():
    samples = [
        reading(0, 99.0, util_gpu_pct=0.0, memory_used_mb=50_000.0, sm_clock_mhz=300.0),
        *[
            reading(0, 100.0 + i, util_gpu_pct=float(u), memory_used_mb=m, sm_clock_mhz=c)
            for i, (u, m, c) in enumerate(
                [(80, 1000.0, 1400.0), (90, 3000.0, 1380.0), (100, 2000.0, 1410.0)]
            )
        ],
        reading(0, 200.0, util_gpu_pct=0.0, memory_used_mb=60_000.0),
    ]
    stats = window_stats(samples, 100.0, 102.0)[0]
    assert stats.samples == 3
    assert stats.util_mean_pct == pytest.approx(90.0)
    assert stats.util_p95_pct == pytest.approx(99.0)  # 90 + 0.9 * (100 - 90)
    assert stats.mem_peak_mb == 3000.0  # the readings outside the window do not count
    assert stats.sm_clock_min_mhz == 1380.0


def test_energy_counter_difference_gives_joules_and_joules_per_sample():
    samples = [
        reading(0, 10.0, power_w=999.0, energy_mj=1_000_000.0),
        reading(0, 11.0, power_w=999.0, energy_mj=1_300_000.0),
        reading(0, 12.0, power_w=999.0, energy_mj=1_500_000.0),
    ]
    stats = window_stats(samples, 10.0, 12.0, samples_processed=100)[0]
    # The counter wins over the (deliberately wrong) power readings: 500 J in 2 s.
    assert stats.energy_source == "counter"
    assert stats.energy_j == pytest.approx(500.0)
    assert stats.energy_j_per_sample == pytest.approx(5.0)
    assert stats.power_mean_w == pytest.approx(999.0)


def test_power_is_integrated_when_a_reading_lacks_the_energy_counter():
    samples = [
        reading(0, 0.0, power_w=100.0, energy_mj=0.0),
        reading(0, 1.0, power_w=300.0, energy_mj=None),
        reading(0, 3.0, power_w=300.0, energy_mj=900_000.0),
    ]
    stats = window_stats(samples, 0.0, 3.0, samples_processed=40)[0]
    # Trapezoids: (100 + 300) / 2 * 1 + 300 * 2 = 800 J.
    assert stats.energy_source == "power"
    assert stats.energy_j == pytest.approx(800.0)
    assert stats.energy_j_per_sample == pytest.approx(20.0)


def test_energy_covers_the_whole_window_when_readings_cover_only_part_of_it():
    samples = [reading(0, 1.0, energy_mj=0.0), reading(0, 3.0, energy_mj=400_000.0)]
    stats = window_stats(samples, 0.0, 4.0, samples_processed=10)[0]
    # 200 W over the 2 s the readings span, for the 4 s window.
    assert stats.energy_j == pytest.approx(800.0)


def test_a_counter_that_went_back_falls_back_to_power():
    samples = [
        reading(0, 0.0, power_w=200.0, energy_mj=5_000_000.0),
        reading(0, 2.0, power_w=200.0, energy_mj=1_000.0),  # driver reloaded
    ]
    stats = window_stats(samples, 0.0, 2.0)[0]
    assert (stats.energy_source, stats.energy_j) == ("power", pytest.approx(400.0))
    assert stats.energy_j_per_sample is None  # no sample count given


def test_none_readings_are_skipped_not_counted_as_zero():
    samples = [
        reading(0, 0.0, util_gpu_pct=None, power_w=None),
        reading(0, 1.0, util_gpu_pct=60.0, power_w=250.0),
        reading(0, 2.0, util_gpu_pct=80.0, power_w=None),
    ]
    stats = window_stats(samples, 0.0, 2.0, samples_processed=10)[0]
    assert stats.util_mean_pct == pytest.approx(70.0)
    assert stats.power_mean_w == pytest.approx(250.0)
    assert stats.energy_j == pytest.approx(500.0)  # the one power reading, for 2 s
    assert stats.mem_peak_mb is None
    assert stats.sm_clock_min_mhz is None
    assert stats.throttled is None  # no reading said anything about throttling


def test_an_empty_window_gives_no_figures_for_a_gpu_seen_outside_it():
    samples = [reading(1, 5.0, util_gpu_pct=90.0, power_w=300.0, energy_mj=1.0)]
    stats = window_stats(samples, 10.0, 20.0, samples_processed=100)
    assert list(stats) == [1]
    empty = stats[1]
    assert empty.samples == 0
    figures = (
        empty.util_mean_pct,
        empty.util_p95_pct,
        empty.mem_peak_mb,
        empty.power_mean_w,
        empty.energy_j,
        empty.energy_j_per_sample,
        empty.sm_clock_min_mhz,
        empty.throttled,
    )
    assert figures == (None,) * len(figures)
    assert window_stats([], 0.0, 1.0) == {}
    assert combine([]) is None


def test_idle_and_application_clocks_are_not_throttling():
    calm = [
        reading(0, 0.0, throttle_reasons=("idle",)),
        reading(0, 1.0, throttle_reasons=("applications_clocks_setting",)),
        reading(0, 2.0, throttle_reasons=()),
    ]
    stats = window_stats(calm, 0.0, 2.0)[0]
    assert stats.throttled is False
    assert stats.throttle_reasons == ()
    assert stats.throttled_fraction == 0.0


def test_a_thermal_slowdown_marks_the_window_throttled():
    hot = [
        reading(0, 0.0, throttle_reasons=("idle",)),
        reading(0, 1.0, throttle_reasons=("hw_thermal", "idle")),
        reading(0, 2.0, throttle_reasons=None),
        reading(0, 3.0, throttle_reasons=()),
    ]
    stats = window_stats(hot, 0.0, 3.0)[0]
    assert stats.throttled is True
    assert stats.throttle_reasons == ("hw_thermal",)
    assert stats.throttled_fraction == pytest.approx(1 / 3)  # of the readings that reported


def test_combine_averages_utilisation_and_adds_power_and_energy():
    samples = []
    for t in (0.0, 1.0, 2.0):
        samples.append(
            reading(
                0, t, util_gpu_pct=90.0, power_w=300.0, memory_used_mb=10.0, sm_clock_mhz=1400.0
            )
        )
        samples.append(
            reading(
                1,
                t,
                util_gpu_pct=50.0,
                power_w=100.0,
                memory_used_mb=30.0,
                sm_clock_mhz=1200.0,
                throttle_reasons=("sw_power_cap",) if t == 1.0 else (),
            )
        )
    per_gpu = window_stats(samples, 0.0, 2.0, samples_processed=80)
    job = combine(per_gpu.values())
    assert job is not None
    assert job.gpus == (0, 1)
    assert job.samples == 6
    assert job.util_mean_pct == pytest.approx(70.0)
    assert job.power_mean_w == pytest.approx(400.0)
    assert job.energy_j == pytest.approx(800.0)
    assert job.energy_j_per_sample == pytest.approx(10.0)
    assert job.mem_peak_mb == 30.0
    assert job.sm_clock_min_mhz == 1200.0
    assert job.throttled is True


def test_combine_leaves_total_power_unknown_when_one_gpu_has_none():
    samples = [reading(0, 0.0, power_w=300.0), reading(1, 0.0, util_gpu_pct=10.0)]
    job = combine(window_stats(samples, 0.0, 1.0, samples_processed=10).values())
    assert job is not None
    assert job.power_mean_w is None
    assert job.energy_j_per_sample is None


def test_busiest_picks_the_gpus_a_single_gpu_probe_ran_on():
    samples = []
    for t in (0.0, 1.0):
        samples.append(reading(0, t, util_gpu_pct=0.0, memory_used_mb=5.0))
        samples.append(reading(1, t, util_gpu_pct=95.0, memory_used_mb=9000.0))
        samples.append(reading(2, t, util_gpu_pct=3.0, memory_used_mb=5.0))
        samples.append(
            reading(3, t, util_gpu_pct=0.0, processes=(GpuProcess(pid=4242),))  # the worker's
        )
    per_gpu = window_stats(samples, 0.0, 1.0)
    assert [s.gpus for s in busiest(per_gpu, 1)] == [(1,)]
    assert [s.gpus for s in busiest(per_gpu, 2)] == [(1,), (2,)]
    assert [s.gpus for s in busiest(per_gpu, 1, pid=4242)] == [(3,)]
    assert len(busiest(per_gpu, None)) == 4
    assert len(busiest(per_gpu, 8)) == 4


def test_percentile_interpolates_between_ranks():
    assert percentile([5.0], 95) == 5.0
    assert percentile([0.0, 10.0], 50) == pytest.approx(5.0)
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0
