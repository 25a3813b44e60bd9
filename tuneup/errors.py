"""Exit codes and the errors that reach the user as one clear line."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit statuses shared by every command."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    PROBE_FAILED = 3  # a probe worker reported an error event; the baseline never ran
    UNMEASURED = 4  # the ladder ended, but some stages could not be measured: said, with the fix
    OUT_OF_TIME = 75  # sysexits' EX_TEMPFAIL: the allocation ends; resume in a new one
    INTERRUPTED = 130  # SIGINT; SIGTERM gives 143 and SIGHUP 129 (128 + the signal)


class UsageError(Exception):
    """Bad input from the user: printed as one line on stderr, exit status 2.

    The message names the problem and, where there is one, the fix.
    """

    exit_code: int = ExitCode.USAGE


class DataFault(UsageError):
    """A data file that cannot be read as the trainer needs it (gone, not HDF5, cut short,
    the wrong layout): the line names the file and what is wrong with it. A probe that
    fails with one blames the file, never the preset's config."""


def did_you_mean(name: object, options: Iterable[object]) -> str:
    """The hint "did you mean 'x'? " when a close option exists, else "": the one way every
    error names a likely fix for a misspelt stage, preset, trainer, knob or key."""
    close = difflib.get_close_matches(str(name), [str(o) for o in options], n=1)
    return f"did you mean '{close[0]}'? " if close else ""
