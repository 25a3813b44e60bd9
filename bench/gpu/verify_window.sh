#!/usr/bin/env bash
# One device window for issues 47 and 48: the recorded H200 recommendation verified for
# real on the tutorial's box size, for both targets; the device-side profile of its
# baseline and its recommendation; then the gpu tests (the app's among them).
#
#   SC22=runs/sc22 APEX_SHIM=runs/apex-shim bash bench/gpu/verify_window.sh [--out OUT]
#
# Run it detached across two device calls (bench/gpu/detached.sh with SUITE= this file).
# Each step has its own time limit (timeout sends SIGINT first: verify keeps the runs that
# finished) and its output in OUT/<step>.out and .err; OUT/steps.tsv has each step's exit
# status and seconds as it ends.
#
# SC22 is a copy of NERSC/sc22-dl-tutorial (train.py, utils/, networks/, config/) and
# wheels/ the offline wheels: textual and plotext for the app's test, tensorboard and
# ruamel.yaml for the tutorial's imports. APEX_SHIM holds a stand-in `apex` package whose
# only job is to let the tutorial's unconditional `import apex.optimizers` succeed on a
# node without apex; its FusedAdam refuses to run (the exports never pass --enable_apex).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT=/tmp/g
[ "${1:-}" = --out ] && OUT="${2:?--out needs a folder}"
SESSION="${SESSION:-bench/results/gpu-h200-2026-11-27d/speed/00}"
SC22="$(cd "${SC22:-runs/sc22}" && pwd)"
APEX_SHIM="$(cd "${APEX_SHIM:-runs/apex-shim}" && pwd)"
mkdir -p "$OUT"
: >"$OUT/steps.tsv"

step() {
    local name="$1" limit="$2" began="$SECONDS" rc
    shift 2
    echo "== $name ($(date -u +%T), limit ${limit} s): $*"
    timeout --signal=INT --kill-after=30 "$limit" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - began))" >>"$OUT/steps.tsv"
    echo "== $name: exit $rc in $((SECONDS - began)) s"
    tail -5 "$OUT/$name.err"
}

if [ -z "${NO_INSTALL:-}" ] && ! .venv/bin/python -c "import tuneup, textual, plotext, tensorboard, ruamel.yaml" 2>/dev/null; then
    bash install-offline.sh 2>&1 | tail -5
fi
PY="$ROOT/.venv/bin/python"
"$PY" bench/gpu/envinfo.py >"$OUT/env.json" 2>&1
df -h / /tmp "${TUNEUP_CACHE_DIR:-$HOME/.cache}" >"$OUT/df.txt" 2>&1
git log -1 --format='%H %s' >"$OUT/commit.txt" 2>/dev/null || true
git status --short >>"$OUT/commit.txt" 2>/dev/null || true

rm -rf "$OUT/session" && cp -r "$SESSION" "$OUT/session"
step verify "${VERIFY_LIMIT_S:-430}" env PYTHONPATH="$APEX_SHIM" "$PY" -m tuneup verify \
    "$OUT/session" --train-py "$SC22/train.py" --rounds "${ROUNDS:-1}" \
    --budget "${VERIFY_BUDGET:-330s}" --json
step profile-baseline 150 "$PY" -m tuneup profile "$OUT/session" --probe 1
step profile-recommendation 150 "$PY" -m tuneup profile "$OUT/session" --probe 20
for trace in "$OUT"/session/probes/*-profile.trace.json.gz; do
    [ -e "$trace" ] || continue
    step "trace-$(basename "$trace" .trace.json.gz)" 60 "$PY" -m tuneup profile --trace "$trace" --json
done
step export-md 60 "$PY" -m tuneup export "$OUT/session" --format md
mapfile -t marked < <(grep -l "mark.gpu" tests/test_*.py)
step gpu-tests "${TESTS_LIMIT_S:-240}" "$PY" -m pytest -v --durations=0 -m gpu \
    -p no:cacheprovider "${marked[@]}"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
echo "== window done ($(date -u +%T))"
