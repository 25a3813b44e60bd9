"""torch.compile's caches on disk, mended before a compile probe.

Inductor builds each generated C++ module with the compiler writing straight to its
place in the cache (`<key>.main.so`, objects `<key>.*.o`), and later processes load
whatever is there. A probe killed mid-compile (its time limit, a signal) leaves that
file empty or cut short, and every later compile on the machine then fails to load it
("file too short") until someone deletes it. Before a compile, the worker removes such
files from the caches it will use, so they are built again, and says so in its log.

Only the caches' own files are touched, never a user's: a cache folder may be one the
user chose (`TORCHINDUCTOR_CACHE_DIR`), and may hold anything. Inductor writes a key's
builds as `<cache>/<key[1:3]>/<key>.so` (or `.main.so`, `.o`), its key "c" and 51
base-32 characters; Triton as `<cache>/<key>/<name>.so`, its key 52 base-32 or 64 hex
characters (also under `<inductor cache>/triton/<device>/`). Nothing else is looked at,
and no folder is walked deeper than that layout.

A file whose compile is under way in another process is left alone: inductor holds
`<cache>/locks/<key>.lock` (an flock) while it builds a key's files; and a file any other
process holds open (a compiler still writing it, a copy coming in) is left alone too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
_BUILT = (".so", ".o")  # what a compiler writes in place; sources are written whole
_ELF = b"\x7fELF"
_INDUCTOR_KEY = re.compile(r"c[a-z2-7]{51}")
_TRITON_KEY = re.compile(r"[A-Za-z2-7]{52}|[0-9a-f]{64}")


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
    """Remove the caches' own built files (`own_built_files`) that are empty or cut short
    (elf_damage), except those another process is building or holds open; returns what
    was removed."""
    damaged = [
        (folder, path)
        for folder in folders
        if folder.is_dir()
        for path in own_built_files(folder)
        if elf_damage(path)
    ]
    if not damaged:
        return []
    held = open_elsewhere()
    removed = []
    for folder, path in damaged:
        if _real(path) in held:
            continue
        with _unless_building(folder, path) as free:
            why = elf_damage(path) if free else ""  # looked at again under the lock
            if why:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                removed.append(Removed(path, why))
    return removed


def said(removed: list[Removed]) -> str:
    """One line, for the console and the worker's log, about what `mend_compile_cache`
    removed."""
    first = removed[0]
    more = f" and {len(removed) - 1} more" if len(removed) > 1 else ""
    return (
        f"removed {first.path} ({first.why}){more} from the compile cache: a compile killed "
        "mid-write left them; they are compiled again"
    )


def own_built_files(folder: Path) -> Iterator[Path]:
    """The built files of `folder` laid out as Inductor's or Triton's own (the module
    docstring), found without walking any deeper."""
    for sub in _folders(folder):
        if len(sub.name) == 2:  # Inductor: <key[1:3]>/<key>.*
            for path in _files(sub):
                key = path.name.split(".", 1)[0]
                if _INDUCTOR_KEY.fullmatch(key) and key[1:3] == sub.name and _built(path):
                    yield path
        elif _TRITON_KEY.fullmatch(sub.name):
            yield from (p for p in _files(sub) if _built(p))
        elif sub.name == "triton":  # Inductor's own Triton cache: triton/<device>/<key>/
            for device in _folders(sub):
                for keyed in _folders(device):
                    if _TRITON_KEY.fullmatch(keyed.name):
                        yield from (p for p in _files(keyed) if _built(p))


def _built(path: Path) -> bool:
    return path.name.endswith(_BUILT)


def _folders(folder: Path) -> list[Path]:
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    return []


def _files(folder: Path) -> list[Path]:
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        return [Path(e.path) for e in entries if e.is_file(follow_symlinks=False)]
    return []


def _real(path: Path) -> str:
    return os.path.realpath(path)


def open_elsewhere(proc: Path = Path("/proc")) -> set[str]:
    """The files other processes hold open, as /proc shows them (those of processes this
    user may look into: all of them as root, its own otherwise)."""
    held: set[str] = set()
    me = str(os.getpid())
    with contextlib.suppress(OSError), os.scandir(proc) as entries:
        pids = [e.name for e in entries if e.name.isdigit() and e.name != me]
    for pid in pids:
        with contextlib.suppress(OSError), os.scandir(proc / pid / "fd") as fds:
            for fd in fds:
                with contextlib.suppress(OSError):
                    held.add(os.readlink(fd.path))
    return held


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
