"""The data loaders, declared once: each name with what every part of tuneup asks of it.

The trainer builds them (tuneup.unet.loaders registers a builder under each
name); everything else (the knob's choices, the /dev/shm preflight, the data
stage, the tutorial export, the data checks, the simulator) reads this table,
so a new loader is one row here and its builder there.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOAT32_BYTES = 4
INPUT_CHANNELS = 4  # the N-body fields of the tutorial's data (Nbody: 4 x L^3)
TARGET_CHANNELS = 5  # the hydro fields it predicts (Hydro: 5 x L^3)


@dataclass(frozen=True)
class Loader:
    """One `data_loader_config` value and its properties.

    Attributes:
        name: the knob's value (the tutorial's spelling where it has one).
        help: a few words for the knob's help.
        shared_memory: its DataLoader workers hand batches over through /dev/shm.
        dali: it runs NVIDIA DALI.
        on_gpu: it needs CUDA (the data lives on the GPU).
        tutorial: the tutorial's train.py has it under this name.
        proposed: the data stage tries it (a loader the ladder should compare).
        paced_by_workers: its DataLoader workers set its pace (each reads its crops from
            the file): the data stage tries it with the workers the workers stage found best.
        reads: the form of the data it reads: "hdf5" (train_path, val_path), "npy" (their
            channels-last .npy copies, made beside them) or "" (none: it makes its own).
        takes_workers: `num_data_workers` sets its DataLoader workers (or DALI's threads);
            False: it has none, and the knob changes nothing.
        holds: where it holds the whole box it reads, both fields, the validation box
            too: "device" (the GPU's memory, on every rank's GPU), "host" (the node's memory,
            once per rank: its workers share the process's copy) or "" (crops read as
            needed). The real run's boxes must fit there (tuneup.tuning.session.realdata).
    """

    name: str
    help: str
    shared_memory: bool = False
    dali: bool = False
    on_gpu: bool = False
    tutorial: bool = False
    proposed: bool = False
    paced_by_workers: bool = False
    reads: str = "hdf5"
    takes_workers: bool = True
    holds: str = ""

    @property
    def reads_files(self) -> bool:
        """It reads the data files (or their copies): their paths must be set and sound."""
        return bool(self.reads)


LOADERS: tuple[Loader, ...] = (
    Loader(
        "lowmem",
        "crops read from the HDF5 file",
        shared_memory=True,
        tutorial=True,
        proposed=True,
        paced_by_workers=True,
    ),
    Loader(
        "inmem",
        "the box held in host memory",
        shared_memory=True,
        tutorial=True,
        proposed=True,
        holds="host",
    ),
    Loader(
        "synthetic",
        "random crops made in memory",
        shared_memory=True,
        tutorial=True,
        reads="",
    ),
    Loader(
        "dali-lowmem",
        "NVIDIA DALI reading the .npy copies",
        dali=True,
        reads="npy",
        tutorial=True,
        proposed=True,
    ),
    Loader(
        "gpu",
        "the box on the GPU, cropped there",
        on_gpu=True,
        proposed=True,
        takes_workers=False,
        holds="device",
    ),
)
LOADER_CHOICES = tuple(loader.name for loader in LOADERS)
_BY_NAME = {loader.name: loader for loader in LOADERS}


def loader(name: str) -> Loader:
    """The loader called `name`; an unknown name is a plain one (no property set), which
    the knob's choices refuse before anything reads it."""
    return _BY_NAME.get(name) or Loader(name, "unknown")


def loader_round(name: str, workers: int) -> int:
    """Batches a loader's workers make together, one each: a DataLoader's `workers` take
    turns (a round of them delivers at once, then none for a while), a loader without
    workers delivers one at a time."""
    return max(1, workers) if loader(name).shared_memory else 1


def sample_bytes(crop: int, target_channels: int = TARGET_CHANNELS) -> int:
    """Bytes one (input, target) sample moves: float32 channels of ``crop^3``."""
    return (INPUT_CHANNELS + target_channels) * crop**3 * FLOAT32_BYTES


def box_bytes(side: int) -> int:
    """Bytes of one box's two fields in float32: 4 + 5 channels of ``side^3``."""
    return (INPUT_CHANNELS + TARGET_CHANNELS) * side**3 * FLOAT32_BYTES


@dataclass(frozen=True)
class Boxes:
    """The sides of a run's training and validation boxes, in voxels (0: no validation box).

    Attributes:
        box: the training box's side L (its fields are L^3).
        val_box: the validation box's side; 0 where the run reads none.
    """

    box: int
    val_box: int = 0

    @property
    def bytes(self) -> int:
        """Both boxes' fields in float32: what a loader that holds them needs."""
        return box_bytes(self.box) + (box_bytes(self.val_box) if self.val_box else 0)

    def text(self) -> str:
        """The sides as a user reads them: "1024^3 + 512^3"."""
        return f"{self.box}^3" + (f" + {self.val_box}^3" if self.val_box else "")

    def to_dict(self) -> dict[str, int]:
        return {"box": self.box, "val_box": self.val_box}


TUTORIAL_BOXES = Boxes(1024, 512)
"""The tutorial's data: a 1024^3 training box and a 512^3 validation box (about 36 + 4.5
GiB of float32: unet-workload.md, Data)."""
