"""The 3D U-Net that maps N-body fields to hydro fields, its init and its loss.

Written from the workload's description (see docs): strided 4x4x4 convs
down, transposed convs up with skip connections, tanh output. The forward
pass uses only constructs that torch.jit.script and torch.compile both
accept, so the JIT and compile knobs can wrap the same module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tuneup.config import MAX_LEVELS
from tuneup.unet.flops import (
    KERNEL,
    GeometryError,
    check_geometry,
    flops_per_sample,
    unet_widths,
)

__all__ = [
    "LEAKY_SLOPE",
    "MAX_LEVELS",
    "RHO_SCALE",
    "GeometryError",
    "UNet",
    "check_geometry",
    "count_parameters",
    "flops_per_sample",
    "init_weights",
    "l1_rho_loss",
    "unet_widths",
]

# Negative slope of the encoder's LeakyReLU: PyTorch's default, as the tutorial's
# `nn.LeakyReLU(inplace=True)` has it (with 0.2 outputs differed by up to 0.17).
LEAKY_SLOPE = 0.01

# Channel 0 (gas density) is stored as a log-like value in [-1, 1]; exp(14 x)
# brings it back to a density-like scale for the optional rho term.
RHO_SCALE = 14.0

_CONV_TYPES = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)


def _down(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv3d(cin, cout, KERNEL, stride=2, padding=1),
        nn.LeakyReLU(LEAKY_SLOPE, inplace=True),
    )


def _up(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.ConvTranspose3d(cin, cout, KERNEL, stride=2, padding=1),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    """3D U-Net: `levels` halvings down, as many doublings up, tanh output.

    With width 64 and 6 levels it is the tutorial's full_scale model (about
    117 M parameters), block for block and name for name, so a state_dict of
    the tutorial's `UNet` loads here with strict=True and the reverse; 5
    levels is its full_scale=False variant; tests use tiny widths. Weights are
    initialised as in the tutorial (normal(0, 0.02), zero biases) unless
    `init_scale` is None.

    Blocks a shallower model does not have are None: TorchScript drops the
    branches that test them, so the forward pass scripts at any depth.

    Args:
        in_channels: input fields (4 N-body channels).
        out_channels: output fields (5 hydro channels).
        width: channels of the first level; deeper levels double up to 8x.
        levels: number of down blocks, 1 to MAX_LEVELS; crops must divide by 2**levels.
        init_scale: std of the initial conv weights, or None for torch's default.
    """

    def __init__(
        self,
        in_channels: int = 4,
        out_channels: int = 5,
        width: int = 64,
        levels: int = MAX_LEVELS,
        init_scale: float | None = 0.02,
    ) -> None:
        super().__init__()
        if not 1 <= levels <= MAX_LEVELS:
            raise GeometryError(f"the U-Net has 1 to {MAX_LEVELS} levels, got {levels}")
        widths = unet_widths(width, levels)
        self.levels = levels
        channels = in_channels
        for k in range(1, MAX_LEVELS + 1):
            down = None
            if k <= levels:
                down, channels = _down(channels, widths[k - 1]), widths[k - 1]
            setattr(self, f"conv_down{k}", down)
        for k in range(MAX_LEVELS, 1, -1):
            up = None
            if k <= levels:
                # Level K's output: the bottleneck, or the previous up block's output
                # with level K's skip concatenated; out: level K-1's width.
                cin = widths[k - 1] if k == levels else 2 * widths[k - 1]
                up = _up(cin, widths[k - 2])
            setattr(self, f"conv_up{k}", up)
        head_in = 2 * widths[0] if levels > 1 else widths[0]
        self.conv_last = nn.ConvTranspose3d(head_in, out_channels, KERNEL, stride=2, padding=1)
        self.tanh = nn.Tanh()
        if init_scale is not None:
            init_weights(self, init_scale)

    @property
    def blocks_down(self) -> list[nn.Module]:
        """The encoder's blocks, shallowest first."""
        return [getattr(self, f"conv_down{k}") for k in range(1, self.levels + 1)]

    @property
    def blocks_up(self) -> list[nn.Module]:
        """The decoder's blocks, deepest first (conv_last apart)."""
        return [getattr(self, f"conv_up{k}") for k in range(self.levels, 1, -1)]

    __jit_unused_properties__ = ["blocks_down", "blocks_up"]  # noqa: RUF012

    if TYPE_CHECKING:  # what mypy should know; TorchScript reads the modules set in __init__
        conv_down1: nn.Module
        conv_down2: nn.Module | None
        conv_down3: nn.Module | None
        conv_down4: nn.Module | None
        conv_down5: nn.Module | None
        conv_down6: nn.Module | None
        conv_up2: nn.Module | None
        conv_up3: nn.Module | None
        conv_up4: nn.Module | None
        conv_up5: nn.Module | None
        conv_up6: nn.Module | None

    def forward(self, x: Tensor) -> Tensor:
        """Map (N, in, S, S, S) to (N, out, S, S, S) with values in (-1, 1)."""
        skips: list[Tensor] = []
        h = self.conv_down1(x)
        if self.conv_down2 is not None:
            skips.append(h)
            h = self.conv_down2(h)
        if self.conv_down3 is not None:
            skips.append(h)
            h = self.conv_down3(h)
        if self.conv_down4 is not None:
            skips.append(h)
            h = self.conv_down4(h)
        if self.conv_down5 is not None:
            skips.append(h)
            h = self.conv_down5(h)
        if self.conv_down6 is not None:
            skips.append(h)
            h = self.conv_down6(h)
        # The deepest output is the bottleneck itself; each up block gets its skip.
        if self.conv_up6 is not None:
            h = torch.cat([self.conv_up6(h), skips.pop()], dim=1)
        if self.conv_up5 is not None:
            h = torch.cat([self.conv_up5(h), skips.pop()], dim=1)
        if self.conv_up4 is not None:
            h = torch.cat([self.conv_up4(h), skips.pop()], dim=1)
        if self.conv_up3 is not None:
            h = torch.cat([self.conv_up3(h), skips.pop()], dim=1)
        if self.conv_up2 is not None:
            h = torch.cat([self.conv_up2(h), skips.pop()], dim=1)
        return self.tanh(self.conv_last(h))


