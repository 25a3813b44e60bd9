"""The one check of a path the user names: usable, or one line saying why and what to do.

Every front end checks its output paths here before any work (`--out`, `-o`,
`--metrics`, `--record`, `expdir`; a results folder to read, `--resume` or
`--results`, is checked by its one reader, tuning.journal.ResultsDir), so a
read-only folder, a path through a file, a name too long or a full disk reads
the same everywhere: a UsageError (exit 2) naming the path,
the flag and the fix. A write that fails later is described the same way
(`problem`).
"""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

from tuneup.errors import UsageError


def problem(path: Path, exc: OSError, flag: str, what: str) -> str:
    """One line for `path` (given with `flag`, used as `what`) that could not be made or
    written: why, and what to do."""
    where = f"cannot use {path} as {what}"
    code = exc.errno
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = "read-only file system" if code == errno.EROFS else "permission denied"
        return f"{where} ({why}): give {flag} a place you can write to"
    if code in (errno.EEXIST, errno.ENOTDIR):
        culprit = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        return f"{where}: {culprit} is a file, not a folder: give {flag} another path"
    if code == errno.EISDIR:
        return f"{where}: it is a folder: give {flag} a file name"
    if code == errno.ENAMETOOLONG:
        longest = max((len(part) for part in path.parts), default=0)
        return (
            f"{where}: the path is too long ({len(str(path))} characters, longest name "
            f"{longest}; names may have at most 255): give {flag} a shorter one"
        )
    if code == errno.ENOSPC:
        return f"{where}: no space left on the device: free some or give {flag} another path"
    return f"{where}: {exc.strerror or exc}: give {flag} another path"


def output_folder(path: Path, flag: str, what: str) -> Path:
    """Make `path` (and its parents) and check a file can be written there.

    Raises:
        UsageError: it cannot be used, in one line (`problem`).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".tuneup-write-check"):
            pass  # a name of its own: two runs starting here do not trip on each other
    except OSError as exc:
        raise UsageError(problem(path, exc, flag, what)) from None
    return path


def output_file(path: Path, flag: str, what: str) -> Path:
    """Check `path` can be written as a file: its folder made and writable, and not a folder
    itself. The file is not created (nor an existing one changed).

    Raises:
        UsageError: it cannot be used, in one line (`problem`).
    """
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tuneup-write-check"):
            pass
        if path.exists():
            with path.open("a"):
                pass  # an existing file we may not overwrite says so now
    except OSError as exc:
        raise UsageError(problem(path, exc, flag, what)) from None
    return path
