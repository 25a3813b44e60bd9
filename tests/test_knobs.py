"""Each performance knob of the trainer changes what is built, or how a run goes (on a CPU)."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch
from torch import Tensor, nn

from tuneup.cli import main
from tuneup.errors import UsageError
from tuneup.unet.build import TrainingSetup, build_training
from tuneup.unet.distributed import DistEnv, local_batch
from tuneup.unet.loop import run_training
from tuneup.unet.metrics import MetricsWriter
from tuneup.unet.optim import build_optimizer
from tuneup.unet.runtime import TF32_ENV, apply_backend_flags, set_tf32_env

pytestmark = pytest.mark.usefixtures("restore_torch_state")


def _build(cfg, *, with_loaders: bool = True) -> TrainingSetup:
    return build_training(cfg, DistEnv(), cuda_available=lambda: False, with_loaders=with_loaders)


def _first_batch(setup: TrainingSetup) -> tuple[Tensor, Tensor]:
    assert setup.train_loader is not None
    inp, tar = next(iter(setup.train_loader))
    return setup.to_device(inp, tar)


def _conv_weights(model: nn.Module) -> list[Tensor]:
    return [p for p in model.parameters() if p.dim() == 5]


# optimizer_impl


def test_foreach_optimizer_is_multi_tensor_adam(tiny_config):
    setup = _build(tiny_config(optimizer_impl="foreach"), with_loaders=False)
    assert isinstance(setup.optimizer, torch.optim.Adam)
    assert setup.optimizer.defaults["foreach"] is True
    assert not setup.optimizer.defaults["fused"]


def test_fused_optimizer_is_fused_adam(tiny_config):
    setup = _build(tiny_config(optimizer_impl="fused"), with_loaders=False)
    assert isinstance(setup.optimizer, torch.optim.Adam)
    assert setup.optimizer.defaults["fused"] is True
    assert not setup.optimizer.defaults["foreach"]


def test_foreach_and_fused_take_the_same_step(tiny_config):
    """The implementation is a speed knob: one step must move the weights alike."""
    weights = []
    for impl in ("foreach", "fused"):
        setup = _build(tiny_config(optimizer_impl=impl))
        before = [p.detach().clone() for p in setup.raw_model.parameters()]
        setup.step(*_first_batch(setup))
        after = list(setup.raw_model.parameters())
        assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
        weights.append([p.detach().clone() for p in after])
    for foreach_p, fused_p in zip(*weights, strict=True):
        torch.testing.assert_close(fused_p, foreach_p)


def test_apex_on_cpu_falls_back_to_fused_with_a_message(tiny_config, capsys):
    setup = _build(tiny_config(optimizer_impl="apex"), with_loaders=False)
    assert setup.optimizer.defaults["fused"] is True
    err = capsys.readouterr().err
    assert "apex" in err and "Adam(fused=True)" in err


def test_apex_not_importable_says_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "apex", None)  # `import apex` now raises ImportError
    params = [nn.Parameter(torch.zeros(3))]
    optimizer = build_optimizer(params, "apex", 1e-3, "cuda")
    assert optimizer.defaults["fused"] is True
    err = capsys.readouterr().err
    assert "apex is not importable" in err and "Adam(fused=True)" in err


# jit


def test_jit_script_scripts_model_and_loss(tiny_config):
    setup = _build(tiny_config(jit="script"))
    assert isinstance(setup.model, torch.jit.ScriptModule)
    assert isinstance(setup.loss_fn, torch.jit.ScriptFunction)
    eager = _build(tiny_config(jit="none"))
    assert not isinstance(eager.model, torch.jit.ScriptModule)
    batch = _first_batch(setup)
    scripted_loss = setup.step(*batch)
    eager_loss = eager.step(*_first_batch(eager))
    torch.testing.assert_close(scripted_loss, eager_loss)


# Importing inductor trips torch's own deprecation of torch.jit.script_method.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_jit_compile_wraps_the_model(tiny_config):
    from torch._dynamo.eval_frame import OptimizedModule

    setup = _build(tiny_config(jit="compile"), with_loaders=False)
    assert isinstance(setup.model, OptimizedModule)
    assert setup.model._orig_mod is setup.raw_model
    # No compiled step here: inductor takes minutes on a 2-core CPU.


# channels_last


@pytest.mark.parametrize("channels_last", [True, False])
def test_channels_last_lays_out_weights_and_batches(tiny_config, channels_last):
    setup = _build(tiny_config(channels_last=channels_last))
    weights = _conv_weights(setup.raw_model)
    assert weights
    layouts = {w.is_contiguous(memory_format=torch.channels_last_3d) for w in weights}
    assert layouts == {channels_last}
    for tensor in _first_batch(setup):
        assert tensor.is_contiguous(memory_format=torch.channels_last_3d) is channels_last
        assert tensor.is_contiguous() is not channels_last


def test_channels_last_gives_the_same_loss(tiny_config):
    losses = []
    for channels_last in (False, True):
        setup = _build(tiny_config(channels_last=channels_last))
        losses.append(setup.step(*_first_batch(setup)))
    torch.testing.assert_close(losses[1], losses[0])


# amp_mode


def _conv_output_dtypes(setup: TrainingSetup, inp: Tensor) -> set[torch.dtype]:
    """Dtypes of every Conv3d output in one forward under the run's autocast policy."""
    seen: set[torch.dtype] = set()
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        for m in setup.raw_model.modules()
        if isinstance(m, nn.Conv3d)
    ]
    try:
        with torch.no_grad(), setup.precision.autocast():
            setup.model(inp)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_bf16_autocasts_convs_without_scaler(tiny_config):
    setup = _build(tiny_config(amp_mode="bf16"))
    assert setup.precision.dtype is torch.bfloat16
    assert setup.precision.scaler is None
    inp, _ = _first_batch(setup)
    with setup.precision.autocast():
        assert torch.is_autocast_enabled("cpu")
    assert _conv_output_dtypes(setup, inp) == {torch.bfloat16}


