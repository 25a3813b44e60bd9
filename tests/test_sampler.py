"""The sampler thread: steady readings, a bounded buffer, a prompt stop, a backend that fails."""

from __future__ import annotations

import threading
import time

import pytest

from tuneup.errors import UsageError
from tuneup.hardware.types import GpuDevice, GpuSample
from tuneup.telemetry.sampler import Sampler


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedBackend:
    """GPUs whose readings are stamped by a clock; `fail_on` rounds raise instead."""

    name = "scripted"

    def __init__(
        self,
        gpus: int = 2,
        clock: FakeClock | None = None,
        fail_on: set[int] | None = None,
        step_s: float = 1.0,
    ) -> None:
        self.gpus = gpus
        self.clock = clock
        self.fail_on = fail_on or set()
        self.step_s = step_s
        self.calls = 0
        self.closed = False

    def available(self) -> tuple[bool, str]:
        return True, ""

    def devices(self) -> list[GpuDevice]:
        return [GpuDevice(index=i) for i in range(self.gpus)]

    def sample(self) -> list[GpuSample]:
        self.calls += 1
        if self.calls in self.fail_on:
            raise RuntimeError("NVML: GPU is lost")
        if self.clock is not None:
            now = self.clock()
            self.clock.now += self.step_s  # the next round is one step later
        else:
            now = time.time()
        return [
            GpuSample(index=i, time=now, util_gpu_pct=float(self.calls), power_w=100.0)
            for i in range(self.gpus)
        ]

    def close(self) -> None:
        self.closed = True


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


@pytest.mark.parametrize("interval", [0.0, 0.05, -1.0])
def test_an_interval_below_a_tenth_of_a_second_is_refused(interval):
    with pytest.raises(UsageError, match=r"0\.1 s"):
        Sampler(ScriptedBackend(), interval_s=interval)


def test_the_thread_records_a_round_per_interval_and_latest_has_every_gpu():
    backend = ScriptedBackend(gpus=3)
    with Sampler(backend, interval_s=0.1) as sampler:
        wait_for(lambda: sampler.rounds >= 3)
    latest = sampler.latest()
    assert [s.index for s in latest] == [0, 1, 2]
    assert latest[0].util_gpu_pct == float(sampler.rounds)  # the newest round
    assert not sampler.running


def test_stop_is_prompt_even_with_a_long_interval():
    backend = ScriptedBackend()
    sampler = Sampler(backend, interval_s=30.0)
    sampler.start()
    wait_for(lambda: sampler.rounds == 1)  # the first round comes at once
    started = time.monotonic()
    sampler.stop()
    assert time.monotonic() - started < 0.5
    assert not sampler.running
    assert backend.calls == 1
    assert not backend.closed  # the backend belongs to whoever made it


def test_the_ring_buffer_keeps_only_the_newest_rounds():
    clock = FakeClock()
    sampler = Sampler(ScriptedBackend(gpus=2, clock=clock), capacity=4, clock=clock)
    for _ in range(10):
        sampler.sample_now()
    history = sampler.history()
    assert len(history) == 8  # 4 rounds of 2 GPUs
    assert [s.util_gpu_pct for s in history[::2]] == [7.0, 8.0, 9.0, 10.0]
    assert sampler.rounds == 10


def test_history_returns_the_last_seconds_by_the_clock():
    clock = FakeClock(now=0.0)
    sampler = Sampler(ScriptedBackend(gpus=1, clock=clock), clock=clock)
    for _ in range(10):  # readings at t = 0 .. 9, clock ends at 10
        sampler.sample_now()
    assert [s.time for s in sampler.history(3.0)] == [7.0, 8.0, 9.0]
    assert len(sampler.history()) == 10


def test_a_failing_backend_is_counted_and_sampling_goes_on():
    backend = ScriptedBackend(fail_on={2, 3})
    with Sampler(backend, interval_s=0.1) as sampler:
        wait_for(lambda: sampler.rounds >= 3)
    assert sampler.errors == 2
    assert "GPU is lost" in (sampler.last_error or "")
    assert sampler.latest()[0].util_gpu_pct >= 4.0


def test_readers_do_not_wait_for_a_slow_backend():
    release = threading.Event()

    class SlowBackend(ScriptedBackend):
        def sample(self) -> list[GpuSample]:
            if self.calls >= 1:
                release.wait(5.0)  # a GPU stuck in the driver
            return super().sample()

    backend = SlowBackend(gpus=1)
    sampler = Sampler(backend, interval_s=0.1)
    sampler.start()
    try:
        wait_for(lambda: sampler.rounds == 1)
        time.sleep(0.15)  # the thread is now inside the stuck call
        started = time.monotonic()
        assert len(sampler.latest()) == 1
        assert len(sampler.history(60)) == 1
        sampler.window(0.0, time.time() + 1)
        assert time.monotonic() - started < 0.1
    finally:
        release.set()
        sampler.stop()


def test_window_gives_per_gpu_statistics_of_the_recorded_rounds():
    clock = FakeClock(now=100.0)
    sampler = Sampler(ScriptedBackend(gpus=2, clock=clock), clock=clock)
    for _ in range(5):  # t = 100 .. 104, util 1 .. 5
        sampler.sample_now()
    stats = sampler.window(101.0, 103.0, samples_processed=20)
    assert sorted(stats) == [0, 1]
    assert stats[0].samples == 3
    assert stats[0].util_mean_pct == pytest.approx(3.0)
    assert stats[1].energy_j_per_sample == pytest.approx(100.0 * 2.0 / 20)


def test_a_stopped_sampler_can_start_again():
    backend = ScriptedBackend(gpus=1)
    sampler = Sampler(backend, interval_s=0.1)
    sampler.start()
    wait_for(lambda: sampler.rounds >= 1)
    sampler.stop()
    counted = sampler.rounds
    sampler.start()
    wait_for(lambda: sampler.rounds > counted)
    sampler.stop()
    assert not sampler.running
