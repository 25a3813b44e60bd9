#!/usr/bin/env bash
# The suite for longer than one device call (10 minutes at most): started in its own
# process session, it runs on between calls while the machine stays warm.
#
#   bash bench/gpu/detached.sh start SECONDS [run.sh args...]   # call 1: start, wait, pack
#   bash bench/gpu/detached.sh wait SECONDS                     # call 2: wait on, pack
#
# Each call waits until the suite has ended or SECONDS have passed, then packs the
# suite's folder (--out, default /tmp/g) into $PACK (default $OUT/g.tgz) and prints
# the log's tail. The next call must come within the machine's warm time.
# SUITE (default bench/gpu/run.sh) is the script started, with the args and --out.
# THEN (a command line, optional) runs after the suite in the same detached session, its
# output in the same log: the next measurement of a window, with no call between.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${STATE:-/tmp/tuneup-detached}"
verb="${1:?start SECONDS [run.sh args] | wait SECONDS}"
seconds="${2:?how many seconds this call may wait}"
shift 2

mkdir -p "$STATE"
if [ "$verb" = start ]; then
    out=/tmp/g
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do
        [ "${args[$i]}" = --out ] && out="${args[$((i + 1))]:?--out needs a folder}"
    done
    [[ " $* " == *" --out "* ]] || args+=(--out "$out")
    echo "$out" >"$STATE/out"
    cd "$ROOT"
    # shellcheck disable=SC2016  # expanded by the detached bash, not here
    THEN="${THEN:-}" SUITE="${SUITE:-bench/gpu/run.sh}" setsid nohup bash -c 'bash "$SUITE" "$@"; rc=$?
        if [ -n "$THEN" ]; then echo "== then: $THEN"; bash -c "$THEN"; fi; exit "$rc"' \
        detached "${args[@]}" >"$STATE/log" 2>&1 </dev/null &
    echo $! >"$STATE/pid"
elif [ "$verb" != wait ]; then
    echo "detached.sh: unknown verb '$verb': use start or wait" >&2
    exit 2
fi

pid="$(cat "$STATE/pid")"
deadline=$((SECONDS + ${seconds%.*}))
while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 2
done
if kill -0 "$pid" 2>/dev/null; then
    echo "== the suite runs on (pid $pid); call 'detached.sh wait' within the warm time"
else
    echo "== the suite has ended"
fi
tail -40 "$STATE/log"
out="$(cat "$STATE/out")"
cp "$STATE/log" "$out/run.log" 2>/dev/null || true
pack="${PACK:-${OUT:-/tmp}/g.tgz}"
tar czf "$pack" -C "$(dirname "$out")" "$(basename "$out")" && echo "== packed $out into $pack"