def test_bf16_step_trains_with_float32_weights(tiny_config):
    setup = _build(tiny_config(amp_mode="bf16"))
    before = [p.detach().clone() for p in setup.raw_model.parameters()]
    loss = setup.step(*_first_batch(setup))
    assert math.isfinite(loss.item())
    after = list(setup.raw_model.parameters())
    assert all(p.dtype is torch.float32 for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))


def test_fp16_has_a_grad_scaler(tiny_config):
    setup = _build(tiny_config(amp_mode="fp16"), with_loaders=False)
    assert setup.precision.dtype is torch.float16
    assert isinstance(setup.precision.scaler, torch.amp.GradScaler)


def test_no_amp_means_no_autocast(tiny_config):
    setup = _build(tiny_config(amp_mode="none"))
    assert setup.precision.dtype is None
    assert setup.precision.scaler is None
    inp, _ = _first_batch(setup)
    with setup.precision.autocast():
        assert not torch.is_autocast_enabled("cpu")
    assert _conv_output_dtypes(setup, inp) == {torch.float32}


# tf32


def test_tf32_off_sets_the_override_variable():
    environ = {"PATH": "/bin"}
    set_tf32_env(False, environ)
    assert environ[TF32_ENV] == "0"
    set_tf32_env(True, environ)
    assert environ == {"PATH": "/bin"}


@pytest.mark.parametrize("tf32", [True, False])
def test_tf32_flag_reaches_torch_backends(tf32):
    torch.backends.cuda.matmul.allow_tf32 = not tf32
    torch.backends.cudnn.allow_tf32 = not tf32
    apply_backend_flags(tf32, cudnn_benchmark=False)
    assert torch.backends.cuda.matmul.allow_tf32 is tf32
    assert torch.backends.cudnn.allow_tf32 is tf32
    assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")


def test_tf32_off_in_a_build_turns_backends_off(tiny_config):
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    _build(tiny_config(tf32=False), with_loaders=False)
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False


def test_tf32_off_is_announced_by_tuneup_train(tiny_values, monkeypatch, capsys):
    # Recorded by monkeypatch, so the variable the command sets is undone afterwards.
    monkeypatch.setenv(TF32_ENV, "1")
    sets = [f"{key}={value}" for key, value in tiny_values.items()]
    sets += ["tf32=false", "max_steps=1", "Nsamples_val=0"]
    code = main(["train", *(arg for s in sets for arg in ("--set", s))])
    assert code == 0
    assert "TF32 disabled (NVIDIA_TF32_OVERRIDE=0)" in capsys.readouterr().out


