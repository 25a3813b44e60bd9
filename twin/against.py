"""The twin's probes against a real ladder's, probe by probe (bench/gpu_twin.py --against,
and the GPU suite's speed step against the prediction it wrote before the ladder ran).

A ladder's wall time is a sum of probes; where the twin's total misses, the
question is which probes it priced wrong, and in which part: the one-time part
(the process's start or the warm set-up, first steps, compile, capture) the
worker measures whole, or the running part (loss steps, warm-ups, trials and
what the model cannot see). Probes are matched by stage, the candidate's values
and their order among equal ones, so two ladders that took different paths
(another stage order, more pairs) are compared where they ran the same probe.

Pure: journal lines in, a comparison out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from tuneup.probe.stats import median

from .rates import config_key


def _key(line: Mapping[str, Any], seen: Counter[tuple[str, str]]) -> tuple[str, str, int]:
    probe = (str(line.get("stage")), config_key(line.get("variant") or {}))
    seen[probe] += 1
    return (*probe, seen[probe])


def _parts(line: Mapping[str, Any]) -> tuple[float, float]:
    """A probe's one-time seconds and the rest of its wall (its running part)."""
    wall = float(line.get("wall_s") or 0.0)
    once = sum(float(v) for v in dict(line.get("one_time_s") or {}).values())
    return once, wall - once


def _ran(lines: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, int], Mapping[str, Any]]:
    seen: Counter[tuple[str, str]] = Counter()
    return {_key(line, seen): line for line in lines if line.get("status") == "ok"}


def probe_by_probe(
    predicted: Sequence[Mapping[str, Any]], measured: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Each probe both ladders ran, with its measured and predicted seconds, the part that
    missed, and the totals over those probes; the probes only one of them ran, counted."""
    twin, real = _ran(predicted), _ran(measured)
    rows: list[dict[str, Any]] = []
    for key, line in real.items():
        if key not in twin:
            continue
        (real_once, real_run), (twin_once, twin_run) = _parts(line), _parts(twin[key])
        miss_once, miss_run = twin_once - real_once, twin_run - real_run
        rows.append(
            {
                "stage": key[0],
                "variant": dict(line.get("variant") or {}),
                "measured_s": round(real_once + real_run, 1),
                "predicted_s": round(twin_once + twin_run, 1),
                "miss_s": round(miss_once + miss_run, 1),
                "missed_in": "one-time" if abs(miss_once) >= abs(miss_run) else "running",
            }
        )
    measured_s = sum(r["measured_s"] for r in rows)
    predicted_s = sum(r["predicted_s"] for r in rows)
    return {
        "probes": rows,
        "matched": len(rows),
        "measured_s": round(measured_s, 1),
        "predicted_s": round(predicted_s, 1),
        "error": round((predicted_s - measured_s) / measured_s, 3) if measured_s else None,
        "median_abs_miss_s": round(median([abs(r["miss_s"]) for r in rows]), 1) if rows else None,
        "only_measured": sum(1 for k in real if k not in twin),
        "only_predicted": sum(1 for k in twin if k not in real),
    }
