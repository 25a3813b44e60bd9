"""torch.compile's caches on disk, mended before a compile probe.

Inductor builds each generated C++ module with the compiler writing straight to its
place in the cache (`<key>.main.so`, objects `<key>.*.o`), and later processes load
whatever is there. A probe killed mid-compile (its time limit, a signal) leaves that
file empty or cut short, and every later compile on the machine then fails to load it
("file too short") until someone deletes it. Before a compile, the worker removes such
files from the caches it will use, so they are built again, and says so in its log.

A file whose compile is under way in another process is left alone: inductor holds
`<cache>/locks/<key>.lock` (an flock) while it builds a key's files.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
_BUILT = (".so", ".o")  # what a compiler writes in place; sources are written whole
_ELF = b"\x7fELF"


@dataclass(frozen=True)
class Removed:
    """A damaged file taken out of a compile cache, and what was wrong with it."""

    path: Path
    why: str


def compile_cache_folders(environ: Mapping[str, str]) -> list[Path]:
    """The compile caches this process will use (tuneup's launcher sets them in its cache
    folder, cluster.launch.compile_cache_env; a user's own choice is kept as set)."""
    return [Path(environ[name]) for name in CACHE_VARIABLES if environ.get(name)]


def elf_damage(path: Path) -> str:
    """What is wrong with a shared object or object file, from its ELF header alone: ""
    when it is whole (its program and section header tables end inside the file)."""
    try:
        with path.open("rb") as file:
            head = file.read(64)
            size = os.fstat(file.fileno()).st_size
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if size == 0:
        return "empty"
    if head[:4] != _ELF or len(head) < 52 or head[4] not in (1, 2) or head[5] not in (1, 2):
        return "not an ELF file"
    order = "<" if head[5] == 1 else ">"
    if head[4] == 2:  # 64-bit: e_phoff, e_shoff at 32; sizes and counts at 54
        if len(head) < 64:
            return f"cut short ({size:,} bytes)"
        ph_off, sh_off = struct.unpack_from(f"{order}QQ", head, 32)
        ph_size, ph_count, sh_size, sh_count = struct.unpack_from(f"{order}4H", head, 54)
    else:  # 32-bit: e_phoff, e_shoff at 28; sizes and counts at 42
        ph_off, sh_off = struct.unpack_from(f"{order}II", head, 28)
        ph_size, ph_count, sh_size, sh_count = struct.unpack_from(f"{order}4H", head, 42)
    sh_count = max(sh_count, 1) if sh_off else 0  # 0 with a table: the count is elsewhere
    end = max(ph_off + ph_size * ph_count, sh_off + sh_size * sh_count)
    return f"cut short ({size:,} of at least {end:,} bytes)" if size < end else ""


def mend_compile_cache(folders: Iterable[Path]) -> list[Removed]:
    """Remove the built files of `folders` that are empty or cut short (elf_damage), except
    those another process is building now; returns what was removed."""
    removed = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in _built_files(folder):
            if not elf_damage(path):
                continue
            with _unless_building(folder, path) as free:
                why = elf_damage(path) if free else ""  # looked at again under the lock
                if why:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                    removed.append(Removed(path, why))
    return removed


def said(removed: list[Removed]) -> str:
    """One line for the worker's log about what `mend_compile_cache` removed."""
    first = removed[0]
    more = f" and {len(removed) - 1} more" if len(removed) > 1 else ""
    return (
        f"tuneup worker: removed {first.path} ({first.why}){more} from the compile cache: a "
        "compile killed mid-write left them; they are compiled again"
    )


def _built_files(folder: Path) -> Iterator[Path]:
    for root, _dirs, names in os.walk(folder):
        for name in names:
            if name.endswith(_BUILT):
                yield Path(root) / name


@contextlib.contextmanager
def _unless_building(folder: Path, path: Path) -> Iterator[bool]:
    """Hold inductor's lock of the file's key, when there is one: yields False while
    another process holds it (a compile under way), True otherwise."""
    lock = folder / "locks" / f"{path.name.split('.', 1)[0]}.lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        yield True  # no lock for this key: nothing builds it under one
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the flock
