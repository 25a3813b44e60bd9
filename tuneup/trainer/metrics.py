"""JSON-lines metrics written as they arrive, so a crash or Ctrl-C loses nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any


class MetricsWriter:
    """Append one JSON object per line and flush it at once; a no-op without a path."""

    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()
        }
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
