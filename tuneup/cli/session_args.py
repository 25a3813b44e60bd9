"""The session commands' arguments (probe, tui, export, profile, verify) and their
dispatchers: what a tuning session is started, watched, exported and checked with."""

from __future__ import annotations

import argparse
from pathlib import Path

from tuneup.errors import UsageError
from tuneup.tuning.session.request import add_arguments, from_arguments, parse_budget


def _add_tui(commands: argparse._SubParsersAction) -> None:
    tui = commands.add_parser(
        "tui",
        help="the interactive app: pick a preset, watch the ladder live, export (same as `tuneup`)",
        description="The Textual app: set up a ladder, watch it run with live GPU charts, "
        "review the recommendation and export it. Drives the same engine as `tuneup probe`.",
    )
    add_arguments(
        tui,
        ("preset", "trainer"),
        helps={
            "preset": "preset to start with",
            "trainer": "unet (the real trainer, default) or sim, which runs the whole app on "
            "the synthetic response surface (a demo); the app drives the trainers that "
            "declare it",
        },
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
    add_arguments(probe, ("preset", "stages", "trainer", "nproc", "nodes", "search", "seed"))
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
        "--json",
        action="store_true",
        help="print machine-readable results on stdout and nothing else",
    )
    probe.add_argument(
        "--probes",
        "-v",
        "--verbose",
        action="store_true",
        help="end with a table of every probe too, not only one row per decision",
    )
    add_arguments(probe, ("fresh_processes", "time_budget_s", "retry_failed", "accept_changes"))
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
        help="yaml, flags, env, sbatch or tuneup; md: a report (stages, where a step's time "
        "goes before and after, findings, traces); a trainer may export its sessions in "
        "formats of its own (command: command, flags, env, sbatch)",
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

    if args.retry_failed and args.resume is None:
        raise UsageError("--retry-failed measures a resumed session's failures: add --resume DIR")
    if args.accept_changes and args.resume is None:
        raise UsageError(
            "--accept-changes keeps a resumed session's baseline on a changed machine: add "
            "--resume DIR"
        )
    if args.resume is not None and args.out is not None:
        raise UsageError("--resume continues DIR in place: leave out --out")
    request = from_arguments(args)
    return run_probe_command(
        request, out=args.out, resume=args.resume, as_json=args.json, probes=args.probes
    )


def _add_profile(commands: argparse._SubParsersAction) -> None:
    profile = commands.add_parser(
        "profile",
        help="profile one journaled configuration again, or read a trace: where a step's time goes",
        description="Runs probe N of a results folder again in a fresh worker with a profile "
        "(its trials, then a trial's worth of steps under torch.profiler), prints where a "
        "step's time goes and the findings, and writes the trace into DIR/probes/. With "
        "--trace FILE, reads any torch.profiler Chrome trace instead, running nothing.",
    )
    profile.add_argument(
        "dir", type=Path, nargs="?", metavar="DIR", help="a results folder of tuneup probe"
    )
    profile.add_argument("--probe", type=int, metavar="N", help="the journal's probe number (1 on)")
    profile.add_argument(
        "--nsys",
        action="store_true",
        help="also write an Nsight Systems report of the profiled steps (nsys on the PATH)",
    )
    profile.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="read a torch.profiler Chrome trace (.json or .json.gz: tuneup's or your own "
        "training's) instead: on a GPU each part is the device work it launched",
    )
    profile.add_argument(
        "--json", action="store_true", help="with --trace: print one JSON object, parts in ms"
    )
    profile.set_defaults(handler=_run_profile)


def _run_profile(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    if args.trace is not None or args.json:
        from tuneup.commands.profile_trace import run_trace_command

        return run_trace_command(args.trace, args.json, args.dir, args.probe, args.nsys)
    if args.dir is None or args.probe is None:
        raise UsageError(
            "profile: give DIR --probe N (profile a journaled probe again) or --trace FILE "
            "(read a trace)"
        )
    from tuneup.commands.profile import run_profile_command

    return run_profile_command(args.dir, args.probe, args.nsys)


def _run_export(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.export import run_export_command

    return run_export_command(args.dir, args.format, args.output, args.edition)


def _add_verify(commands: argparse._SubParsersAction) -> None:
    verify = commands.add_parser(
        "verify",
        help="run the recommendation and the baseline for real: the real speedup against the claim",
        description="Runs the baseline and the recommendation the way each target runs "
        "them (tuneup train with the export; the tutorial's train.py with --train-py), in "
        "A B B A order, on the real run's data (your files, or a synthetic box of the real "
        "size where the disk has room, else the largest that fits, said), with validation "
        "and logging as a real run has them, each for a bounded time after its warm-up. "
        "Reports the real samples/s and speedup beside the ladder's claim and its likely "
        "range, and the part that moved a miss (IO on the larger box, validation, first "
        "steps). Runs are journaled in DIR/verify.jsonl and kept in summary.json.",
    )
    verify.add_argument("dir", type=Path, metavar="DIR", help="a results folder of tuneup probe")
    verify.add_argument(
        "--seconds",
        type=float,
        default=120.0,
        metavar="S",
        help="each configuration's measured time after warm-up, over its rounds (default 120)",
    )
    verify.add_argument(
        "--rounds",
        type=int,
        default=2,
        metavar="N",
        help="runs of each configuration, alternated A B B A (default 2)",
    )
    verify.add_argument(
        "--train-py",
        type=Path,
        metavar="PATH",
        help="the tutorial's train.py (SC22): also verify the answer for it",
    )
    verify.add_argument(
        "--box",
        type=int,
        metavar="L",
        help="run on a synthetic L^3 box (val L/2) instead of the real run's data",
    )
    verify.add_argument(
        "--budget",
        type=_budget,
        metavar="T",
        help="the whole verify's time (10m, 1h): the runs are shortened to fit it",
    )
    verify.add_argument("--json", action="store_true", help="one JSON object on stdout")
    verify.set_defaults(handler=_run_verify)


def _budget(text: str) -> float:
    try:
        return parse_budget(text)
    except ValueError as exc:
        raise UsageError(f"--budget: {exc}") from None


def _run_verify(args: argparse.Namespace) -> int:
    # loaded when the subcommand runs, so that --help stays instant
    from tuneup.commands.verify import run_verify_command

    if not args.seconds > 0:
        raise UsageError(f"--seconds {args.seconds:g}: give a time above 0")
    if args.rounds < 1:
        raise UsageError(f"--rounds {args.rounds}: give 1 or more")
    if args.box is not None and args.box < 1:
        raise UsageError(f"--box {args.box}: give a box side of 1 voxel or more")
    return run_verify_command(
        args.dir,
        seconds=args.seconds,
        rounds=args.rounds,
        train_py=args.train_py,
        box=args.box,
        budget_s=args.budget,
        as_json=args.json,
    )
