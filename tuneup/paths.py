"""The one check of a path the user names, and the one wording of a write that fails.

Every front end checks its output paths here before any work (`--out`, `-o`,
`--metrics`, `--record`, `expdir`; a results folder to read, `--resume` or
`--results`, is checked by its one reader, tuning.journal.ResultsDir), so a
read-only folder, a path through a file, a name too long or a full disk reads
the same everywhere: a UsageError (exit 2) naming the path,
the flag and the fix.

A file tuneup writes whole for the user (an export, the summary) goes through
`atomic_write_text`: beside its target first, then renamed over it, so a failure
leaves an earlier file whole and a new one never half-made, and says so.

A write that fails later, wherever tuneup writes (the journal, the lock, the
summary, an export, the metrics, the cache), goes through `writing`: a
StorageFault (exit 2) in one line saying what could not be written and why,
what was kept, and how to go on. cli.main words any other storage OSError the
same way, so none reaches the user as an internal error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tuneup.errors import UsageError

# The errors of a place to write, not of tuneup: each has a fix the user can make.
STORAGE_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.ENAMETOOLONG,
        errno.EFBIG,
        errno.ENOENT,
    }
)


class StorageFault(UsageError):
    """A write that failed for a reason of its storage (full, read-only, quota, a path
    through a file): one line, exit 2, with what was kept and how to go on."""


def is_storage_error(exc: BaseException) -> bool:
    """Whether `exc` is a write's storage failure (STORAGE_ERRNOS), not a fault of tuneup."""
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def why(path: Path, exc: OSError) -> str:
    """Why `path` could not be made or written, in words."""
    code = exc.errno
    if code == errno.EROFS:
        return "read-only file system"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if code in (errno.EEXIST, errno.ENOTDIR):
        culprit = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        return f"{culprit} is a file, not a folder"
    if code == errno.EISDIR:
        return "it is a folder"
    if code == errno.ENAMETOOLONG:
        longest = max((len(part) for part in path.parts), default=0)
        return (
            f"the path is too long ({len(str(path))} characters, longest name {longest}; "
            "names may have at most 255)"
        )
    if code == errno.ENOSPC:
        return "no space left on the device"
    if code == errno.EDQUOT:
        return "the disk quota is used up"
    if code == errno.EFBIG:
        return "the file is too large for this file system"
    if code == errno.ENOENT:
        return "its folder is gone"
    return str(exc.strerror or exc)


def fix(exc: OSError, place: str) -> str:
    """What the user does about `exc` at `place` (a folder, or a flag naming one)."""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"free some or give {place} another path"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"give {place} a place you can write to"
    if code == errno.ENAMETOOLONG:
        return f"give {place} a shorter one"
    if code == errno.EISDIR:
        return f"give {place} a file name"
    return f"give {place} another path"


def mend(exc: OSError, where: str) -> str:
    """What the user does about `exc` to carry on at `where` (a folder, or "it")."""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "free some space there"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"make {where} writable again"
    return "fix that"


