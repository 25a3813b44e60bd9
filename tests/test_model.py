"""The U-Net, its init, loss and FLOP count, as a user of the trainer sees them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from tuneup.errors import UsageError
from tuneup.unet.model import (
    UNet,
    check_geometry,
    count_parameters,
    flops_per_sample,
    init_weights,
    l1_rho_loss,
    unet_widths,
)

# torch >= 2.10 warns that torch.jit.script is deprecated; the JIT knob still uses it.
ignore_jit_deprecation = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)


def tiny(**kwargs: int) -> UNet:
    torch.manual_seed(0)
    return UNet(**{"width": 4, "levels": 3, **kwargs})


def batch(n: int = 2, crop: int = 16, channels: int = 4) -> torch.Tensor:
    return torch.randn(n, channels, crop, crop, crop, generator=torch.Generator().manual_seed(1))


def test_full_model_has_the_tutorials_layers_and_size():
    with torch.device("meta"):
        model = UNet(width=64, levels=6)
    assert [block[0].out_channels for block in model.blocks_down] == [64, 128, 256, 512, 512, 512]
    assert [block[0].in_channels for block in model.blocks_up] == [512, 1024, 1024, 512, 256]
    assert [block[0].out_channels for block in model.blocks_up] == [512, 512, 256, 128, 64]
    assert (model.conv_last.in_channels, model.conv_last.out_channels) == (128, 5)
    assert count_parameters(model) == pytest.approx(117e6, rel=0.01)


def test_half_scale_variant_drops_the_sixth_level():
    with torch.device("meta"):
        full = UNet(width=64, levels=6)
        half = UNet(width=64, levels=5)
    assert len(half.blocks_down) == 5 and len(half.blocks_up) == 4
    assert count_parameters(half) < count_parameters(full)
    assert unet_widths(64, 5) == [64, 128, 256, 512, 512]


def test_frozen_parameters_are_not_counted():
    model = tiny()
    total = count_parameters(model)
    model.conv_last.weight.requires_grad_(False)
    assert count_parameters(model) == total - model.conv_last.weight.numel()


def test_full_model_flops_match_the_published_figure():
    training = flops_per_sample(64, width=64, levels=6)
    assert training == pytest.approx(80e9, rel=0.03)
    # Backward costs about twice the forward.
    forward = flops_per_sample(64, width=64, levels=6, training=False)
    assert 2.8 < training / forward < 3.0


def test_output_has_target_shape_and_tanh_range():
    model = tiny()
    init_weights(model, scale=0.5)  # large weights would push an unbounded output past 1
    with torch.no_grad():
        out = model(100.0 * batch())
    assert out.shape == (2, 5, 16, 16, 16)
    assert out.abs().max() <= 1.0
    assert out.abs().max() > 0.5


@pytest.mark.parametrize(
    ("width", "levels", "crop", "in_channels", "out_channels"),
    [(4, 3, 16, 4, 5), (3, 2, 8, 2, 1), (2, 4, 32, 4, 5), (4, 1, 8, 4, 5)],
)
@pytest.mark.parametrize("training", [True, False])
def test_analytic_flops_equal_torch_flop_counter(
    width, levels, crop, in_channels, out_channels, training
):
    model = UNet(in_channels, out_channels, width=width, levels=levels)
    x = batch(n=3, crop=crop, channels=in_channels)
    with FlopCounterMode(display=False) as counter:
        if training:
            model(x).sum().backward()
        else:
            with torch.no_grad():
                model(x)
    expected = 3 * flops_per_sample(crop, width, levels, in_channels, out_channels, training)
    assert counter.get_total_flops() == pytest.approx(expected, rel=1e-9)


def test_init_draws_small_normal_weights_and_zero_biases():
    torch.manual_seed(0)
    model = UNet(width=16, levels=3)
    conv = model.conv_down3[0]  # 32 -> 64 channels: 131072 weights
    assert conv.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert abs(conv.weight.mean().item()) < 1e-3
    assert torch.count_nonzero(conv.bias) == 0

    init_weights(model, scale=0.05, bias=0.1)
    assert conv.weight.std().item() == pytest.approx(0.05, rel=0.03)
    assert torch.all(model.conv_last.bias == 0.1)


def test_init_leaves_other_layers_alone():
    model = nn.Sequential(nn.Conv3d(2, 8, 3), nn.Linear(4, 4))
    before = model[1].weight.clone()
    init_weights(model)
    assert torch.equal(model[1].weight, before)
    assert torch.count_nonzero(model[0].bias) == 0


def test_loss_is_plain_l1_without_rho_term():
    pred, target = 0.1 * batch(channels=5), 0.1 * batch(n=2, channels=5).flip(0)
    assert torch.allclose(l1_rho_loss(pred, target, 0.0), F.l1_loss(pred, target))


def test_rho_term_adds_to_the_loss_only_where_predictions_differ():
    pred = 0.1 * batch(channels=5)
    target = pred.flip(0)
    plain = l1_rho_loss(pred, target, 0.0)
    assert l1_rho_loss(pred, target, 0.5) > plain
    assert l1_rho_loss(pred, pred.clone(), 0.5) == 0.0


@ignore_jit_deprecation
def test_scripted_model_matches_eager():
    model = tiny()
    scripted = torch.jit.script(model)
    x = batch()
    with torch.no_grad():
        assert torch.allclose(scripted(x), model(x), atol=1e-6)


@ignore_jit_deprecation
@pytest.mark.parametrize("lambda_rho", [0.0, 0.5])
def test_scripted_loss_matches_eager(lambda_rho):
    scripted = torch.jit.script(l1_rho_loss)
    pred = 0.1 * batch(channels=5)
    target = pred.flip(0)
    assert torch.allclose(scripted(pred, target, lambda_rho), l1_rho_loss(pred, target, lambda_rho))


def test_channels_last_input_gives_the_same_output():
    model = tiny()
    x = batch()
    with torch.no_grad():
        expected = model(x)
        model = model.to(memory_format=torch.channels_last_3d)
        out = model(x.to(memory_format=torch.channels_last_3d))
    assert torch.allclose(out, expected, atol=1e-6)


def test_compiles_without_graph_breaks():
    model = tiny()
    x = batch()
    # fullgraph fails on any graph break; the eager backend keeps this test fast.
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), atol=1e-6)


@pytest.mark.parametrize(("crop", "levels"), [(60, 6), (32, 6), (0, 3), (-16, 3), (24, 4)])
def test_bad_crop_is_refused_with_the_sizes_that_work(crop, levels):
    with pytest.raises(ValueError, match=rf"multiple of {2**levels}") as info:
        check_geometry(crop, levels)
    assert isinstance(info.value, UsageError)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError):
        flops_per_sample(crop, width=4, levels=levels)


@pytest.mark.parametrize(("crop", "levels"), [(64, 6), (128, 6), (32, 5), (16, 3)])
def test_good_crop_is_accepted(crop, levels):
    check_geometry(crop, levels)


@pytest.mark.parametrize(("width", "levels"), [(0, 3), (4, 0)])
def test_empty_model_is_refused(width, levels):
    with pytest.raises(UsageError):
        UNet(width=width, levels=levels)
