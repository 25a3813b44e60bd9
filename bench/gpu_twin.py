"""Predict the default GPU ladder on a CPU: the GPU twin replays a recorded GPU's costs.

    python bench/gpu_twin.py --evidence ../shared/gpu-evidence/h200-2026-11-26
    python bench/gpu_twin.py --evidence DIR --json              # one object: wall_s, probes, ...
    python bench/gpu_twin.py --evidence DIR --budget 10m        # a ladder planned to a budget
    python bench/gpu_twin.py --evidence DIR --legacy            # the plan before: in hours
    python bench/gpu_twin.py --evidence DIR --against RUN/speed/00/journal.jsonl  # probe by probe
    python bench/gpu_twin.py --evidence DIR --seeds 5 --out bench/results/gpu_twin_h200.json

The ladder is tuneup's own, assembled as `tuneup probe --preset h200` would
assemble it (its stages, plan, search, confirmation and time budget), with the
`sim` trainer's GPU twin (twin/model.py) answering each probe as the recorded
GPU did, and a simulated clock that moves by each probe's priced wall time
(the estimate's model, tuneup.costs.estimate, the one the session's time left
uses). So it predicts the plan, the probe count and the wall time, in seconds,
and checks the estimate against them: what the session said was left after
its first two probes, against what was left.

--legacy prices the same ladder as the measurement before issue 24 did: every
probe measured IO, SYNTHETIC and FULL, 5 trials of 20 steps each, a warm-up of
up to 60 steps after 20 loss steps, every stage judged on FULL, each baseline
probe and confirmation pair in a fresh process, two pairs at least for every
decision (none known quiet, none decisive). The real H200 run's own estimate
of that ladder was about 6 hours (132 probes, its old model); this replays
it probe by probe.

What the evidence does not hold is assumed (twin/model.py, ASSUMED), and the
output lists the assumptions: these are predictions, not measurements.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import _repo_root  # noqa: F401  (the checkout's root on sys.path: twin/ is not installed)
from _record import record
from _twin_predict import predict
from _twin_show import show
from twin_gather import gather

from tuneup.errors import UsageError
from tuneup.probe.durations import parse_duration
from twin.against import probe_by_probe
from twin.evidence import read_journal
from twin.model import read_evidence


def parser_of() -> argparse.ArgumentParser:
    """The command line: the evidence to read, the ladder to predict, what to print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evidence", type=Path, help="an evidence folder")
    parser.add_argument(
        "--journal-evidence",
        type=Path,
        action="append",
        default=[],
        metavar="JOURNAL",
        help="a tuneup journal.jsonl whose probes' costs are read too (repeatable)",
    )
    parser.add_argument(
        "--gather",
        type=Path,
        metavar="DIR",
        help="measure this machine's evidence into DIR without running a ladder, then stop",
    )
    parser.add_argument("--preset", default="h200")
    parser.add_argument("--budget", help="a time budget (10m, 600s): the ladder plans to it")
    parser.add_argument("--legacy", action="store_true", help="price the plan before issue 24")
    parser.add_argument("--seeds", type=int, default=1, help="noise seeds to run (medians)")
    parser.add_argument(
        "--compile-cache",
        choices=("auto", "warm", "cold"),
        default="auto",
        help="whether the ladder finds the gather's compiled graphs on disk (auto: where a "
        "gather made them)",
    )
    parser.add_argument(
        "--targets",
        choices=("all", "none"),
        default="all",
        help="none: the ladder as it ran before the tutorial got an answer of its own "
        "(issue 47), as the recorded H200 ladders ran",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also record the result under bench/results")
    parser.add_argument("--journal", type=Path, help="keep the first run's journal here")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="JOURNAL",
        help="a real ladder's journal.jsonl: the first run's probes against its, probe by probe",
    )
    return parser


def main() -> None:
    parser = parser_of()
    args = parser.parse_args()
    if args.gather is not None:
        folder = gather(args.gather, args.preset)
        print(
            f"gathered: {folder} (predict with: python bench/gpu_twin.py --evidence "
            f"{args.gather} --preset {args.preset})"
        )
        return
    if args.evidence is None:
        parser.error("--evidence DIR is needed (or --gather DIR to make one)")
    try:
        budget_s = parse_duration(args.budget) if args.budget else None
        evidence = read_evidence(args.evidence, args.journal_evidence)
        with tempfile.TemporaryDirectory() as folder:
            against = args.against is not None
            keep = args.journal or (Path(folder) / "journal.jsonl" if against else None)
            result = predict(
                evidence,
                preset=args.preset,
                seeds=args.seeds,
                budget_s=budget_s,
                legacy=args.legacy,
                keep=keep,
                compile_cache=args.compile_cache,
                targets=args.targets == "all",
            )
            if against and keep is not None:
                result["against"] = {
                    "journal": str(args.against),
                    **probe_by_probe(read_journal(keep), read_journal(args.against)),
                }
    except (UsageError, ValueError, OSError) as exc:
        print(f"gpu_twin: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.json:
        print(json.dumps(result, default=str))
    else:
        show(result)
    if args.out:
        record("gpu_twin", args.out, **{k: v for k, v in result.items() if k != "notes"})


if __name__ == "__main__":
    main()
