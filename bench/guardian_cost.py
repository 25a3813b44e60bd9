"""What the probe guardian costs, and how fast it clears a probe after tuneup is killed.

1. Start-up: `python -c pass` started directly and under the guardian, in
   alternating order (interleaved pairs); the median of each and of the
   paired differences, in ms. A real probe's process start is 2-20 s.
2. Clean-up: a stand-in for tuneup starts a guarded `sh` that leaves a
   `sleep` in a session of its own, and is SIGKILLed; the time until no
   process marked with the run's folder is left, in ms.

    python bench/guardian_cost.py --out bench/results/guardian_cost_cpu.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _record import record

from tuneup.cluster.guardian import guarded
from tuneup.cluster.leftovers import MARKER, find_leftovers

PARENT = """
import os, subprocess, sys, time
from tuneup.cluster.guardian import guarded
env = {**os.environ, "MARKER": sys.argv[1]}
subprocess.Popen(guarded(["sh", "-c", "setsid sleep 1000 & sleep 1001 & wait"], os.getpid()),
                 env=env, start_new_session=True)
print("started", flush=True)
time.sleep(1000)
""".replace("MARKER", MARKER)


def start_ms(argv: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, check=True)
    return 1000 * (time.perf_counter() - began)


def cleanup_ms(folder: Path) -> float:
    probes = folder / "probes"
    probes.mkdir(parents=True, exist_ok=True)
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT), str(probes.resolve())],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None and parent.stdout.readline() == "started\n"
    while len(find_leftovers(probes)) < 4:
        time.sleep(0.01)
    killed = time.perf_counter()
    parent.kill()
    parent.wait()
    while find_leftovers(probes):
        time.sleep(0.005)
    return 1000 * (time.perf_counter() - killed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    plain = [sys.executable, "-c", "pass"]
    direct, under, diffs = [], [], []
    for index in range(args.pairs):
        runs = [("direct", plain), ("guarded", guarded(plain, os.getpid()))]
        if index % 2:
            runs.reverse()
        seen = {name: start_ms(argv) for name, argv in runs}
        direct.append(seen["direct"])
        under.append(seen["guarded"])
        diffs.append(seen["guarded"] - seen["direct"])
    with tempfile.TemporaryDirectory() as tmp:
        clear = [cleanup_ms(Path(tmp) / f"k{i}") for i in range(args.kills)]

    def spread(values: list[float]) -> dict[str, float]:
        q = statistics.quantiles(values, n=4)
        return {"median": round(statistics.median(values), 2), "q1": round(q[0], 2),
                "q3": round(q[2], 2)}  # fmt: skip

    document = record(
        "guardian_cost",
        args.out,
        cpus=os.cpu_count(),
        pairs=args.pairs,
        start_direct_ms=spread(direct),
        start_guarded_ms=spread(under),
        added_ms_paired=spread(diffs),
        kills=args.kills,
        cleared_after_sigkill_ms=spread(clear),
    )
    print(
        f"start: direct {document['start_direct_ms']['median']} ms, guarded "
        f"{document['start_guarded_ms']['median']} ms, added (paired median) "
        f"{document['added_ms_paired']['median']} ms; after SIGKILL of the parent every "
        f"process was gone in {document['cleared_after_sigkill_ms']['median']} ms (median "
        f"of {args.kills})"
    )


if __name__ == "__main__":
    main()
