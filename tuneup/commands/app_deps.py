"""Whether the full-screen app can run here: Textual and plotext are importable, and a
terminal to draw on.

GPU nodes often get offline installs without them (see the README); the
headless commands never need them, and the full-screen ones say so in one
line instead of a traceback.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TextIO

from tuneup.errors import UsageError

APP_PACKAGES = ("textual", "plotext")


def missing_app_packages() -> list[str]:
    """The packages of APP_PACKAGES that cannot be imported, in that order."""
    missing = []
    for name in APP_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def require_app(what: str, headless: str) -> None:
    """Raise UsageError naming the fix when the full-screen app cannot run.

    Args:
        what: what needs the app, e.g. "the full-screen monitor".
        headless: the commands that work without it, e.g. "tuneup monitor --once / --json".
    """
    missing = missing_app_packages()
    if missing:
        raise UsageError(
            f"{what} needs textual and plotext (missing here: {', '.join(missing)}): "
            f"pip install textual plotext, or use {headless}"
        )


def require_terminal(what: str, headless: str, streams: Iterable[tuple[str, TextIO]]) -> None:
    """Raise UsageError naming the fix when one of `streams` (named, e.g. "standard
    output") is not a terminal: a full screen drawn into a file or a pipe is escape codes,
    and one that reads keys from /dev/null waits for ever.

    Args:
        what: what needs the terminal, e.g. "the live monitor".
        headless: what works without one, e.g. "--once for one table or --json for JSON lines".
        streams: the streams it draws on or reads keys from, each with its name.
    """
    for name, stream in streams:
        if not stream.isatty():
            raise UsageError(f"{what} needs a terminal, and {name} is not one: use {headless}")
