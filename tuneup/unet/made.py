"""What tuneup made in its cache, recorded when made and checked before use.

A folder of files tuneup makes once (a synthetic box, its .npy copies) keeps a record
beside them (RECORD): each file's size, modification time and CRC-32, written once the
files are whole (they are written under a temporary name and renamed). A check compares
sizes and times (a stat each); a file whose time changed, or every file when the check
is `thorough`, is read again for its CRC. Nothing here reads HDF5 or numpy: the session
checks its data before each probe without them.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from tuneup.bundled import read_cache_record, write_cache_record

RECORD = ".made.json"
UNRECORDED = "not in the record of what tuneup made"
_CHUNK = 8 * 2**20


def checksum(path: Path) -> int:
    """The CRC-32 of a file's bytes (about 2 GB/s: a 256^3 box in a fraction of a second)."""
    crc = 0
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def record_made(files: Iterable[Path]) -> None:
    """Add each file (whole, as just made or checked) to the record of its folder; best
    effort: a record that cannot be written costs a thorough check later, never the run."""
    by_folder: dict[Path, list[Path]] = {}
    for path in files:
        by_folder.setdefault(path.parent, []).append(path)
    for folder, paths in by_folder.items():
        known = read_cache_record(folder / RECORD)
        for path in paths:
            try:
                known[path.name] = _entry(path, checksum(path))
            except OSError:
                known.pop(path.name, None)
        write_cache_record(folder / RECORD, known)


def damage(files: Iterable[Path], *, thorough: bool) -> dict[Path, str]:
    """What is wrong with each of `files` against the record of its folder, in words: gone,
    cut short, grown, changed since it was made, or UNRECORDED (no record says what it
    was: the caller reads it to decide). A file whose time alone changed is read again for
    its CRC, and recorded with its new time when that still matches."""
    found: dict[Path, str] = {}
    records: dict[Path, dict[str, object]] = {}
    touched: list[Path] = []
    for path in files:
        known = records.setdefault(path.parent, read_cache_record(path.parent / RECORD))
        why, retimed = _damage(path, known.get(path.name), thorough=thorough)
        if why:
            found[path] = why
        elif retimed:
            touched.append(path)
    if touched:
        record_made(touched)
    return found


def forget(files: Iterable[Path]) -> None:
    """Drop files from their folders' records (they are being made again)."""
    for path in files:
        known = read_cache_record(path.parent / RECORD)
        if known.pop(path.name, None) is not None:
            write_cache_record(path.parent / RECORD, known)


def _damage(path: Path, entry: object, *, thorough: bool) -> tuple[str, bool]:
    """(why the file is damaged, "" if not; whether only its time changed)."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return "gone", False
    if not isinstance(entry, dict) or not all(
        isinstance(entry.get(k), int) for k in ("size", "mtime_ns", "crc32")
    ):
        return UNRECORDED, False
    size = int(entry["size"])
    if stat.st_size < size:
        return f"cut short ({stat.st_size:,} of {size:,} bytes)", False
    if stat.st_size > size:
        return f"grown ({stat.st_size:,} bytes, made as {size:,})", False
    retimed = stat.st_mtime_ns != entry["mtime_ns"]
    if not (thorough or retimed):
        return "", False
    if checksum(path) != entry["crc32"]:
        return "changed since it was made (its checksum differs)", False
    return "", retimed


def _entry(path: Path, crc: int) -> dict[str, int]:
    stat = os.stat(path)
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "crc32": crc}
