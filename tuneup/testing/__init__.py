"""Test doubles for the hardware interfaces, shared by tuneup's tests and plugins' tests.

Importing this package touches no hardware and imports neither torch nor Textual.
"""

from tuneup.testing.fake_nvml import (
    NOT_SUPPORTED,
    FakeGpu,
    FakeNvml,
    FakeProcess,
    NVMLError,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
    counter,
)

__all__ = [
    "NOT_SUPPORTED",
    "FakeGpu",
    "FakeNvml",
    "FakeProcess",
    "NVMLError",
    "NVMLError_GpuIsLost",
    "NVMLError_LibraryNotFound",
    "NVMLError_NotSupported",
    "counter",
]
