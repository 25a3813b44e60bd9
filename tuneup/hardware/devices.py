"""Which GPUs this process may use: CUDA_VISIBLE_DEVICES read against NVML's GPUs.

NVML lists every GPU of the node whatever CUDA_VISIBLE_DEVICES says, so the
variable is applied here, once, for the machine detection, the monitor and
the app alike. `parse_visible_devices` is pure: the variable's value and the
GPUs' UUIDs (in NVML's order) in, NVML indices and a note out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

VARIABLE = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class VisibleGpus:
    """The GPUs CUDA_VISIBLE_DEVICES allows, and a note when it names fewer than it lists.

    Attributes:
        indices: NVML indices of the GPUs named, in the variable's order; None
            when the variable is unset (every GPU).
        mig: MIG instances named (`MIG-...`). NVML indexes their parent GPUs
            under other names, so they are kept apart from `indices`.
        note: why some entries (or all) are not used; "" when every entry is.
    """

    indices: tuple[int, ...] | None
    mig: tuple[str, ...] = ()
    note: str = ""

    @property
    def watched(self) -> tuple[int, ...] | None:
        """The NVML indices to read; None (every GPU) when MIG instances are named."""
        return None if self.mig else self.indices


def cuda_visible_devices(environ: Mapping[str, str] | None = None) -> str | None:
    """The value of CUDA_VISIBLE_DEVICES in `environ` (os.environ when None); None when unset."""
    env = os.environ if environ is None else environ
    return env.get(VARIABLE)


def parse_visible_devices(value: str | None, uuids: Sequence[str]) -> VisibleGpus:
    """Read CUDA_VISIBLE_DEVICES as CUDA does, giving NVML indices.

    Entries are indices, GPU UUIDs (or a prefix of one, `GPU-8a3f`) or MIG
    instance names. Like CUDA, the list stops at the first entry that names
    no GPU; an entry naming a GPU already listed is skipped.

    Args:
        value: the variable's value; None when it is unset.
        uuids: each GPU's UUID, in NVML's order (their count is the GPU count).
    """
    if value is None:
        return VisibleGpus(None)
    indices: list[int] = []
    mig: list[str] = []
    stopped_at: str | None = None
    for entry in (e.strip() for e in value.split(",")):
        index = _index_of(entry, uuids)
        if index is not None:
            if index not in indices:
                indices.append(index)
        elif entry.startswith("MIG-") and uuids:
            mig.append(entry)
        else:
            stopped_at = entry
            break
    note = _note(value, indices, mig, stopped_at, len(uuids))
    return VisibleGpus(tuple(indices), tuple(mig), note)


def _index_of(entry: str, uuids: Sequence[str]) -> int | None:
    if entry.isdecimal():
        return int(entry) if int(entry) < len(uuids) else None
    if entry.startswith("GPU-"):
        return next((i for i, uuid in enumerate(uuids) if uuid.startswith(entry)), None)
    return None


def _note(
    value: str, indices: list[int], mig: list[str], stopped_at: str | None, count: int
) -> str:
    if mig:
        return f"{VARIABLE} names a MIG instance; watching every GPU"
    if not indices:
        hidden = f"{VARIABLE}={value!r} hides every GPU"
        if stopped_at is not None and stopped_at.isdecimal() and count:
            hidden += f" (this machine has {count}: indices 0-{count - 1})"
        return hidden
    if stopped_at is not None:
        return f"{VARIABLE}={value!r}: only {indices} are used"
    return ""
