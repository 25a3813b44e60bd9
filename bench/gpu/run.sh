#!/usr/bin/env bash
# tuneup's GPU validation suite in one command (see bench/gpu/suite.py for the steps).
#
#   bash bench/gpu/run.sh                      # one 9-minute window, the claim first:
#       1. the GPU twin predicts the whole default ladder (prediction.json, before anything runs)
#       2. speed: that ladder, whole, with `tuneup monitor --json` beside it (monitor.jsonl.gz);
#          its record: measured wall time and probes against the prediction, under 10 min or not
#       3. with the time left, in rank order: doctor, gpu-tests, knobs, honesty; then orphans
#   bash bench/gpu/run.sh --cpu --out /tmp/x   # the CPU dry run: the same order, a tiny model
#   bash bench/gpu/run.sh --steps gpu-tests,knobs,honesty   # a later window: the rest
#   bash bench/gpu/run.sh --steps ladder       # the short --budget ladder (not in the default)
#
# The results folder (bench/results/gpu-<gpu>-<date>/ by default) is an evidence folder the
# GPU twin reads (bench/gpu/EVIDENCE.md).
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
