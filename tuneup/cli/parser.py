"""The argparse class every tuneup parser is made of, in a module of its own
so that each command's arguments can use it without an import cycle."""

from __future__ import annotations

import argparse

from tuneup.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr with exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")
