"""How a benchmark records its figures: one JSON document with what ran it and when."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def record(bench: str, out: Path | None, **figures: Any) -> dict[str, Any]:
    """The document (bench name, command, date, figures); written to `out` when given."""
    document = {
        "bench": bench,
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        **figures,
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(document, indent=2) + "\n")
    return document
