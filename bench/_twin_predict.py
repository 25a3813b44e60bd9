"""The GPU twin's prediction of a ladder: one ladder (_twin_ladder.py) run over noise seeds
at each figure's likely, low and high end, with the evidence and assumptions it rests on.

bench/gpu_twin.py prints or records it; bench/twin_check.py and bench/twin_replay.py set
it beside real ladders.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import _repo_root  # noqa: F401  (the checkout's root on sys.path: twin/ is not installed)
from _twin_ladder import run_ladder

from tuneup.costs.one_time import ENDS, End
from tuneup.probe.durations import duration_text
from twin.evidence import GATHER, read_journal
from twin.learned import RecordedFailure
from twin.model import Evidence, assumed_rates, measured_rates


def gathered_compiles(evidence: Evidence) -> list[dict[str, Any]]:
    """The configurations a gather compiled: a ladder run after it finds their graphs in the
    disk caches."""
    journal = evidence.folder / GATHER / "journal.jsonl"
    if not journal.is_file():
        return []
    configs = [dict(line.get("config") or {}) for line in read_journal(journal)]
    return [c for c in configs if c.get("jit") == "compile"]


def predict(
    evidence: Evidence,
    *,
    preset: str,
    seeds: int = 1,
    budget_s: float | None = None,
    legacy: bool = False,
    keep: Path | None = None,
    compile_cache: str = "auto",
    targets: bool = True,
) -> dict[str, Any]:
    """The ladder predicted at every figure's likely end, and at its low and high ends, each
    over `seeds` noise seeds (medians): `wall_s`, `wall_s_low`, `wall_s_high`; the parts
    at each end are seed 0's."""
    warm = compile_cache == "warm" or (compile_cache == "auto" and bool(evidence.table))
    compiled = gathered_compiles(evidence) if warm else []

    def ladder(seed: int, end: End) -> dict[str, Any]:
        return run_ladder(
            evidence,
            seed,
            budget_s,
            legacy,
            preset,
            keep if seed == 0 and end == "likely" else None,
            end,
            compiled,
            targets,
        )

    runs = [ladder(seed, "likely") for seed in range(seeds)]
    # each end over the same seeds (a ladder's path is the seed's: seed 0's low end alone
    # once said 80 s under a likely 77 s)
    ends = {end: [ladder(seed, end) for seed in range(seeds)] for end in ENDS if end != "likely"}
    first = runs[0]
    figures = evidence.figures()
    return {
        **first,
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "wall": duration_text(statistics.median(r["wall_s"] for r in runs)),  # not seed 0's
        "wall_s_low": statistics.median(r["wall_s"] for r in ends["low"]),
        "wall_s_high": statistics.median(r["wall_s"] for r in ends["high"]),
        "probes": statistics.median(r["probes"] for r in runs),
        "probes_low": statistics.median(r["probes"] for r in ends["low"]),
        "probes_high": statistics.median(r["probes"] for r in ends["high"]),
        "probes_range": [min(r["probes"] for r in runs), max(r["probes"] for r in runs)],
        "parts_low": ends["low"][0]["parts"],
        "parts_high": ends["high"][0]["parts"],
        "runs": [{k: r[k] for k in ("seed", "wall_s", "probes", "headline")} for r in runs],
        "evidence": str(evidence.folder),
        "preset": preset,
        "compile_cache": "warm (the gather's graphs)" if compiled else "cold",
        "figures": {name: cost.to_dict() for name, cost in figures.items()},
        "unsettled": {name: cost.settle for name, cost in figures.items() if not cost.measured},
        "recorded_stage_probes": dict(evidence.recorded_stages),
        "assumed": assumed_rates(evidence),
        "measured_rates": measured_rates(evidence),
        "recorded_failures": [recorded_failure(f) for f in evidence.failures],
        "predicted": "by the twin, from the evidence and the assumptions",
    }


def recorded_failure(failure: RecordedFailure) -> dict[str, Any]:
    """A recorded crash as the JSON says it."""
    return {
        "variant": dict(failure.variant),
        "row": failure.row,
        "wall_s": failure.wall_s,
        "reason": failure.reason,
        "worker_serves_on": failure.survived,
    }
