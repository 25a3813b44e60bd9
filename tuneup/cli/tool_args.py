"""The tool commands' arguments (doctor, presets, plugins, monitor, data) and their
dispatchers: the commands around a session, each loaded only when it runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from tuneup.cli.parser import _Parser
from tuneup.errors import ExitCode, UsageError


def _add_doctor(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check this node first: GPUs, driver, CUDA, cuDNN, /dev/shm, CPUs, toolchain",
        description="One line per check (OK / WARN / FAIL, with the fix): GPUs, driver, CUDA "
        "and cuDNN, torch, NCCL, MIG, CPUs per GPU, /dev/shm, host memory, the SLURM job, "
        "DALI, apex, the torch.compile toolchain, TF32. Then, unless --quick, a short "
        "honesty check: the trainer's SYNTHETIC rate against a bare loop (CUDA events), the "
        "achieved TFLOP/s and MFU, and host-to-device bandwidth. Exits 1 when a check failed.",
    )
    doctor.add_argument("--quick", action="store_true", help="the checks only, no timed run")
    doctor.add_argument("--json", action="store_true", help="one JSON object on stdout")
    doctor.add_argument(
        "--cpu", action="store_true", help="run the honesty check on the CPU (a tiny model)"
    )
    doctor.add_argument(
        "--preset",
        metavar="P",
        help="time this preset's baseline on the GPU (default: the one `tuneup probe` picks "
        "here, so the figures describe what the ladder will run)",
    )
    doctor.set_defaults(handler=_run_doctor)


def _run_doctor(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.doctor import run_doctor_command

    return run_doctor_command(quick=args.quick, as_json=args.json, cpu=args.cpu, preset=args.preset)


def _add_presets(commands: argparse._SubParsersAction) -> None:
    presets = commands.add_parser(
        "presets",
        help="list the presets (bundled, your config folder) or show one",
        description="Presets hold a base training config, the stage plan, the probe budget "
        "and SLURM hints for a machine. Lookup order: bundled, then your config folder "
        "($TUNEUP_CONFIG_DIR or ~/.config/tuneup/presets), then a path.",
    )
    actions = presets.add_subparsers(dest="presets_command", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    actions.add_parser("list", help="name, origin and description of every preset")
    show = actions.add_parser("show", help="a preset as it will be used, and where it came from")
    show.add_argument("name", metavar="NAME", help="preset name or YAML path")
    presets.set_defaults(handler=_run_presets)


def _run_presets(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.presets import run_presets_list, run_presets_show

    if args.presets_command == "show":
        return run_presets_show(args.name)
    return run_presets_list()


def _add_plugins(commands: argparse._SubParsersAction) -> None:
    plugins = commands.add_parser(
        "plugins",
        help="list probe stages and trainer adapters with their origin and status",
        description="Stages (entry-point group tuneup.stages) and trainer adapters "
        "(tuneup.trainers), built-in or from installed packages; see plugins/README.md.",
    )
    actions = plugins.add_subparsers(dest="plugins_command", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    actions.add_parser("list", help="every stage and trainer: name, origin, status")
    plugins.set_defaults(handler=_run_plugins)


def _run_plugins(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.plugins import run_plugins_list

    return run_plugins_list()


def _add_monitor(commands: argparse._SubParsersAction) -> None:
    monitor = commands.add_parser(
        "monitor",
        help="watch the GPUs live: utilization, memory, power, clocks, throttling, processes",
        description="A full-screen live GPU monitor (NVML). In a SLURM job it watches the "
        "job's GPUs. --once prints one table; --json prints one JSON object per interval.",
    )
    monitor.add_argument(
        "--interval",
        type=float,
        default=None,
        metavar="S",
        help="seconds between samples (0.1 or more; default 0.5, or a replay's own pace)",
    )
    monitor.add_argument("--once", action="store_true", help="print one table and exit")
    monitor.add_argument(
        "--json", action="store_true", help="print one JSON object per interval (with --once: one)"
    )
    monitor.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="also write the samples to FILE (JSON lines) for --replay",
    )
    monitor.add_argument("--replay", type=Path, metavar="FILE", help="show a recorded trace")
    monitor.add_argument(
        "--attach",
        type=Path,
        metavar="FILE",
        help="also chart samples/s and loss from `tuneup train --metrics FILE`",
    )
    monitor.set_defaults(handler=_run_monitor)


def _run_monitor(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.monitor import run_monitor_command

    if args.interval is not None and args.interval < 0.1:
        raise UsageError(f"--interval {args.interval}: the shortest interval is 0.1 s")
    return run_monitor_command(
        interval=args.interval,
        once=args.once,
        as_json=args.json,
        record=args.record,
        replay=args.replay,
        attach=args.attach,
    )


def _add_data(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser("data", help="make or convert training data")
    data_commands = data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=_Parser)
    data_commands.required = True
    synth = data_commands.add_parser(
        "synth",
        help="write synthetic train.h5 and val.h5 in the tutorial's layout",
        description="Write DIR/train.h5 and DIR/val.h5 with float32 Nbody (4,L,L,L) and Hydro "
        "(5,L,L,L): a smooth random density-like input and a target that is a fixed nonlinear "
        "local function of it, so the loss really falls. Streams in slabs: memory stays "
        "bounded whatever L is. The same seed writes the same bytes.",
    )
    synth.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder")
    synth.add_argument("--box", type=int, default=128, metavar="L", help="training box side")
    synth.add_argument(
        "--val-box", type=int, default=None, metavar="L", help="validation box side (default L/2)"
    )
    synth.add_argument("--seed", type=int, default=0, metavar="S", help="random seed")
    synth.add_argument(
        "--npy",
        action="store_true",
        help="also write the channels-last .npy copies the DALI loader reads",
    )
    synth.set_defaults(handler=_run_synth)
    convert = data_commands.add_parser(
        "convert",
        help="write the channels-last .npy copies of an HDF5 box that DALI reads",
        description="Write DIR/<stem>_data.npy (L,L,L,4) and DIR/<stem>_label.npy (L,L,L,5) "
        "from FILE.h5's Nbody and Hydro, streaming in slabs (bounded memory).",
    )
    convert.add_argument("file", type=Path, metavar="FILE.h5", help="an HDF5 box")
    convert.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder")
    convert.set_defaults(handler=_run_convert)


def _run_convert(args: argparse.Namespace) -> int:
    from tuneup.unet.npy import run_convert  # h5py: only `tuneup data` pays for it

    return run_convert(args.file, args.out)


def _run_synth(args: argparse.Namespace) -> int:
    # h5py: only `tuneup data` pays for it
    from tuneup.unet.synth import synthesize

    result = synthesize(args.out, box=args.box, val_box=args.val_box, seed=args.seed)
    if args.npy:
        from tuneup.unet.npy import run_convert

        for h5 in (result.train_path, result.val_path):
            run_convert(h5, h5.parent)
    print(f"wrote {result.train_path} ({result.box}^3)")
    print(f"wrote {result.val_path} ({result.val_box}^3)")
    print(
        f"in {result.seconds:.1f} s; train with: tuneup train --set train_path="
        f"{result.train_path} --set val_path={result.val_path}"
    )
    return ExitCode.OK