def problem(path: Path, exc: OSError, flag: str, what: str) -> str:
    """One line for `path` (given with `flag`, used as `what`) that could not be made or
    written: why, and what to do."""
    where, reason = f"cannot use {path} as {what}", why(path, exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{where} ({reason}): {fix(exc, flag)}"
    return f"{where}: {reason}: {fix(exc, flag)}"


def storage_fault(
    path: Path, exc: OSError, what: str, *, kept: str = "", then: str = ""
) -> StorageFault:
    """The one line for a write that failed mid-way: what (`what`, at `path`) and why,
    what is `kept`, and `then`, how to go on."""
    parts = [f"cannot write {what} {path} ({why(path, exc)})"]
    if kept:
        parts.append(kept)
    if then:
        parts.append(then)
    return StorageFault(": ".join(parts[:2]) + "".join(f"; {p}" for p in parts[2:]))


@contextmanager
def writing(path: Path, what: str, *, kept: str = "", then: str = "") -> Iterator[None]:
    """Around a write of `what` at `path`: a storage failure becomes a StorageFault
    (`storage_fault`); any other error passes unchanged."""
    try:
        yield
    except OSError as exc:
        if not is_storage_error(exc):
            raise
        raise storage_fault(path, exc, what, kept=kept, then=then) from None


_STREAM_NAME = re.compile(r"/(dev/(stdout|stderr|fd/\d+)|proc/[^/]+/fd/\d+)\Z")


def writes_in_place(path: Path) -> bool:
    """Whether `path` is written through, as the shell's `>` would, rather than replaced:
    a device (`/dev/null`), a FIFO, a socket, or a stream's name (`/dev/stdout`, the
    `/dev/fd/63` of `-o >(...)`). Replacing one would swap a device for a plain file and
    leave a reader waiting."""
    if _STREAM_NAME.match(os.path.abspath(path)):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # nothing there yet (or unreadable: the write says why)
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _write_in_place(path: Path, text: str, what: str, place: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        if not is_storage_error(exc) and exc.errno != errno.EPIPE:
            raise
        then = fix(exc, place) if place else f"{mend(exc, str(path))}, then run again"
        raise storage_fault(path, exc, what, then=then) from None


def atomic_write_text(path: Path, text: str, what: str, *, place: str = "") -> None:
    """Write `text` as the file `path`, whole or not at all: into a temporary file beside
    it, then renamed over it. A file there before keeps its permissions. A device, a FIFO
    or a stream's name (`writes_in_place`) is written in place, as `>` would.

    Args:
        path: the file; a link is followed, so its target is replaced.
        text: its whole content.
        what: the file in words, e.g. "the export's file".
        place: the flag or folder the user changes to write elsewhere (`fix`); none: the
            line says to free some space or make the folder writable (`mend`).

    Raises:
        StorageFault: the storage refused it, in one line saying that the earlier file is
            unchanged (or that none was made) and what to do.
    """
    if writes_in_place(path):
        _write_in_place(path, text, what, place)
        return
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        before = target.stat().st_mode if target.exists() else None
        # 0o666 less the umask, as a plain open would make it
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if before is not None:
            os.chmod(tmp, stat.S_IMODE(before))
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not is_storage_error(exc):
            raise
        kept = f"the earlier {path.name} is unchanged" if path.exists() else "no file was made"
        then = fix(exc, place) if place else f"{mend(exc, str(path.parent))}, then run again"
        raise storage_fault(path, exc, what, kept=kept, then=then) from None


def space_text(need: int, have: int) -> str:
    """The space a write needs and the disk has ("need 12.4 MiB, have 3.1 MiB"), in one unit
    and with as many decimals as it takes for the two to read differently."""
    units = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
    unit, scale = next(((u, s) for u, s in units if max(need, have) >= s), ("bytes", 1))
    if scale > 1:
        for decimals in (1, 2, 3):
            shown = f"{need / scale:.{decimals}f}", f"{have / scale:.{decimals}f}"
            if shown[0] != shown[1]:
                return f"need {shown[0]} {unit}, have {shown[1]} {unit}"
    return f"need {need:,} bytes, have {have:,} bytes"


def require_space(folder: Path, need: int, fix_text: str) -> None:
    """Refuse to make `need` bytes in `folder` (made or not yet) where its disk has less
    free; nothing is created to find out.

    Raises:
        UsageError: "not enough free space in FOLDER: need X, have Y (`fix_text`)".
    """
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return  # the write itself will say what is wrong with the place
    if need > free:
        raise UsageError(
            f"not enough free space in {folder}: {space_text(need, free)} ({fix_text})"
        )


def check_name(path: Path, flag: str) -> None:
    """Refuse a path whose name cannot be written as text (bytes that are not UTF-8): the
    probes' specs and the session's files carry it as JSON.

    Raises:
        UsageError: naming the flag and the fix.
    """
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(
            f"{flag}: the path {path!s} has bytes that are not UTF-8 text: give {flag} a "
            "name in UTF-8"
        ) from None


def make_output_folder(path: Path, flag: str = "--out") -> Path:
    """Make the folder a command writes its files into (`tuneup data synth`, `convert`).

    Raises:
        UsageError: it cannot be made, in one line naming why and the flag to change.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create output folder {path}: {why(path, exc)} (choose another {flag})"
        ) from None
    return path


def output_folder(path: Path, flag: str, what: str) -> Path:
    """Make `path` (and its parents) and check a file can be written there.

    Raises:
        UsageError: it cannot be used, in one line (`problem`).
    """
    check_name(path, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".tuneup-write-check"):
            pass  # a name of its own: two runs starting here do not trip on each other
    except OSError as exc:
        raise UsageError(problem(path, exc, flag, what)) from None
    return path


def output_file(path: Path, flag: str, what: str) -> Path:
    """Check `path` can be written as a file: its folder made and writable (a byte fits
    there), and not a folder itself. The file is not created (nor an existing one changed).

    Raises:
        UsageError: it cannot be used, in one line (`problem`).
    """
    check_name(path, flag)
    if writes_in_place(path):  # a device, a FIFO, a stream: its folder is not written
        if not os.access(path, os.W_OK):
            exc = PermissionError(errno.EACCES, "permission denied")
            raise UsageError(problem(path, exc, flag, what))
        return path
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tuneup-write-check") as probe:
            # a byte, not just a name: a full disk still makes empty files
            probe.write(b"\n")
            probe.flush()
            os.fsync(probe.fileno())
        if path.exists():
            with path.open("a"):
                pass  # an existing file we may not overwrite says so now
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk: what is kept, said
            kept = f"the earlier {path.name} is unchanged" if path.exists() else "no file was made"
            raise storage_fault(path, exc, what, kept=kept, then=fix(exc, flag)) from None
        raise UsageError(problem(path, exc, flag, what)) from None
    return path
