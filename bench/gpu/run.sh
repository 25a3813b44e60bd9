#!/usr/bin/env bash
# tuneup's GPU validation suite in one command (see bench/gpu/suite.py for the steps).
#
#   bash bench/gpu/run.sh                      # 9 minutes: the steps that fit, in rank order
#   bash bench/gpu/run.sh --cpu --out /tmp/x   # the CPU dry run
#   bash bench/gpu/run.sh --steps ladder,speed --budget 9m   # a later window: the rest
#
# Works without network: uses $VENV (default .venv) where tuneup imports there, else
# makes it with install-offline.sh, which shows it the packages of $PYTHON (torch, h5py,
# ...) whether that is a system python, a venv or a conda env, and installs tuneup.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

# The app's GPU test needs textual and plotext: their wheels in ./wheels (brought with
# `pip download textual plotext -d wheels` on a machine with network) are installed too.
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import tuneup" >/dev/null 2>&1 \
    || { [ -d "$ROOT/wheels" ] && ! "$VENV/bin/python" -c "import textual, plotext" >/dev/null 2>&1; }; then
    VENV="$VENV" PYTHON="$PYTHON" bash "$ROOT/install-offline.sh"
fi

export GPU_SUITE_COMMAND="bash bench/gpu/run.sh${*:+ $*}"
exec "$VENV/bin/python" bench/gpu/suite.py "$@"
