"""From a TrainConfig to everything a run needs: model, optimizer, step, loaders.

The probe worker of a later issue builds the same setup and times its phases,
so nothing here runs a step or reads the clock.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from tuneup.config import INPUT_CHANNELS, TrainConfig
from tuneup.errors import UsageError
from tuneup.unet.datacheck import check_data, data_paths, npy_copies
from tuneup.unet.distributed import DistEnv, init_process_group, local_batch
from tuneup.unet.flops import flops_per_sample
from tuneup.unet.loaders import Batches, build_loader
from tuneup.unet.model import UNet, count_parameters, init_weights, l1_rho_loss
from tuneup.unet.optim import build_optimizer
from tuneup.unet.precision import Precision, build_precision
from tuneup.unet.ranges import part
from tuneup.unet.refusals import samples_problem
from tuneup.unet.runtime import DeviceChoice, apply_backend_flags, apply_threads, choose_device
from tuneup.unet.schedule import LrSchedule, schedule_for
from tuneup.unet.step import EagerStep, GraphedStep, LossFn
from tuneup.unet.transfer import device_batches

VAL_SEED_OFFSET = 1_000_003  # validation crops come from a stream of their own


@dataclass
class TrainingSetup:
    """A ready-to-run training job on one rank."""

    cfg: TrainConfig
    env: DistEnv
    device: torch.device
    raw_model: nn.Module
    model: nn.Module
    loss_fn: LossFn
    optimizer: torch.optim.Optimizer
    precision: Precision
    step: EagerStep | GraphedStep
    schedule: LrSchedule
    local_batch: int
    global_batch: int
    steps_per_epoch: int
    memory_format: torch.memory_format
    train_loader: Batches | None = None
    val_loader: Batches | None = None
    notes: list[str] = field(default_factory=list)

    def to_device(self, inp: Tensor, tar: Tensor) -> tuple[Tensor, Tensor]:
        """Move a host batch to the device in the model's memory format."""
        non_blocking = self.cfg.non_blocking and self.device.type == "cuda"
        with part("h2d"):
            inp = inp.to(self.device, non_blocking=non_blocking, memory_format=self.memory_format)
            tar = tar.to(self.device, non_blocking=non_blocking, memory_format=self.memory_format)
        return inp, tar

    def device_batches(
        self, host: Iterable[tuple[Tensor, Tensor]]
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Host batches on the device; with non_blocking, each copy overlaps the step before."""

        return device_batches(host, self.to_device, self.device, overlap=self.cfg.non_blocking)

    def ensure_graph(self, inp: Tensor, tar: Tensor) -> None:
        """Capture the CUDA graph on the first real batch (when cuda_graphs is on)."""
        if self.cfg.cuda_graphs and isinstance(self.step, EagerStep):
            self.step = GraphedStep(
                self.step, inp, tar, warmup_steps=11 if self.env.distributed else 3
            )


def _loader(
    cfg: TrainConfig,
    env: DistEnv,
    path: Path | None,
    batch: int,
    n_samples: int,
    seed: int,
    box: int,
    npy: tuple[Path | None, Path | None] = (None, None),
    device: torch.device | None = None,
) -> Batches:
    return build_loader(
        cfg.data_loader_config,
        path=path,
        crop=cfg.data_size,
        batch_size=batch,
        n_samples=n_samples,
        num_workers=cfg.num_data_workers,
        pin_memory=cfg.pin_memory,
        persistent_workers=cfg.persistent_workers,
        prefetch_factor=cfg.prefetch_factor,
        seed=seed,
        rank=env.rank,
        synthetic_box=box,
        npy_data=npy[0],
        npy_label=npy[1],
        prefetch_depth=cfg.dali_prefetch,
        device=str(device) if device is not None else "cpu",
    )


def build_model(cfg: TrainConfig) -> nn.Module:
    """The U-Net of the config with the tutorial's weight init."""
    model = UNet(
        in_channels=INPUT_CHANNELS,
        out_channels=cfg.N_out_channels,
        width=cfg.width,
        levels=cfg.unet_levels,
        init_scale=None,  # initialised below from the config's weight_init
    )
    init_weights(model, scale=cfg.weight_init["conv_scale"], bias=cfg.weight_init["conv_bias"])
    return model


def wrap_model(
    cfg: TrainConfig, model: nn.Module, env: DistEnv, device: DeviceChoice
) -> tuple[nn.Module, LossFn]:
    """Apply the JIT and DDP knobs: TorchScript before DDP, torch.compile after it."""
    loss_fn: LossFn = l1_rho_loss
    if cfg.jit == "script":
        with warnings.catch_warnings():  # TorchScript is deprecated; the tutorial's knob stays
            warnings.simplefilter("ignore", DeprecationWarning)
            model = torch.jit.script(model)
            loss_fn = torch.jit.script(l1_rho_loss)
    if env.distributed and not cfg.noddp:
        options: dict[str, Any] = {
            "device_ids": [device.index] if device.type == "cuda" else None,
            "bucket_cap_mb": cfg.bucket_cap_mb,
            "gradient_as_bucket_view": cfg.gradient_as_bucket_view,
        }
        if not cfg.broadcast_buffers:  # True is DDP's default; newer torch deprecates the name
            options["broadcast_buffers"] = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            model = DistributedDataParallel(model, **options)
    if cfg.jit == "compile":
        model = cast(
            nn.Module,
            torch.compile(model, mode=None if cfg.compile_mode == "default" else cfg.compile_mode),
        )
    return model, loss_fn


def preflight(
    cfg: TrainConfig, env: DistEnv, *, cuda_available: Callable[[], bool] = torch.cuda.is_available
) -> DeviceChoice:
    """The checks that need to know the machine, before any data is made or read."""
    device = choose_device(cfg.device, env.local_rank, cuda_available())
    if cfg.cuda_graphs and device.type != "cuda":
        raise UsageError("cuda_graphs needs CUDA: run on a GPU node or set cuda_graphs=false")
    return device


@dataclass(frozen=True)
class _BatchPlan:
    """How one rank's share of the samples divides into steps."""

    local_batch: int
    global_batch: int
    per_rank_samples: int
    steps_per_epoch: int
    total_steps: int


def _prepare_rank(
    cfg: TrainConfig,
    env: DistEnv,
    *,
    cuda_available: Callable[[], bool],
    with_loaders: bool,
) -> DeviceChoice:
    """Check the machine and the data, then set up the device, backend and process group."""
    device = preflight(cfg, env, cuda_available=cuda_available)
    if with_loaders:
        check_data(cfg)
    if device.type == "cuda":
        torch.cuda.set_device(device.index)
    apply_backend_flags(cfg.tf32, cfg.cudnn_benchmark)
    apply_threads(cfg.intra_op_threads)
    init_process_group(env, device.type)
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    return device


def _plan_batches(cfg: TrainConfig, env: DistEnv) -> _BatchPlan:
    batch = local_batch(cfg.global_batch_size, cfg.local_batch_size, env.world_size)
    global_batch = batch * env.world_size
    per_rank_samples = cfg.Nsamples // env.world_size
    steps_per_epoch = per_rank_samples // batch
    problem = samples_problem(cfg.Nsamples, batch, env.world_size)
    if problem is not None:
        raise UsageError(problem)
    total_steps = steps_per_epoch * cfg.num_epochs
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    return _BatchPlan(
        local_batch=batch,
        global_batch=global_batch,
        per_rank_samples=per_rank_samples,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
    )


def _build_setup(
    cfg: TrainConfig, env: DistEnv, device: DeviceChoice, plan: _BatchPlan
) -> TrainingSetup:
    """Model, optimizer, precision, step and schedule on the chosen device (no loaders yet)."""
    torch_device = torch.device(device.name)
    memory_format = torch.channels_last_3d if cfg.channels_last else torch.contiguous_format
    # Module.to takes memory_format at run time; torch's stubs do not list it.
    raw_model = build_model(cfg).to(torch_device, memory_format=memory_format)  # type: ignore[call-overload]
    model, loss_fn = wrap_model(cfg, raw_model, env, device)
    optimizer = build_optimizer(
        raw_model.parameters(),
        cfg.optimizer_impl,
        cfg.lr_schedule["start_lr"],
        device.type,
        capturable=cfg.cuda_graphs,
    )
    precision = build_precision(cfg.amp_mode, device.type)
    step = EagerStep(model, loss_fn, optimizer, precision, cfg.lambda_rho)
    schedule = schedule_for(
        cfg.lr_schedule,
        total_steps=plan.total_steps,
        global_batch=plan.global_batch,
        base_batch=cfg.base_batch_size,
    )
    return TrainingSetup(
        cfg=cfg,
        env=env,
        device=torch_device,
        raw_model=raw_model,
        model=model,
        loss_fn=loss_fn,
        optimizer=optimizer,
        precision=precision,
        step=step,
        schedule=schedule,
        local_batch=plan.local_batch,
        global_batch=plan.global_batch,
        steps_per_epoch=plan.steps_per_epoch,
        memory_format=memory_format,
    )


def _attach_loaders(setup: TrainingSetup, plan: _BatchPlan) -> None:
    """The training loader and, when there are validation samples, the validation loader."""
    cfg, env, batch = setup.cfg, setup.env, plan.local_batch
    train_path, val_path = data_paths(cfg)
    train_box = cfg.box_size[0]
    val_box = cfg.box_size[-1]
    train_npy, val_npy = npy_copies(cfg)
    setup.train_loader = _loader(
        cfg,
        env,
        train_path,
        batch,
        plan.per_rank_samples,
        cfg.seed,
        train_box,
        train_npy,
        setup.device,
    )
    if cfg.Nsamples_val > 0:
        val_samples = max(cfg.Nsamples_val // env.world_size, batch)
        setup.val_loader = _loader(
            cfg,
            env,
            val_path,
            batch,
            val_samples,
            cfg.seed + VAL_SEED_OFFSET,
            val_box,
            val_npy,
            setup.device,
        )


def _add_notes(setup: TrainingSetup) -> None:
    setup.notes.append(
        f"model: {count_parameters(setup.raw_model) / 1e6:.2f} M parameters, "
        f"{model_flops(setup.cfg) / 1e9:.2f} GFLOP per sample (forward+backward)"
    )
    if os.environ.get("NVIDIA_TF32_OVERRIDE") == "0":
        setup.notes.append("TF32 disabled (NVIDIA_TF32_OVERRIDE=0)")


def build_training(
    cfg: TrainConfig,
    env: DistEnv,
    *,
    cuda_available: Callable[[], bool] = torch.cuda.is_available,
    with_loaders: bool = True,
) -> TrainingSetup:
    """Build one rank's training job; every performance knob is applied here."""
    device = _prepare_rank(cfg, env, cuda_available=cuda_available, with_loaders=with_loaders)
    plan = _plan_batches(cfg, env)
    setup = _build_setup(cfg, env, device, plan)
    if with_loaders:
        _attach_loaders(setup, plan)
    _add_notes(setup)
    return setup


def model_flops(cfg: TrainConfig) -> float:
    return flops_per_sample(
        cfg.data_size, cfg.width, cfg.unet_levels, INPUT_CHANNELS, cfg.N_out_channels
    )
