"""Record GPU readings to a trace file and play them back as a backend.

A trace is JSON lines, one per `sample()` call:
`{"time": t, "devices": [GpuDevice dict, ...], "samples": [GpuSample dict, ...]}`.
Each line is flushed as it is written, so a trace cut short by a crash or
Ctrl-C is still readable up to its last line. Replays let the monitor, the
sampler and the app be shown and tested on machines without a GPU.

A replay also reads what `tuneup monitor --json` writes (`{"time": t, "gpus":
[reading with its device's name, ...]}`, telemetry.once.snapshot_record; a line
with an error and no GPU is skipped), and either kind gzipped (`.jsonl.gz`), as
the GPU runs keep their traces (bench/results/gpu-*/monitor.jsonl.gz).
"""

from __future__ import annotations

import bisect
import dataclasses
import gzip
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tuneup.errors import UsageError
from tuneup.hardware.types import GpuBackend, GpuDevice, GpuSample

_DEVICE_FIELDS = frozenset(f.name for f in dataclasses.fields(GpuDevice))
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Frame:
    """One recorded `sample()` call."""

    time: float
    devices: tuple[GpuDevice, ...]
    samples: tuple[GpuSample, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "devices": [d.to_dict() for d in self.devices],
            "samples": [s.to_dict() for s in self.samples],
        }


class TraceRecorder:
    """Writes frames to a trace file, one flushed JSON line each.

    Raises:
        UsageError: the file cannot be created.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self._file = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"cannot write the GPU trace {self.path}: {exc.strerror}; "
                "choose a writable path for --record"
            ) from None
        self.frames = 0

    def write(
        self, time: float, devices: Sequence[GpuDevice], samples: Sequence[GpuSample]
    ) -> None:
        """Append one frame and flush it to disk."""
        frame = Frame(time, tuple(devices), tuple(samples))
        self._file.write(json.dumps(frame.to_dict(), separators=(",", ":")) + "\n")
        self._file.flush()
        self.frames += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RecordingBackend:
    """A backend that passes another one's readings through and records each call.

    Args:
        backend: where the readings come from.
        recorder: where they go; closed with this backend.
        clock: the frame time when a call returns no samples.
    """

    def __init__(
        self,
        backend: GpuBackend,
        recorder: TraceRecorder,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.recorder = recorder
        self.name = backend.name
        self._clock = clock
        self._devices: list[GpuDevice] | None = None

    def available(self) -> tuple[bool, str]:
        return self.backend.available()

    def devices(self) -> list[GpuDevice]:
        if self._devices is None:
            self._devices = self.backend.devices()
        return list(self._devices)

    def sample(self) -> list[GpuSample]:
        samples = self.backend.sample()
        when = samples[0].time if samples else self._clock()
        self.recorder.write(when, self.devices(), samples)
        return samples

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            self.recorder.close()


def read_trace(path: Path | str) -> list[Frame]:
    """The frames of a trace file.

    Raises:
        UsageError: the file is missing, empty, or a line is not a frame
            (the message names the line).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == GZIP_MAGIC:
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else _unreadable(exc)
        raise UsageError(
            f"cannot read the GPU trace {path}: {why}; check the --replay path"
        ) from None
    parsed = (
        parse_frame(line, f"{path}:{number}")
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    )
    frames = [frame for frame in parsed if frame is not None]
    if not frames:
        raise UsageError(
            f"the GPU trace {path} is empty; record one with `tuneup monitor --record FILE`"
        )
    return frames


def _unreadable(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not a text file"
    return "a damaged gzip file"  # gzip.BadGzipFile is an OSError; a cut one, EOFError


def parse_frame(line: str, where: str) -> Frame | None:
    """One trace line as a Frame: a recorded one, or a `monitor --json` reading (None for
    one that holds no GPU: its error line). `where` ("file:line") goes into the error."""
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        when = data.get("time")
        if isinstance(when, bool) or not isinstance(when, (int, float)):
            raise ValueError('"time" must be a number')
        if "gpus" in data and "samples" not in data:  # tuneup monitor --json
            gpus = _list(data, "gpus")
            if not gpus:
                return None
            devices = tuple(_device(g) for g in gpus)
            samples = tuple(_sample(g) for g in gpus)
        else:
            devices = tuple(_device(d) for d in _list(data, "devices"))
            samples = tuple(_sample(s) for s in _list(data, "samples"))
    except (ValueError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"{where}: not a GPU trace line ({exc}); replay a trace of `tuneup monitor "
            "--record FILE` or `tuneup monitor --json` (gzipped or not)"
        ) from None
    return Frame(float(when), devices, samples)


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise ValueError(f'"{key}" must be a list')
    return value


def _device(data: Any) -> GpuDevice:
    if not isinstance(data, dict) or not isinstance(data.get("index"), int):
        raise ValueError("a device needs an integer index")
    return GpuDevice(**{k: v for k, v in data.items() if k in _DEVICE_FIELDS})


def _sample(data: Any) -> GpuSample:
    if not isinstance(data, dict) or not isinstance(data.get("index"), int):
        raise ValueError("a sample needs an integer index")
    if not isinstance(data.get("time"), (int, float)):
        raise ValueError("a sample needs a numeric time")
    return GpuSample.from_dict(data)


class ReplayBackend:
    """Plays a recorded trace back as a GPU backend.

    Without a clock each `sample()` returns the next frame, with its recorded
    times, so a replay equals the recording. With a clock, `sample()` returns
    the frame recorded at the same time since the start (the first call) and
    shifts its times to the clock, so a replay behaves like a live GPU. At the
    end of the trace the last frame repeats, or with `loop` the trace starts
    over (its times moving on by one trace length per lap).

    Raises:
        UsageError: the trace cannot be read or is malformed.
    """

    name = "replay"

    def __init__(
        self,
        path: Path | str,
        *,
        loop: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.path = Path(path)
        self.loop = loop
        self._clock = clock
        self._frames = read_trace(self.path)
        first, last = self._frames[0].time, self._frames[-1].time
        self._offsets = [f.time - first for f in self._frames]
        count = len(self._frames)
        step = (last - first) / (count - 1) if count > 1 else 1.0
        # A lap lasts the trace plus one interval, so the last frame gets its turn.
        self._period = (last - first) + (step if step > 0 else 1.0)
        self._calls = 0
        self._start: float | None = None

    @property
    def frames(self) -> list[Frame]:
        return list(self._frames)

    def available(self) -> tuple[bool, str]:
        return (True, "")

    def devices(self) -> list[GpuDevice]:
        return list(self._frames[0].devices)

    def sample(self) -> list[GpuSample]:
        count = len(self._frames)
        if self._clock is None:
            lap, position = (
                divmod(self._calls, count) if self.loop else (0, min(self._calls, count - 1))
            )
            self._calls += 1
            shift = lap * self._period
        else:
            now = self._clock()
            if self._start is None:
                self._start = now
            elapsed = max(0.0, now - self._start)
            laps = 0.0
            if self.loop:
                laps, elapsed = divmod(elapsed, self._period)
            position = max(0, bisect.bisect_right(self._offsets, elapsed) - 1)
            shift = self._start - self._frames[0].time + laps * self._period
        samples = self._frames[position].samples
        if not shift:
            return list(samples)
        return [dataclasses.replace(s, time=s.time + shift) for s in samples]

    def close(self) -> None:
        pass
