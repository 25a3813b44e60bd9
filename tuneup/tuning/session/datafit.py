"""Whether a loader that holds the whole box can hold the real run's: the arithmetic.

The probes read a small synthetic box (256^3 on the GPU presets); the run the user will do
reads the tutorial's 1024^3 + 512^3 (40.5 GiB of float32) or their own files. A loader that
holds its boxes whole (`config.loaders`: `holds`) is weighed where it holds them:

* on the device (the GPU-resident loader): both boxes on each rank's GPU, beside the model's
  measured peak at the batch it runs and a margin, against the GPU's memory;
* on the host (inmem): both boxes once per rank (its workers share the process's copy), with
  the batches in flight and each rank's own process, against the node's memory.

Pure: values in, a `Weight` out (tuneup.tuning.session.realdata keeps the figures it is fed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.config import Boxes, build_config, loader, sample_bytes
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo

GIB = 2**30
GPU_MARGIN_GIB = 4.5
"""Device memory a probe held beyond the CUDA allocator's peak (the CUDA context, cuDNN's
workspaces, the allocator's reserve and fragmentation): the most the H200 ladders' NVML
reading stood above it, 13,310 MiB in use against a 8,671 MiB peak (the gpu loader at batch
64, fp32; bench/results/gpu-h200-2026-11-27d's journal: 1.3 to 4.5 GiB over its probes)."""
HOST_PROCESS_GIB = 4.0
"""Host memory each rank's own process holds beside the box (torch and the CUDA libraries,
the context's host side): assumed, not measured here."""
TORCH_PREFETCH = 2  # batches a DataLoader worker loads ahead when prefetch_factor is unset

NOT_FOR_IT = "not for the real data"
"""How a candidate that cannot hold the real run's data is said ("gpu: not for the real
data: ..."), in a stage's line and in the summary."""


@dataclass(frozen=True)
class Weight:
    """What a loader that holds the real boxes whole needs of the memory it holds them in.

    Attributes:
        loader: the loader's name.
        where: "device" (each rank's GPU) or "host" (the node).
        boxes: the boxes the real run reads.
        need_gib: the boxes, the peak or the batches in flight, and the margin.
        have_gib: the GPU's (or the node's) memory.
        text: the figures in words ("its boxes (...) need 49.6 GiB of the GPU's 40 GiB").
    """

    loader: str
    where: str
    boxes: Boxes
    need_gib: float
    have_gib: float
    text: str

    @property
    def fits(self) -> bool:
        return self.need_gib <= self.have_gib

    def said(self) -> str:
        """The refusal as a stage's line says it ("not for the real data: its boxes ...")."""
        return f"{NOT_FOR_IT}: {self.text}"


def holds_on(values: Mapping[str, Any], machine: MachineInfo) -> str:
    """Where the config's loader holds its boxes whole: "device", "host" or "" (it reads
    crops as needed). The GPU-resident loader on the CPU holds them in host memory."""
    where = loader(str(values.get("data_loader_config", "lowmem"))).holds
    device = str(values.get("device", "auto"))
    on_cpu = device == "cpu" or (device == "auto" and not machine.cuda)
    return "host" if where == "device" and on_cpu else where


def weigh(
    values: Mapping[str, Any], boxes: Boxes, machine: MachineInfo, peak_gib: float | None
) -> Weight | None:
    """The real boxes weighed for the loader of `values` on `machine`; None where its loader
    holds no box whole, or the memory it would hold them in is not known here.

    Args:
        values: the probe's config (its loader, batch, workers, device).
        boxes: the boxes the real run reads.
        machine: its GPU's and node's memory, its ranks.
        peak_gib: the model's measured peak at this config's batch, without the probe's own
            box (None: not measured; the boxes and the margin are weighed alone).
    """
    where = holds_on(values, machine)
    name = str(values.get("data_loader_config", "lowmem"))
    boxes_gib = boxes.bytes / GIB
    said = f"its boxes ({boxes.text()}: {size_text(boxes.bytes)})"
    if where == "device" and machine.gpu_memory_gib is not None:
        peak = f", the model's peak at batch {_batch(values, machine)} ({_gib(peak_gib)})"
        need = boxes_gib + (peak_gib or 0.0) + GPU_MARGIN_GIB
        have = machine.gpu_memory_gib
        text = (
            f"{said}{peak if peak_gib is not None else ''} and a {_gib(GPU_MARGIN_GIB)} margin "
            f"need {_gib(need)} of the GPU's {_gib(have)}"
        )
        return Weight(name, where, boxes, need, have, text)
    if where == "host" and machine.host_memory_gib is not None:
        ranks = machine.ranks_per_node
        flight = _in_flight_gib(values, machine)
        need = ranks * (boxes_gib + HOST_PROCESS_GIB) + flight
        have = machine.host_memory_gib
        copies = f", once for each of {ranks} ranks" if ranks > 1 else ""
        beside = f"{_gib(flight)} of batches in flight and " if flight else ""
        process = "each rank's process" if ranks > 1 else "the process"
        text = (
            f"{said}{copies}, {beside}{_gib(HOST_PROCESS_GIB)} for {process} need "
            f"{_gib(need)} of the node's {_gib(have)}"
        )
        return Weight(name, where, boxes, need, have, text)
    return None


def _in_flight_gib(values: Mapping[str, Any], machine: MachineInfo) -> float:
    """The node's batches in flight: each rank's workers, each loading its prefetch ahead."""
    try:
        cfg = build_config(dict(values), source="the probe config")
    except UsageError:
        return 0.0
    workers = cfg.num_data_workers
    if workers <= 0:
        return 0.0
    prefetch = cfg.prefetch_factor or TORCH_PREFETCH
    batch = _batch(values, machine) * sample_bytes(cfg.data_size, cfg.N_out_channels)
    return machine.ranks_per_node * workers * prefetch * batch / GIB


def _batch(values: Mapping[str, Any], machine: MachineInfo) -> int:
    """One rank's batch: local_batch_size, else the global batch shared out."""
    local = values.get("local_batch_size")
    if isinstance(local, int) and local > 0:
        return local
    return max(1, int(values.get("global_batch_size", 64)) // max(1, machine.world_size))


def size_text(size: int) -> str:
    """Bytes as a user reads a box's size: GiB with one decimal, MiB below a tenth of one."""
    return f"{size / GIB:.1f} GiB" if size >= GIB / 10 else f"{size / 2**20:.1f} MiB"


def _gib(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.1f} GiB"
