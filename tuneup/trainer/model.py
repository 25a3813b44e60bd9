"""The 3D U-Net that maps N-body fields to hydro fields, its init and its loss.

Written from the workload's description (see docs): strided 4x4x4 convs
down, transposed convs up with skip connections, tanh output. The forward
pass uses only constructs that torch.jit.script and torch.compile both
accept, so the JIT and compile knobs can wrap the same module.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tuneup.trainer.flops import (
    KERNEL,
    GeometryError,
    check_geometry,
    flops_per_sample,
    unet_widths,
)

__all__ = [
    "LEAKY_SLOPE",
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

# Negative slope of the encoder's LeakyReLU: the usual choice for this
# pix2pix-style encoder.
LEAKY_SLOPE = 0.2

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
    117 M parameters); 5 levels is its full_scale=False variant; tests use
    tiny widths. Weights are initialised as in the tutorial (normal(0, 0.02),
    zero biases) unless `init_scale` is None.

    Args:
        in_channels: input fields (4 N-body channels).
        out_channels: output fields (5 hydro channels).
        width: channels of the first level; deeper levels double up to 8x.
        levels: number of down blocks; crops must divide by 2**levels.
        init_scale: std of the initial conv weights, or None for torch's default.
    """

    def __init__(
        self,
        in_channels: int = 4,
        out_channels: int = 5,
        width: int = 64,
        levels: int = 6,
        init_scale: float | None = 0.02,
    ) -> None:
        super().__init__()
        widths = unet_widths(width, levels)
        self.levels = levels
        self.down = nn.ModuleList()
        channels = in_channels
        for cout in widths:
            self.down.append(_down(channels, cout))
            channels = cout
        self.up = nn.ModuleList()
        for j in range(levels - 1):
            # After the first up block the input carries the concatenated skip.
            cin = widths[-1] if j == 0 else 2 * widths[levels - 1 - j]
            self.up.append(_up(cin, widths[levels - 2 - j]))
        head_in = 2 * widths[0] if levels > 1 else widths[0]
        self.head = nn.ConvTranspose3d(head_in, out_channels, KERNEL, stride=2, padding=1)
        if init_scale is not None:
            init_weights(self, init_scale)

    def forward(self, x: Tensor) -> Tensor:
        """Map (N, in, S, S, S) to (N, out, S, S, S) with values in (-1, 1)."""
        skips: list[Tensor] = []
        h = x
        for block in self.down:
            h = block(h)
            skips.append(h)
        # The deepest output is the bottleneck itself, not a skip.
        skips.pop()
        for block in self.up:
            h = block(h)
            h = torch.cat([h, skips.pop()], dim=1)
        return torch.tanh(self.head(h))


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
