#!/usr/bin/env bash
# tuneup's GPU validation suite in one command (see bench/gpu/suite.py for the steps).
#
#   bash bench/gpu/run.sh                      # every step, within 25 minutes
#   bash bench/gpu/run.sh --cpu --out /tmp/x   # the CPU dry run
#   bash bench/gpu/run.sh --steps knobs,ladder --deadline-s 570
#
# Works without network: uses $VENV (default .venv) if it has a python, else makes
# one that sees the site's packages (torch, h5py, ...), and installs tuneup into it
# offline unless `import tuneup` already works there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    echo "run.sh: making $VENV (with --system-site-packages)" >&2
    "$PYTHON" -m venv --system-site-packages "$VENV"
fi
if ! "$VENV/bin/python" -c "import tuneup" >/dev/null 2>&1; then
    echo "run.sh: installing tuneup into $VENV (offline, no dependencies)" >&2
    "$VENV/bin/python" -m pip install --no-index --no-deps --no-build-isolation -e . >&2
fi

export GPU_SUITE_COMMAND="bash bench/gpu/run.sh${*:+ $*}"
exec "$VENV/bin/python" bench/gpu/suite.py "$@"
