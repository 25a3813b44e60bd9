"""Argument parsing and dispatch only: `main`, the entry point, and the parser it
builds from each command's arguments (the modules beside this one).

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
from tuneup.cli.parser import _Parser
from tuneup.cli.session_args import (
    _add_export,
    _add_probe,
    _add_profile,
    _add_tui,
    _add_verify,
)
from tuneup.cli.tool_args import _add_data, _add_doctor, _add_monitor, _add_plugins, _add_presets
from tuneup.cli.tutorial_flags import _add_train, _train_overrides
from tuneup.cluster.signals import Stopped
from tuneup.cluster.streams import PIPE_EXIT, GuardedStream, guarded_streams
from tuneup.errors import ExitCode, UsageError
from tuneup.paths import is_storage_error, mend, storage_fault

__all__ = ["_train_overrides", "build_parser", "main"]


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
    _add_profile(commands)
    _add_verify(commands)
    _add_monitor(commands)
    _add_presets(commands)
    _add_plugins(commands)
    _add_doctor(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tuneup` command; returns the exit status.

    A closed standard stream reads as /dev/null, stderr that goes away never stops the
    work, and stdout's reader gone (`| head`) ends the command quietly with 141
    (cluster/streams.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with guarded_streams() as stdout:
        try:
            return _run(argv, stdout)
        except (OSError, SystemExit):  # rich turns a broken pipe into SystemExit(1)
            if stdout.gone:
                return PIPE_EXIT
            raise


def _run(argv: list[str], stdout: GuardedStream) -> int:
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
        if stdout.gone:  # the reader of the results went away: main ends quietly
            raise
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