def init_weights(model: nn.Module, scale: float = 0.02, bias: float = 0.0) -> None:
    """Reset every conv and transposed conv: weights normal(0, scale), biases `bias`.

    The tutorial's init; torch's default (Kaiming-uniform) trains differently,
    so runs compared against the published figures should use this one.
    """
    with torch.no_grad():
        for module in model.modules():
            # Meta tensors (used to size the model) hold no values; skipping
            # them also spares the seconds torch takes to load meta normal_.
            if isinstance(module, _CONV_TYPES) and not module.weight.is_meta:
                nn.init.normal_(module.weight, 0.0, scale)
                if module.bias is not None:
                    nn.init.constant_(module.bias, bias)


def l1_rho_loss(
    pred: Tensor, target: Tensor, lambda_rho: float, rho_scale: float = RHO_SCALE
) -> Tensor:
    """L1 loss, plus `lambda_rho` times the L1 of exp(rho_scale x) of channel 0.

    The extra term weighs errors in dense regions, where exp(14 x) is large.
    Scriptable with torch.jit.script: the JIT knob's fused loss. The scale is
    an argument because TorchScript cannot read a module-level float.
    """
    loss = F.l1_loss(pred, target)
    if lambda_rho != 0.0:
        rho_pred = torch.exp(rho_scale * pred[:, 0])
        rho_target = torch.exp(rho_scale * target[:, 0])
        loss = loss + lambda_rho * F.l1_loss(rho_pred, rho_target)
    return loss


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters (works on the meta device, so no memory is needed)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
