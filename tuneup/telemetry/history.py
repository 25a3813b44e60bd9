"""Each GPU's readings of the last minutes, as the monitor charts them."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from tuneup.hardware.types import GpuSample


class SampleHistory:
    """Each GPU's readings of the last `window_s` seconds, by the readings' own clock.

    The readings' clock, not the wall clock: a replayed trace from last week
    charts the same as a live one.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.now: float | None = None  # the newest reading's time
        self._by_gpu: dict[int, deque[GpuSample]] = {}

    def add(self, samples: Sequence[GpuSample]) -> None:
        for sample in samples:
            self._by_gpu.setdefault(sample.index, deque()).append(sample)
            if self.now is None or sample.time > self.now:
                self.now = sample.time
        if self.now is None:
            return
        oldest = self.now - self.window_s
        for readings in self._by_gpu.values():
            while readings and readings[0].time < oldest:
                readings.popleft()

    def gpus(self) -> list[int]:
        return sorted(self._by_gpu)

    def of(self, index: int) -> list[GpuSample]:
        return list(self._by_gpu.get(index, ()))

    def latest(self) -> list[GpuSample]:
        """The newest reading of each GPU."""
        return [self._by_gpu[i][-1] for i in self.gpus() if self._by_gpu[i]]
