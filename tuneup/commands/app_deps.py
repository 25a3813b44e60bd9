"""Whether the full-screen app can run here: Textual and plotext are importable.

GPU nodes often get offline installs without them (see the README); the
headless commands never need them, and the full-screen ones say so in one
line instead of a traceback.
"""

from __future__ import annotations

import importlib

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