# cuda_graphs


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_cuda_graphs_without_cuda_is_a_usage_error(tiny_config, device):
    with pytest.raises(UsageError, match="cuda_graphs needs CUDA"):
        _build(tiny_config(cuda_graphs=True, device=device))


# cudnn_benchmark


@pytest.mark.parametrize("benchmark", [True, False])
def test_cudnn_benchmark_reaches_torch(tiny_config, benchmark):
    torch.backends.cudnn.benchmark = not benchmark
    _build(tiny_config(cudnn_benchmark=benchmark), with_loaders=False)
    assert torch.backends.cudnn.benchmark is benchmark


# batch size


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [({"global_batch_size": 8}, 8), ({"global_batch_size": 8, "local_batch_size": 2}, 2)],
)
def test_batch_size_sets_the_loader_batch(tiny_config, knobs, expected):
    cfg = tiny_config(**knobs)
    setup = _build(cfg)
    assert setup.local_batch == expected
    assert setup.steps_per_epoch == cfg.Nsamples // expected
    inp, tar = _first_batch(setup)
    crop = cfg.data_size
    assert inp.shape == (expected, 4, crop, crop, crop)
    assert tar.shape == (expected, cfg.N_out_channels, crop, crop, crop)


def test_global_batch_is_shared_out_over_ranks():
    assert local_batch(8, None, 2) == 4
    assert local_batch(8, 3, 2) == 3
    with pytest.raises(UsageError, match="smaller than the 4 ranks"):
        local_batch(2, None, 4)


# lambda_rho


def test_lambda_rho_adds_to_the_loss_of_the_same_batch(tiny_config):
    losses = {}
    for lambda_rho in (0.0, 0.5):
        setup = _build(tiny_config(lambda_rho=lambda_rho))
        losses[lambda_rho] = setup.step(*_first_batch(setup)).item()
    # The extra term is an L1 distance: never negative, and nonzero for an untrained model.
    assert losses[0.5] > losses[0.0]


# budget and seed


@pytest.mark.parametrize(("max_steps", "epochs"), [(3, 1), (6, 2)])
def test_max_steps_stops_the_run_exactly(tiny_config, max_steps, epochs):
    cfg = tiny_config(max_steps=max_steps, num_epochs=5, Nsamples_val=0)
    setup = _build(cfg)
    assert setup.steps_per_epoch == 4
    result = run_training(setup)
    assert result.steps == max_steps
    assert result.epochs == epochs


def _step_losses(cfg, tmp_path, name: str) -> list[float]:
    """Per-step training losses of one run, as its metrics file records them."""
    path = tmp_path / f"{name}.jsonl"
    writer = MetricsWriter(path)
    try:
        run_training(_build(cfg), metrics=writer)
    finally:
        writer.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["loss"] for r in records if r["kind"] == "train"]


def test_fixed_seed_repeats_the_loss_sequence(tiny_config, tmp_path):
    # Two epochs of two steps: the crops of the second epoch must repeat too.
    knobs = {"log_every": 1, "num_epochs": 2, "Nsamples": 8, "Nsamples_val": 0}
    first = _step_losses(tiny_config(seed=3, **knobs), tmp_path, "first")
    second = _step_losses(tiny_config(seed=3, **knobs), tmp_path, "second")
    other = _step_losses(tiny_config(seed=4, **knobs), tmp_path, "other")
    assert len(first) == 4
    assert second == first
    assert other != first


def test_fp16_counts_the_steps_its_scaler_skips(tiny_config):
    setup = _build(tiny_config(amp_mode="fp16"))
    inp, tar = _first_batch(setup)
    setup.step(inp, tar)
    assert setup.step.scaler_overflows == 0
    bad = inp.clone()
    bad[0, 0, 0, 0, 0] = float("inf")  # inf grads: the scaler skips the step and backs off
    before = [p.detach().clone() for p in setup.raw_model.parameters()]
    setup.step(bad, tar)
    setup.step(bad, tar)
    assert setup.step.scaler_overflows == 2
    assert all(torch.equal(a, b) for a, b in zip(before, setup.raw_model.parameters(), strict=True))
