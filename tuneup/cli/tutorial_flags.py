"""`tuneup train`'s arguments, with the tutorial's train.py flags it accepts as the
knobs they set, so one command line runs either program."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuneup.config import describe_knobs
from tuneup.errors import UsageError

# The tutorial's train.py flags (SC22, and SC21's --enable_amp), accepted by `tuneup
# train` as the knobs they set, so one command line runs either program.
TUTORIAL_FLAGS: dict[str, tuple[tuple[str, str], ...]] = {
    "--enable_amp": (("enable_amp", "true"),),
    "--enable_apex": (("enable_apex", "true"),),
    "--enable_jit": (("enable_jit", "true"),),
    "--enable_benchy": (("enable_benchy", "true"),),
    # as in the tutorial: buffers not broadcast, and gradients as views of the buckets
    "--disable_broadcast_buffers": (
        ("broadcast_buffers", "false"),
        ("gradient_as_bucket_view", "true"),
    ),
    "--noddp": (("noddp", "true"),),
}
TUTORIAL_VALUE_FLAGS = (
    "amp_mode",
    "data_loader_config",
    "local_batch_size",
    "num_epochs",
    "num_data_workers",
    "bucket_cap_mb",
)
# Accepted so the tutorial's command line runs unchanged; tuneup has no use for them.
TUTORIAL_IGNORED_FLAGS = ("--enable_manual_profiling",)
TUTORIAL_YAML = Path("config/UNet.yaml")  # the tutorial's --yaml_config default


def _add_train(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train the U-Net (no arguments: the CPU smoke preset on a synthetic box)",
        description="Train the 3D U-Net. With no config, runs the cpu-smoke preset on a small\n"
        "synthetic box it makes on first use. Every knob below can be set in the YAML\n"
        "file or with --set key=value; the tutorial's train.py flags (--enable_amp,\n"
        "--num_data_workers N, --bucket_cap_mb N, --noddp, ...) are accepted too.",
        epilog=describe_knobs(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "--config",
        metavar="FILE|NAME",
        help="a tuneup YAML config file, or with --yaml_config the name of a block in it",
    )
    train.add_argument(
        "--yaml_config",
        metavar="FILE",
        type=Path,
        help="a YAML file of named configs in the tutorial's format",
    )
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one knob (repeatable; lr_schedule.start_lr=1e-3 reaches nested keys)",
    )
    train.add_argument("--metrics", type=Path, metavar="FILE", help="also write JSON-lines metrics")
    train.add_argument(
        "--run_num",
        default="00",
        metavar="N",
        help="run number, as the tutorial's: with expdir set, rank 0 logs to "
        "EXPDIR/CONFIG/<ranks>GPU/N/out.log and TensorBoard scalars to .../N/logs (default 00)",
    )
    for flag in TUTORIAL_FLAGS:
        train.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for name in TUTORIAL_VALUE_FLAGS:
        train.add_argument(f"--{name}", help=argparse.SUPPRESS)
    for flag in TUTORIAL_IGNORED_FLAGS:
        train.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    train.set_defaults(handler=_run_train)


def _train_overrides(args: argparse.Namespace) -> list[str]:
    """The tutorial flags as --set overrides, applied before the user's own --set."""
    overrides = [
        f"{key}={value}"
        for flag, settings in TUTORIAL_FLAGS.items()
        if getattr(args, flag.lstrip("-"))
        for key, value in settings
    ]
    for name in TUTORIAL_VALUE_FLAGS:
        value = getattr(args, name)
        if value is not None:
            overrides.append(f"{name}={value}")
    return overrides + list(args.overrides)


def _run_train(args: argparse.Namespace) -> int:
    # torch, h5py: only the command that needs them imports them
    from tuneup.commands.train import run_train_command

    if args.yaml_config is not None and args.config is None:
        raise UsageError("--yaml_config needs --config NAME: the block of that file to train")
    yaml_config = args.yaml_config
    as_path = args.config is not None and (
        "/" in args.config or args.config.endswith((".yaml", ".yml"))
    )
    if yaml_config is None and args.config is not None and not as_path:
        if not TUTORIAL_YAML.is_file():
            raise UsageError(
                f"--config {args.config}: a block name needs its file, and there is no "
                f"{TUTORIAL_YAML} here (the tutorial's default): give --yaml_config FILE"
            )
        yaml_config = TUTORIAL_YAML  # a block name, as the tutorial's train.py reads it
    for flag in TUTORIAL_IGNORED_FLAGS:
        if getattr(args, flag.lstrip("-")):
            print(f"tuneup: {flag} is the tutorial's; tuneup train ignores it", file=sys.stderr)
    return run_train_command(
        config=args.config,
        yaml_config=yaml_config,
        overrides=_train_overrides(args),
        metrics_path=args.metrics,
        run_num=args.run_num,
    )
