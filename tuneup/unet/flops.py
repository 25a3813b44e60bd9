"""Shape arithmetic of the 3D U-Net: widths, valid crops and analytic FLOPs.

Kept free of torch so that the CLI and the planner can size a run (throughput
in TFLOP/s, which crops fit) without importing it.
"""

from __future__ import annotations

from collections.abc import Iterator

from tuneup.errors import UsageError

# Every conv of the U-Net has a 4x4x4 kernel with stride 2 and padding 1:
# each down block halves the cube's side and each up block doubles it.
KERNEL = 4
KERNEL_VOLUME = KERNEL**3

# Widths stop doubling at this multiple of the first width (64 -> 512).
MAX_WIDTH_FACTOR = 8


class GeometryError(UsageError, ValueError):
    """A crop size or depth the U-Net cannot run.

    It is a UsageError so the CLI prints it as one line, and a ValueError
    because that is what a bad argument is to a Python caller.
    """


def unet_widths(width: int, levels: int) -> list[int]:
    """Output channels of each encoder level, doubling from `width` up to 8x.

    Args:
        width: channels of the first level (64 in the tutorial).
        levels: number of down blocks (6 for full_scale, 5 otherwise).

    Returns:
        One width per level, e.g. (64, 6) -> [64, 128, 256, 512, 512, 512].
    """
    if width < 1:
        raise GeometryError(f"model width must be at least 1, got {width}")
    if levels < 1:
        raise GeometryError(f"model levels must be at least 1, got {levels}")
    cap = MAX_WIDTH_FACTOR * width
    return [min(width * 2**i, cap) for i in range(levels)]


def check_geometry(crop: int, levels: int) -> None:
    """Fail early, in one line, when the crop cannot go down `levels` halvings.

    Each level halves the cube's side, so the side must divide by 2**levels
    for the skip connections to line up and the bottleneck to be at least 1.

    Raises:
        GeometryError: (a ValueError and a UsageError) naming the crops that work.
    """
    if levels < 1:
        raise GeometryError(f"model levels must be at least 1, got {levels}")
    step = 2**levels
    if crop < step or crop % step != 0:
        examples = ", ".join(str(step * k) for k in (1, 2, 3))
        raise GeometryError(
            f"crop size {crop} does not fit a {levels}-level U-Net: use a multiple of "
            f"{step} (e.g. {examples}) or change the number of levels"
        )


def _conv_macs(
    crop: int, width: int, levels: int, in_channels: int, out_channels: int
) -> Iterator[int]:
    """Multiply-adds of each conv's forward pass for one sample, in forward order.

    A strided conv does Cin*Cout*k^3 multiply-adds per output voxel; a
    transposed conv does as many per input voxel (it scatters each input into
    a k^3 window). Padded borders count like interior voxels, as the
    kernels (and torch.utils.flop_counter) do.
    """
    widths = unet_widths(width, levels)
    channels = in_channels
    for level, cout in enumerate(widths):
        out_side = crop // 2 ** (level + 1)
        yield out_side**3 * channels * cout * KERNEL_VOLUME
        channels = cout
    # Up blocks: input at side crop / 2**(levels - j); after the first, the
    # input carries the concatenated skip, hence twice the width.
    for j in range(levels - 1):
        in_side = crop // 2 ** (levels - j)
        cin = widths[-1] if j == 0 else 2 * widths[levels - 1 - j]
        cout = widths[levels - 2 - j]
        yield in_side**3 * cin * cout * KERNEL_VOLUME
    head_in = 2 * widths[0] if levels > 1 else widths[0]
    yield (crop // 2) ** 3 * head_in * out_channels * KERNEL_VOLUME


def flops_per_sample(
    crop: int,
    width: int,
    levels: int,
    in_channels: int = 4,
    out_channels: int = 5,
    training: bool = True,
) -> float:
    """Analytic FLOPs (a multiply-add is 2) of one sample through the U-Net.

    Counts convolutions only, like torch.utils.flop_counter: activations,
    concatenations, biases and the loss are a rounding error beside them.
    Training adds the backward pass: the gradient of each conv's weights and
    of its input, each as costly as the forward, except that the first conv
    needs no gradient of the data. The full model at 64^3 does about 80.5
    GFLOP per training sample (27.2 forward).

    Args:
        crop: side of the cubic crop in voxels.
        width: channels of the first level.
        levels: number of down blocks.
        in_channels: input channels (4 N-body fields).
        out_channels: output channels (5 hydro fields).
        training: count backward as well as forward.

    Raises:
        GeometryError: if the crop does not fit the number of levels.
    """
    check_geometry(crop, levels)
    macs = list(_conv_macs(crop, width, levels, in_channels, out_channels))
    forward = 2.0 * sum(macs)
    if not training:
        return forward
    # Backward: grad of weights for every conv, grad of input for all but the first.
    backward = 2.0 * sum(macs) + 2.0 * sum(macs[1:])
    return forward + backward


# Dense peak TFLOP/s by GPU and math mode, from NVIDIA's datasheets (A100: "NVIDIA A100
# Tensor Core GPU" datasheet, SXM; H100 and H200: the H100 and H200 datasheets, SXM
# and PCIe/NVL; sparsity figures halved). fp32 is the CUDA-core rate, tf32 the tensor cores'.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    "H100": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    "H200": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    "V100": {"fp32": 15.7, "tf32": 15.7, "fp16": 125.0},  # no bf16 or TF32 units
}


def peak_tflops(gpu_name: str, precision: str) -> float | None:
    """The GPU's dense peak for `precision` (fp32, tf32, bf16, fp16); None when unknown.

    The most specific entry whose key is in the name wins ("H100 PCIe" before "H100").
    """
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):
        if key in gpu_name:
            return PEAK_TFLOPS[key].get(precision)
    return None


def math_mode(amp_mode: str, tf32: bool) -> str:
    """Which peak a run can reach: its autocast dtype, else TF32 or plain fp32."""
    if amp_mode in ("bf16", "fp16"):
        return amp_mode
    return "tf32" if tf32 else "fp32"


def unet_gradient_tensors(
    width: int = 64, levels: int = 6, in_channels: int = 4, out_channels: int = 5
) -> list[int]:
    """Elements of each trainable tensor of the U-Net, in registration order (no torch).

    Every conv is 4x4x4 with a bias; the decoder's inputs carry the skips.
    """
    widths = unet_widths(width, levels)
    convs: list[tuple[int, int]] = []
    channels = in_channels
    for cout in widths:
        convs.append((channels, cout))
        channels = cout
    for j in range(levels - 1):
        cin = widths[-1] if j == 0 else 2 * widths[levels - 1 - j]
        convs.append((cin, widths[levels - 2 - j]))
    convs.append((2 * widths[0] if levels > 1 else widths[0], out_channels))
    sizes: list[int] = []
    for cin, cout in convs:
        sizes += [cin * cout * KERNEL_VOLUME, cout]  # weight, bias
    return sizes


def unet_parameter_count(
    width: int = 64, levels: int = 6, in_channels: int = 4, out_channels: int = 5
) -> int:
    """Trainable parameters of the U-Net, from its shape alone."""
    return sum(unet_gradient_tensors(width, levels, in_channels, out_channels))
