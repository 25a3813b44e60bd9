"""The session commands' arguments (probe, tui, export) and their dispatchers:
what a tuning session is started, watched and exported with."""

from __future__ import annotations

import argparse
from pathlib import Path

from tuneup.errors import UsageError


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
