"""tuneup's U-Net is the tutorial's, layer for layer and name for name: checkpoints go both ways.

`TutorialUNet` below is written from the workload's facts (the tutorial's
networks/UNet.py: six down blocks of Conv3d + LeakyReLU with PyTorch's
default slope, five up blocks of ConvTranspose3d + ReLU, skip concatenation,
a last transposed conv and tanh), with the first width as a parameter so the
outputs can be compared on a tiny model.
"""

from __future__ import annotations

import torch
from torch import nn

from tuneup.unet.model import UNet

# The tutorial's full_scale parameters: name -> shape.
FULL_SCALE = {
    "conv_down1.0.weight": (64, 4, 4, 4, 4), "conv_down1.0.bias": (64,),
    "conv_down2.0.weight": (128, 64, 4, 4, 4), "conv_down2.0.bias": (128,),
    "conv_down3.0.weight": (256, 128, 4, 4, 4), "conv_down3.0.bias": (256,),
    "conv_down4.0.weight": (512, 256, 4, 4, 4), "conv_down4.0.bias": (512,),
    "conv_down5.0.weight": (512, 512, 4, 4, 4), "conv_down5.0.bias": (512,),
    "conv_down6.0.weight": (512, 512, 4, 4, 4), "conv_down6.0.bias": (512,),
    "conv_up6.0.weight": (512, 512, 4, 4, 4), "conv_up6.0.bias": (512,),
    "conv_up5.0.weight": (1024, 512, 4, 4, 4), "conv_up5.0.bias": (512,),
    "conv_up4.0.weight": (1024, 256, 4, 4, 4), "conv_up4.0.bias": (256,),
    "conv_up3.0.weight": (512, 128, 4, 4, 4), "conv_up3.0.bias": (128,),
    "conv_up2.0.weight": (256, 64, 4, 4, 4), "conv_up2.0.bias": (64,),
    "conv_last.weight": (128, 5, 4, 4, 4), "conv_last.bias": (5,),
}  # fmt: skip


class TutorialUNet(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        w = [width, 2 * width, 4 * width, 8 * width, 8 * width, 8 * width]

        def down(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv3d(cin, cout, 4, stride=2, padding=1), nn.LeakyReLU())

        def up(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.ConvTranspose3d(cin, cout, 4, stride=2, padding=1), nn.ReLU())

        self.conv_down1 = down(4, w[0])
        self.conv_down2 = down(w[0], w[1])
        self.conv_down3 = down(w[1], w[2])
        self.conv_down4 = down(w[2], w[3])
        self.conv_down5 = down(w[3], w[4])
        self.conv_down6 = down(w[4], w[5])
        self.conv_up6 = up(w[5], w[4])
        self.conv_up5 = up(2 * w[4], w[3])
        self.conv_up4 = up(2 * w[3], w[2])
        self.conv_up3 = up(2 * w[2], w[1])
        self.conv_up2 = up(2 * w[1], w[0])
        self.conv_last = nn.ConvTranspose3d(2 * w[0], 5, 4, stride=2, padding=1)
        self.tanh = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c1 = self.conv_down1(x)
        c2 = self.conv_down2(c1)
        c3 = self.conv_down3(c2)
        c4 = self.conv_down4(c3)
        c5 = self.conv_down5(c4)
        h = self.conv_up6(self.conv_down6(c5))
        h = self.conv_up5(torch.cat([h, c5], 1))
        h = self.conv_up4(torch.cat([h, c4], 1))
        h = self.conv_up3(torch.cat([h, c3], 1))
        h = self.conv_up2(torch.cat([h, c2], 1))
        return self.tanh(self.conv_last(torch.cat([h, c1], 1)))


def test_the_full_scale_model_has_the_tutorials_parameter_names_shapes_and_layers() -> None:
    with torch.device("meta"):
        model = UNet()
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == FULL_SCALE
    assert list(model.state_dict()) == list(FULL_SCALE)  # in the tutorial's order too
    for block in model.blocks_down:
        assert isinstance(block[1], nn.LeakyReLU) and block[1].negative_slope == 0.01
    for block in model.blocks_up:
        assert isinstance(block[1], nn.ReLU)


def test_a_tutorial_checkpoint_loads_strictly_and_computes_the_same_and_back() -> None:
    torch.manual_seed(0)
    tutorial = TutorialUNet(width=2)
    ours = UNet(width=2, levels=6)
    ours.load_state_dict(tutorial.state_dict(), strict=True)
    x = torch.randn(2, 4, 64, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(ours(x), tutorial(x))  # bit for bit: the same slope, the same order

    back = TutorialUNet(width=2)
    back.load_state_dict(UNet(width=2, levels=6).state_dict(), strict=True)


def test_the_five_level_variant_has_the_first_five_levels_names() -> None:
    with torch.device("meta"):
        half = UNet(levels=5)
    names = {k.split(".")[0] for k in half.state_dict()}
    assert names == {f"conv_down{k}" for k in range(1, 6)} | {
        f"conv_up{k}" for k in range(2, 6)
    } | {"conv_last"}
