"""Files that ship inside the wheel (the bundled presets), and where made-once data is cached."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from tuneup.bounded import OutOfBounds, read_json, yaml_load
from tuneup.errors import UsageError

DEFAULT_PRESET = "cpu-smoke"


def bundled_preset_names() -> list[str]:
    """Names of the presets shipped with tuneup (the YAML files of `tuneup_presets`)."""
    folder = resources.files("tuneup_presets")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def read_bundled_preset(name: str) -> dict[str, Any]:
    """The raw mapping of a bundled preset; an unknown name lists the known ones."""
    entry = resources.files("tuneup_presets") / f"{name}.yaml"
    if not entry.is_file():
        known = ", ".join(bundled_preset_names())
        raise UsageError(f"no bundled preset '{name}': known presets are {known}")
    try:
        data = yaml_load(entry.read_text(encoding="utf-8"))
    except OutOfBounds as exc:
        raise UsageError(f"bundled preset '{name}' {exc}: reinstall tuneup") from None
    if not isinstance(data, dict):
        raise UsageError(f"bundled preset '{name}' is not a mapping")
    return data


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Where tuneup keeps data it makes once: $TUNEUP_CACHE_DIR, else the XDG cache."""
    env = os.environ if environ is None else environ
    if env.get("TUNEUP_CACHE_DIR"):
        return Path(env["TUNEUP_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "tuneup"


# A cache record holds a few figures per trainer, preset and machine: a few KiB.
MAX_CACHE_RECORD_BYTES = 4 * 2**20


def read_cache_record(path: Path) -> dict[str, Any]:
    """A JSON object kept in the cache folder; missing, damaged or not an object reads as {}."""
    return checked_cache_record(path)[0]


def checked_cache_record(path: Path) -> tuple[dict[str, Any], str | None]:
    """A JSON object kept in the cache folder, read within bounds (its size, nesting, every
    number finite), and why it reads as {} where it is there but damaged (a phrase to
    follow its name: "is not JSON"); missing reads as {} with nothing to say."""
    try:
        data = read_json(path, max_bytes=MAX_CACHE_RECORD_BYTES)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot be read ({exc.strerror or exc})"
    except OutOfBounds as exc:
        return {}, str(exc)
    except ValueError:
        return {}, "is not JSON"
    return (data, None) if isinstance(data, dict) else ({}, "is not a JSON object")


def write_cache_record(path: Path, data: dict[str, Any]) -> None:
    """Replace a cache record at once (a reader never sees half of it); best effort: a
    cache that cannot be written costs a later estimate, never the run."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, sort_keys=True)
        os.replace(tmp, path)
