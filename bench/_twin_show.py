"""The GPU twin's prediction in words (bench/gpu_twin.py without --json)."""

from __future__ import annotations

import json
from typing import Any

from tuneup.probe.durations import duration_text


def show(result: dict[str, Any]) -> None:
    print(f"twin of {result['evidence']} ({result['mode']}, preset {result['preset']}):")
    for note in result["notes"]:
        print(f"  {note}")
    print(
        f"  predicted wall time: {duration_text(result['wall_s'])} ({result['wall_s']:.0f} s; "
        f"low {result['wall_s_low']:.0f} s, high {result['wall_s_high']:.0f} s), "
        f"{result['probes']:.0f} probes"
    )
    if result["wall_s_high"] < result["wall_s_low"]:
        # under a budget the dearer figures leave out more: a shorter ladder, not a faster one
        print(
            f"  the budget leaves out more at the figures' high end: {result['probes_high']:.0f}"
            f" probes there, {result['probes_low']:.0f} at the low end"
        )
    if result.get("first_estimate_s") is not None:
        print(
            f"  tuneup probe there says first: {duration_text(result['first_estimate_s'])}"
            " (the preset's probe.costs)"
        )
    print(
        "  where the time goes (likely): "
        + ", ".join(f"{k} {v:.0f} s" for k, v in result["parts"].items() if v)
    )
    for stage, entry in result["stages"].items():
        print(f"  {stage:14s} {entry['probes']:3.0f} probes {entry['wall_s']:8.1f} s")
    for line in result["decisions"]:
        print(f"  {line}")
    print(f"  {result['headline']}")
    if result["estimate_after_2_probes_error"] is not None:
        print(
            f"  the estimate after 2 probes was off by "
            f"{100 * result['estimate_after_2_probes_error']:.0f}%"
        )
    print("  cost figures (likely, low-high; m: measured):")
    for name, figure in result["figures"].items():
        mark = "m" if figure["measured"] else " "
        print(
            f"   {mark} {name:24s} {figure['likely']:8.2f} ({figure['low']:.2f}-"
            f"{figure['high']:.2f})  {figure['source']}"
        )
    if result["unsettled"]:
        print("  what would settle each assumed figure:")
        for name, settle in result["unsettled"].items():
            print(f"    {name}: {settle}")
    for what, why in result.get("measured_rates", {}).items():
        print(f"  measured rate, {what}: {why}")
    for failure in result.get("recorded_failures", []):
        print(
            f"  recorded failure, {failure['variant']} in {failure['row']}: "
            f"{failure['wall_s']:.1f} s, {failure['reason'][:80]}"
        )
    for what, why in result["assumed"].items():
        print(f"  assumed rate, {what}: {why}")
    if "against" in result:
        show_against(result["against"])


def show_against(against: dict[str, Any]) -> None:
    print(
        f"  against {against['journal']}: {against['matched']} probes both ran, measured "
        f"{against['measured_s']:.0f} s, predicted {against['predicted_s']:.0f} s "
        f"({100 * (against['error'] or 0):+.0f}%; {against['only_measured']} probes only "
        f"measured, {against['only_predicted']} only predicted)"
    )
    for row in against["probes"]:
        variant = json.dumps(row["variant"], sort_keys=True)
        print(
            f"    {row['stage']:12s} {variant[:44]:44s} measured {row['measured_s']:6.1f} s"
            f"  predicted {row['predicted_s']:6.1f} s  ({row['miss_s']:+.1f} s, "
            f"{row['missed_in']})"
        )
