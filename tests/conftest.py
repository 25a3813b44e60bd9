"""Shared fixtures: a tiny synthetic dataset, tiny trainer configs, and the `gpu` marker skip."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneup.config import TrainConfig, build_config
from tuneup.unet.synth import SynthResult, synthesize

# The tests start a few hundred Pythons (workers, the CLI). Where the environment says
# PYTHONDONTWRITEBYTECODE (the development machines do), each compiled tuneup's own modules
# from source again (13 s of 190 s over the CLI and session tests here): they cache them.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture(autouse=True, scope="session")
def own_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """tuneup's cache (synthetic boxes, compile caches, what ladders cost) is the test
    session's own: nothing a test does reads, or leaves behind in, the user's."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TUNEUP_CACHE_DIR", str(tmp_path_factory.mktemp("tuneup-cache")))
    yield
    patch.undo()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `gpu` tests where CUDA is not visible (torch is imported only if one is collected)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def h200_with_256(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The H200 preset as its third ladder (2026-11-27c) ran it, batches 128 and 256: a
    user's own preset, which is how a user puts back the batch the default leaves out."""
    bundled = Path(__file__).resolve().parents[1] / "presets" / "h200.yaml"
    data = yaml.safe_load(bundled.read_text())
    data["probe"]["candidates"]["batch_size"] = {"global_batch_size": [128, 256]}
    path = tmp_path_factory.mktemp("presets") / "h200-256.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def synthetic_data(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    """A 32^3 training box and a 16^3 validation box, made once per test session."""
    return synthesize(tmp_path_factory.mktemp("synthetic"), box=32, val_box=16, seed=0)


@pytest.fixture
def tiny_values(tiny_run: dict[str, Any]) -> dict[str, Any]:
    """Knob values of a CPU run that takes well under a second a step (a copy of tiny_run)."""
    return dict(tiny_run)


@pytest.fixture(scope="session")
def tiny_run(synthetic_data: SynthResult) -> dict[str, Any]:
    """A 3-level, width-4 U-Net on 8^3 crops: 4 steps of 4 samples per epoch,
    one validation batch, data read in this process from the synthetic box."""
    return {
        "device": "cpu",
        "levels": 3,
        "width": 4,
        "data_size": 8,
        "global_batch_size": 4,
        "Nsamples": 16,
        "Nsamples_val": 4,
        "num_epochs": 1,
        "data_loader_config": "inmem",
        "num_data_workers": 0,
        "train_path": str(synthetic_data.train_path),
        "val_path": str(synthetic_data.val_path),
    }


@pytest.fixture
def tiny_config(tiny_values: dict[str, Any]) -> Callable[..., TrainConfig]:
    """Build a validated tiny TrainConfig; keyword arguments override its knobs."""

    def make(**overrides: Any) -> TrainConfig:
        return build_config({**tiny_values, **overrides}, source="tests")

    return make


@pytest.fixture
def restore_torch_state() -> Iterator[None]:
    """Put back the process-wide torch switches and RNG that build_training changes.

    Building a setup sets TF32, matmul precision and cuDNN benchmark for the
    whole process and reseeds torch; later tests must not inherit that.
    """
    import torch

    precision = torch.get_float32_matmul_precision()
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    cudnn_tf32 = torch.backends.cudnn.allow_tf32
    benchmark = torch.backends.cudnn.benchmark
    rng = torch.random.get_rng_state()
    yield
    torch.set_float32_matmul_precision(precision)
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32
    torch.backends.cudnn.benchmark = benchmark
    torch.random.set_rng_state(rng)
