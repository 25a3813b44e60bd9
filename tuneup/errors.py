"""Exit codes and the errors that reach the user as one clear line."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit statuses shared by every command."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    PROBE_FAILED = 3  # a probe worker reported an error event
    INTERRUPTED = 130


class UsageError(Exception):
    """Bad input from the user: printed as one line on stderr, exit status 2.

    The message names the problem and, where there is one, the fix.
    """
