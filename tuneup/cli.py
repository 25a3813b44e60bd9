"""Argument parsing and dispatch only.

Heavy imports (torch, h5py, Textual) happen inside the branch that needs them,
so `tuneup --help` answers at once. Results go to stdout, diagnostics to
stderr; bad input is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from tuneup import __version__
from tuneup.cluster.signals import Stopped
from tuneup.config import describe_knobs
from tuneup.errors import ExitCode, UsageError
from tuneup.paths import is_storage_error, mend, storage_fault

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


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr with exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tuneup",
        description="Tune deep-learning training on NVIDIA GPU nodes: the NERSC 3D U-Net "
        "trainer with every performance knob, measured honestly.",
    )
    parser.add_argument("--version", action="version", version=f"tuneup {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    _add_tui(commands)
    _add_probe(commands)
    _add_train(commands)
    _add_data(commands)
    _add_export(commands)
    _add_monitor(commands)
    _add_presets(commands)
    _add_plugins(commands)
    _add_doctor(commands)
    return parser


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


def _add_layout(parser: argparse.ArgumentParser) -> None:
    """--nproc and --nodes: the ranks each probe runs with."""
    parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="ranks per node, one per GPU (default: the GPUs the allocation gives, 1 on a "
        "CPU-only machine); more than 1 runs each probe under torchrun",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=None,
        metavar="M",
        help="nodes per probe (default: the nodes of the SLURM allocation, else 1); more "
        "than 1 runs each probe through srun",
    )


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


def _add_tui(commands: argparse._SubParsersAction) -> None:
    tui = commands.add_parser(
        "tui",
        help="the interactive app: pick a preset, watch the ladder live, export (same as `tuneup`)",
        description="The Textual app: set up a ladder, watch it run with live GPU charts, "
        "review the recommendation and export it. Drives the same engine as `tuneup probe`.",
    )
    tui.add_argument("--preset", metavar="P", help="preset to start with")
    tui.add_argument(
        "--trainer",
        default=None,
        metavar="T",
        help="unet (the real trainer, default) or sim, which runs the whole app on the "
        "synthetic response surface (a demo); the app drives the trainers that declare it",
    )
    tui.add_argument(
        "--results",
        type=Path,
        metavar="DIR",
        help="review a finished session, or resume an interrupted one (key r)",
    )
    tui.add_argument(
        "--replay",
        type=Path,
        metavar="FILE",
        help="a recorded GPU trace for the monitor charts (demo mode)",
    )
    tui.add_argument("--out", type=Path, metavar="DIR", help="where new sessions are written")
    tui.set_defaults(handler=_run_tui)


def _run_tui(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.tui import run_tui_command

    return run_tui_command(
        preset_name=args.preset,
        trainer=args.trainer,
        results=args.results,
        replay=args.replay,
        out=args.out,
    )


def _add_probe(commands: argparse._SubParsersAction) -> None:
    probe = commands.add_parser(
        "probe",
        help="measure each knob in short isolated probes and recommend the fastest config",
        description="Run a preset's ladder of probes headless: a baseline, then each stage's "
        "variants on top of the best so far, each measuring the phase its knob moves, in a "
        "warm worker process with a time limit, then an interleaved A/B confirmation. "
        "Results are journaled as they arrive; a stopped ladder leaves a partial summary.",
    )
    probe.add_argument(
        "--preset",
        metavar="P",
        help="preset name or YAML path (default: picked by the GPUs found, by GPU 0's model "
        "and their count: H200: h200; H100: jean-zay-h100; A100: jean-zay-a100 (8+ of 80 GB), "
        "perlmutter-a100-4gpu (4+) or perlmutter-a100; V100: summit-v100 (6+) or "
        "jean-zay-v100; another model: generic-cuda; no GPU, or a torch without CUDA: "
        "cpu-smoke; it says which and why)",
    )
    probe.add_argument("--stages", metavar="a,b,...", help="only these stages, in this order")
    probe.add_argument(
        "--trainer",
        default=None,
        metavar="T",
        help="unet (the real trainer, default), sim (a synthetic response surface that "
        "answers in milliseconds), command (any training script, set up in the preset's "
        "command section) or an installed plugin's (see `tuneup plugins list`)",
    )
    _add_layout(probe)
    probe.add_argument(
        "--search",
        choices=("staged", "grid"),
        default=None,
        help="staged greedy search (default) or the full grid",
    )
    probe.add_argument("--seed", type=int, default=None, metavar="S", help="seed (default 0)")
    probe.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="results folder (default tuneup-results/PRESET-TIME)",
    )
    probe.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="continue an interrupted session without repeating finished probes (a "
        "failed baseline, and a probe killed by a signal, are measured again; a session "
        "whose session.json is damaged or gone is rebuilt from its journal with --preset)",
    )
    probe.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume: measure again every journaled probe that failed or ran "
        "contended (once its cause is fixed)",
    )
    probe.add_argument(
        "--json",
        action="store_true",
        help="print machine-readable results on stdout and nothing else",
    )
    probe.add_argument(
        "--fresh-processes",
        action="store_true",
        help="start every probe in a process of its own (slower: by default the ladder's "
        "probes share one warm worker, and a fresh one starts only where a knob or a "
        "failure demands it)",
    )
    probe.add_argument(
        "--budget",
        metavar="TIME",
        help="the ladder's time budget (10m, 90s, 1h30m or HH:MM:SS; default: the time "
        "left in the SLURM allocation, else none): it says before the first probe what "
        "fits and what it leaves out, keeps to it, and confirms the best it found",
    )
    probe.set_defaults(handler=_run_probe)


def _add_export(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export",
        help="write a session's recommendation as YAML, flags, env, sbatch or tuneup config",
        description="yaml and flags run the tutorial's train.py (and tuneup train); env, "
        "sbatch and tuneup run tuneup train on the site's habits. A session that tuned your "
        "own command (--trainer command) exports that command: command (one line to paste), "
        "flags, env and sbatch.",
    )
    export.add_argument("dir", type=Path, metavar="DIR", help="a results folder of tuneup probe")
    export.add_argument(
        "--format",
        required=True,
        metavar="F",
        help="yaml, flags, env, sbatch or tuneup; a trainer may export its sessions in formats "
        "of its own (command: command, flags, env, sbatch)",
    )
    export.add_argument(
        "-o", type=Path, dest="output", metavar="FILE", help="write to FILE instead of stdout"
    )
    export.add_argument(
        "--edition",
        choices=("sc22", "sc21"),
        default="sc22",
        help="the tutorial's edition the flags are spelt for (sc21: --enable_amp)",
    )
    export.set_defaults(handler=_run_export)


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


def _run_probe(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.probe import run_probe_command
    from tuneup.probe.estimate import parse_duration

    if args.retry_failed and args.resume is None:
        raise UsageError("--retry-failed measures a resumed session's failures: add --resume DIR")

    if args.resume is not None and args.out is not None:
        raise UsageError("--resume continues DIR in place: leave out --out")
    budget_s = None
    if args.budget is not None:
        try:
            budget_s = parse_duration(args.budget)
        except ValueError as exc:
            raise UsageError(f"--budget: {exc}") from None
    return run_probe_command(
        preset_name=args.preset,
        stages=args.stages,
        trainer=args.trainer,
        search=args.search,
        seed=args.seed,
        out=args.out,
        resume=args.resume,
        as_json=args.json,
        nproc=args.nproc,
        nodes=args.nodes,
        fresh_processes=args.fresh_processes or None,
        budget_s=budget_s,
        retry_failed=args.retry_failed,
    )


def _run_export(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.export import run_export_command

    return run_export_command(args.dir, args.format, args.output, args.edition)


def _run_convert(args: argparse.Namespace) -> int:
    from tuneup.trainer.npy import run_convert  # h5py: only `tuneup data` pays for it

    return run_convert(args.file, args.out)


def _run_synth(args: argparse.Namespace) -> int:
    # h5py: only `tuneup data` pays for it
    from tuneup.trainer.synth import synthesize

    result = synthesize(args.out, box=args.box, val_box=args.val_box, seed=args.seed)
    if args.npy:
        from tuneup.trainer.npy import run_convert

        for h5 in (result.train_path, result.val_path):
            run_convert(h5, h5.parent)
    print(f"wrote {result.train_path} ({result.box}^3)")
    print(f"wrote {result.val_path} ({result.val_box}^3)")
    print(
        f"in {result.seconds:.1f} s; train with: tuneup train --set train_path="
        f"{result.train_path} --set val_path={result.val_path}"
    )
    return ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tuneup` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            if not (sys.stdin.isatty() and sys.stdout.isatty()):
                parser.print_help()  # not a terminal: there is no app to show
                return ExitCode.OK
            args = parser.parse_args(["tui"])
        return int(args.handler(args))
    except UsageError as exc:
        if debug:
            traceback.print_exc()
        print(f"tuneup: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            print("tuneup: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Stopped as exc:
        with contextlib.suppress(OSError):
            print(f"tuneup: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        if debug:
            traceback.print_exc()
        if is_storage_error(exc):  # a write the storage refused: its fix, not a traceback
            where = Path(os.fsdecode(exc.filename)) if exc.filename else Path(".")
            then = f"{mend(exc, 'it')}, then run again"
            fault = storage_fault(where, exc, "a file in" if not exc.filename else "the file")
            print(f"tuneup: error: {fault}; {then}", file=sys.stderr)
            return ExitCode.USAGE
        return _internal(exc, debug)
    except Exception as exc:  # an internal failure: one line unless --debug
        if debug:
            traceback.print_exc()
        return _internal(exc, debug)


def _internal(exc: BaseException, debug: bool) -> int:
    """An internal failure in one line; the --debug hint only where it was not given."""
    hint = "" if debug else " (rerun with --debug for the traceback)"
    print(f"tuneup: internal error: {type(exc).__name__}: {exc}{hint}", file=sys.stderr)
    return ExitCode.INTERNAL
