"""What only a CUDA GPU can show: AMP fp16 with its scaler, CUDA-graph replay, TF32 off.

Skipped where no GPU is visible (see conftest.py); run on the device machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

pytestmark = pytest.mark.gpu


def _fixed_batches(setup, count: int) -> list:
    batches = []
    for inp, tar in setup.train_loader:
        batches.append(setup.to_device(inp, tar))
        if len(batches) == count:
            return batches
    raise AssertionError("loader gave too few batches")


def _losses(setup, batches) -> list[float]:
    from tuneup.unet.optim import set_lr

    out = []
    for step, (inp, tar) in enumerate(batches, start=1):
        setup.ensure_graph(inp, tar)
        set_lr(setup.optimizer, setup.schedule(step))
        out.append(setup.step(inp, tar))
    return [float(v) for v in out]


def test_amp_fp16_trains_with_its_scaler(tiny_config, restore_torch_state) -> None:
    import torch

    from tuneup.unet.build import build_training
    from tuneup.unet.distributed import DistEnv
    from tuneup.unet.loop import run_training

    cfg = tiny_config(device="cuda", amp_mode="fp16", Nsamples=256, num_epochs=2)
    setup = build_training(cfg, DistEnv())
    assert isinstance(setup.precision.scaler, torch.amp.GradScaler)
    with setup.precision.autocast():
        inp = torch.randn(2, 4, 8, 8, 8, device="cuda")
        assert setup.raw_model.conv_down1(inp).dtype == torch.float16
    result = run_training(setup)
    assert setup.precision.scaler.get_scale() > 0
    assert all(torch.isfinite(torch.tensor(result.train_losses)))
    assert result.train_losses[-1] < result.train_losses[0]


@pytest.mark.parametrize("amp_mode", ["none", "bf16"])
def test_cuda_graph_replay_matches_eager(tiny_config, restore_torch_state, amp_mode) -> None:
    from tuneup.unet.build import build_training
    from tuneup.unet.distributed import DistEnv
    from tuneup.unet.step import GraphedStep

    common = dict(device="cuda", amp_mode=amp_mode, tf32=False, cudnn_benchmark=False, Nsamples=64)
    eager = build_training(tiny_config(**common), DistEnv())
    batches = _fixed_batches(eager, 8)
    eager_losses = _losses(eager, batches)
    graphed = build_training(tiny_config(cuda_graphs=True, **common), DistEnv())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        graphed_losses = _losses(graphed, batches)
    # no autograd graph kept alive across the capture's streams (the H200 run warned so)
    assert not [w for w in said if "AccumulateGrad" in str(w.message)]
    assert isinstance(graphed.step, GraphedStep)
    tolerance = 1e-4 if amp_mode == "none" else 2e-2
    assert graphed_losses == pytest.approx(eager_losses, rel=tolerance)


TF32_PROBE = """
import torch
from tuneup.unet.runtime import set_tf32_env, apply_backend_flags
set_tf32_env({enabled})
apply_backend_flags({enabled}, True)
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(2048, 2048, device="cuda", generator=g)
b = torch.randn(2048, 2048, device="cuda", generator=g)
exact = (a.double() @ b.double())
err = ((a @ b).double() - exact).abs().max() / exact.abs().max()
print(float(err))
"""


def _tf32_errors(probe: str) -> dict[bool, float]:
    """The probe's relative error against float64 with TF32 on and off, each in a fresh process
    (the CUDA libraries read NVIDIA_TF32_OVERRIDE once, when CUDA starts)."""
    errors = {}
    for enabled in (True, False):
        env = {k: v for k, v in os.environ.items() if k != "NVIDIA_TF32_OVERRIDE"}
        done = subprocess.run(
            [sys.executable, "-c", probe.format(enabled=enabled)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        errors[enabled] = float(done.stdout.strip())
    return errors


def test_tf32_off_gives_full_float32_matmuls() -> None:
    errors = _tf32_errors(TF32_PROBE)
    assert errors[False] < 1e-5, f"TF32 off still lossy: {errors}"
    assert errors[True] > 10 * errors[False], f"TF32 on looks like full fp32: {errors}"


def test_train_command_on_cuda_reports_tf32_off(tmp_path) -> None:
    env = dict(os.environ, TUNEUP_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneup",
            "train",
            "--set",
            "device=cuda",
            "--set",
            "tf32=off",
            "--set",
            "max_steps=20",
            "--set",
            "num_epochs=1",
            "--set",
            "optimizer_impl=fused",
            "--set",
            "channels_last=true",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "TF32 disabled (NVIDIA_TF32_OVERRIDE=0)" in done.stdout
    assert "Time taken for epoch 1" in done.stdout


TF32_CONV_PROBE = """
import torch
import torch.nn.functional as F
from tuneup.unet.runtime import set_tf32_env, apply_backend_flags
set_tf32_env({enabled})
apply_backend_flags({enabled}, False)
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(2, 64, 24, 24, 24, device="cuda", generator=g)
w = torch.randn(64, 64, 3, 3, 3, device="cuda", generator=g)
exact = F.conv3d(x.double(), w.double(), padding=1)
err = (F.conv3d(x, w, padding=1).double() - exact).abs().max() / exact.abs().max()
print(float(err))
"""


def test_tf32_off_gives_full_float32_convolutions() -> None:
    # The U-Net spends its time in 3D convolutions (cuDNN), not in matmuls (cuBLAS).
    errors = _tf32_errors(TF32_CONV_PROBE)
    assert errors[False] < 1e-5, f"TF32 off still lossy in conv3d: {errors}"
    assert errors[True] > 10 * errors[False], f"TF32 on looks like full fp32 in conv3d: {errors}"


@pytest.mark.parametrize(
    "knobs",
    [
        {"amp_mode": "none"},
        {"amp_mode": "bf16", "channels_last": True, "optimizer_impl": "fused"},
        # fp16 with foreach Adam syncs once a step inside torch's GradScaler.step (it
        # reads found_inf); fused Adam takes the scaler's tensors: no sync.
        {"amp_mode": "fp16", "optimizer_impl": "fused"},
        {"amp_mode": "bf16", "cuda_graphs": True, "optimizer_impl": "fused"},
    ],
    ids=["fp32", "bf16-cl-fused", "fp16", "bf16-graphs"],
)
def test_timed_phases_never_make_the_cpu_wait_for_the_gpu(
    tiny_config, restore_torch_state, knobs
) -> None:
    # Any host sync inside a trial (item(), a blocking copy, get_scale()) would time the
    # CPU waiting, not the training: sync debug mode turns each one into an error.
    import torch

    from tuneup.unet.build import build_training
    from tuneup.unet.distributed import DistEnv
    from tuneup.worker.workload import DeviceTimer, SetupWorkload

    cfg = tiny_config(device="cuda", Nsamples=256, num_data_workers=2, **knobs)
    setup = build_training(cfg, DistEnv())
    workload = SetupWorkload(setup, DeviceTimer(setup.device))
    workload.full(6)  # warm-up: graph capture, cuDNN autotuning, the scaler's first scale
    workload.prepare("io")
    workload.prepare("synthetic")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        workload.full(8)
        workload.io(4)
        workload.synthetic(4)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert workload.scaler_overflows >= 0


def test_overlapped_copies_deliver_the_same_batches_in_order(tiny_config) -> None:
    import torch

    from tuneup.unet.build import build_training
    from tuneup.unet.distributed import DistEnv

    host = []
    setup = build_training(tiny_config(device="cuda", Nsamples=64), DistEnv())
    for inp, tar in setup.train_loader:
        host.append((inp.clone(), tar.clone()))
    moved = list(setup.device_batches(host))
    assert setup.cfg.non_blocking and len(moved) == len(host)
    for (inp, tar), (dev_inp, dev_tar) in zip(host, moved, strict=True):
        assert dev_inp.is_cuda and torch.equal(dev_inp.cpu(), inp)
        assert torch.equal(dev_tar.cpu(), tar)


def test_graph_capture_survives_a_pin_memory_thread_and_times_only_the_capture(
    tiny_config, restore_torch_state
) -> None:
    # Under the default (global) capture mode a DataLoader's pin-memory thread calling
    # CUDA during the capture breaks it; tuneup captures with thread_local.
    from tuneup.unet.build import build_training
    from tuneup.unet.distributed import DistEnv
    from tuneup.unet.step import GraphedStep
    from tuneup.worker.workload import DeviceTimer, SetupWorkload

    cfg = tiny_config(
        device="cuda",
        amp_mode="bf16",
        cuda_graphs=True,
        num_data_workers=2,
        pin_memory=True,
        Nsamples=256,
    )
    setup = build_training(cfg, DistEnv())
    workload = SetupWorkload(setup, DeviceTimer(setup.device))
    workload.full(8)
    assert isinstance(setup.step, GraphedStep)
    assert 0 < workload.graph_capture_s == setup.step.capture_s
