"""A twin check kept small enough to commit: its gather and its real ladders' journals, so a
later twin can be set beside every ladder a check has run (bench/twin_replay.py).

A check's folder (twin_check.py --keep) holds the compile caches and each probe's logs
too (4 MB); the twin reads only the gather's journal, gather.json and session.json, and a
comparison only the ladders' journals and their walls timed from outside (45-60 KB packed).
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ARCHIVES = Path(__file__).resolve().parent / "results" / "twin_checks"
GATHER_FILES = ("journal.jsonl", "gather.json", "session.json")
CHECK = "check.json"


def pack(folder: Path, dest: Path, ladders: Sequence[dict[str, Any]], **about: Any) -> Path:
    """`folder`'s evidence and ladders' journals into `dest` (.tar.gz), with `check.json`:
    each ladder's wall timed from outside, its probes and exit, and `about` (the
    prediction made then, the commit)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    check = folder / CHECK
    summary = [{k: ladder[k] for k in ("wall_s", "probes", "exit")} for ladder in ladders]
    check.write_text(json.dumps({"ladders": summary, **about}, indent=1) + "\n")
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(check, CHECK)
        for name in GATHER_FILES:
            path = folder / "evidence" / "gather" / name
            if path.is_file():
                tar.add(path, f"evidence/gather/{name}")
        for n in range(1, len(ladders) + 1):
            for name in ("journal.jsonl", "session.json"):
                path = folder / f"ladder-{n}" / name
                if path.is_file():
                    tar.add(path, f"ladder-{n}/{name}")
    return dest


def unpack(archive: Path, into: Path) -> dict[str, Any]:
    """`archive` into `into`; its check.json."""
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(into, filter="data")
    return dict(json.loads((into / CHECK).read_text()))


def ladder_journals(folder: Path, count: int) -> list[Path]:
    return [folder / f"ladder-{n}" / "journal.jsonl" for n in range(1, count + 1)]
