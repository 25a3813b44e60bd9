"""Set today's twin beside every real ladder a kept twin check ran (bench/results/twin_checks).

    python bench/twin_replay.py                       # every kept check, 5 seeds
    python bench/twin_replay.py --out bench/results/twin_replay_cpu.json

A twin check (twin_check.py) gathers, predicts and runs two real ladders: one check is two
draws from ladders that took 87-131 probes on this machine on one day. Each check packed
under bench/results/twin_checks/ keeps its gather and its ladders' journals and walls, so
a change to the twin is measured here against all of them, in seconds and without a new
ladder: the prediction from each check's own gather, against its own ladders, as
twin_check.py compares them. It says the bias (mean error) and the spread (mean |error|)
over the checks, in wall time and in probes, and how many checks land within 25%.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import _repo_root  # noqa: F401  (the checkout's root on sys.path: twin/ is not installed)
from _record import record
from _twin_archive import ARCHIVES, ladder_journals, unpack
from _twin_predict import predict
from twin_check import TOLERANCE, compare, ladder_record

from twin.evidence import read_journal
from twin.model import read_evidence


def replay(archive: Path, seeds: int) -> dict[str, Any]:
    """One kept check: today's prediction from its gather, against its ladders."""
    with tempfile.TemporaryDirectory(prefix="twin-replay-") as tmp:
        folder = Path(tmp)
        check = unpack(archive, folder)
        evidence = read_evidence(folder / "evidence")
        keep = folder / "predicted-probes.jsonl"
        predicted = predict(
            evidence, preset=str(check.get("preset", "cpu-smoke")), seeds=seeds, keep=keep
        )
        ladders = [
            ladder_record(read_journal(journal), float(ran["wall_s"]), int(ran.get("exit", 0)))
            for journal, ran in zip(
                ladder_journals(folder, len(check["ladders"])), check["ladders"], strict=True
            )
        ]
        verdict = compare(predicted, ladders, read_journal(keep))
    return {
        "check": archive.name,
        "then": check.get("predicted"),
        "predicted": {k: predicted[k] for k in ("wall_s", "wall_s_low", "wall_s_high", "probes")},
        "ladders": [{"wall_s": ladder["wall_s"], "probes": ladder["probes"]} for ladder in ladders],
        **{k: verdict[k] for k in ("wall_error", "probe_error", "per_ladder", "within_tolerance")},
        "parts": verdict["parts"],
    }


def overall(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """Bias and spread over the checks (each against its ladders' mean) and per ladder."""
    walls = [c["wall_error"] for c in checks]
    probes = [c["probe_error"] for c in checks]
    per_ladder = [ladder for c in checks for ladder in c["per_ladder"]]

    def within(e: dict[str, float]) -> bool:
        return abs(e["wall_error"]) <= TOLERANCE and abs(e["probe_error"]) <= TOLERANCE

    return {
        "checks": len(checks),
        "ladders": len(per_ladder),
        "wall_bias": round(statistics.mean(walls), 3),
        "wall_spread": round(statistics.mean(abs(w) for w in walls), 3),
        "probe_bias": round(statistics.mean(probes), 3),
        "probe_spread": round(statistics.mean(abs(p) for p in probes), 3),
        "checks_within": sum(c["within_tolerance"] for c in checks),
        "ladders_within": sum(within(e) for e in per_ladder),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archives", nargs="*", type=Path, help="kept checks (default: all)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="record under bench/results")
    args = parser.parse_args()
    archives = args.archives or sorted(ARCHIVES.glob("*.tar.gz"))
    if not archives:
        raise SystemExit(f"no kept twin checks under {ARCHIVES}: run twin_check.py --out")
    checks = []
    for archive in archives:
        checks.append(replay(archive, args.seeds))
        c = checks[-1]
        print(
            f"{c['check']:40s} predicted {c['predicted']['wall_s']:5.0f} s "
            f"{c['predicted']['probes']:4.0f} probes | ladders "
            + ", ".join(f"{x['wall_s']:.0f} s/{x['probes']}" for x in c["ladders"])
            + f" | wall {c['wall_error']:+.0%} probes {c['probe_error']:+.0%}",
            flush=True,
        )
    summary = overall(checks)
    print(
        f"over {summary['checks']} checks ({summary['ladders']} ladders): wall "
        f"{summary['wall_bias']:+.0%} on average (|error| {summary['wall_spread']:.0%}), "
        f"probes {summary['probe_bias']:+.0%} (|error| {summary['probe_spread']:.0%}); "
        f"within {TOLERANCE:.0%}: {summary['checks_within']} of {summary['checks']} checks, "
        f"{summary['ladders_within']} of {summary['ladders']} ladders"
    )
    if args.out:
        record("twin_replay", args.out, seeds=args.seeds, overall=summary, checks=checks)


if __name__ == "__main__":
    main()
