"""The checkout's root on sys.path, for the twin.

The GPU twin (`twin/`, beside the product) is not installed with tuneup, and
`python bench/x.py` puts only bench/ on sys.path; a script that imports the
twin imports this module first. Appended, not prepended: the tuneup that is
installed (or named by PYTHONPATH) stays the one imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))
