"""Does a probe in a shared worker process measure what a probe in a fresh process does?

Two configurations of the cpu-smoke preset (the baseline A and a variant B, by
default bf16) are measured in alternating A/B pairs, in blocks that alternate too:
a block in one serving worker (as a stage's probes run: A B, B A, ...), then a
block in fresh processes (each probe its own, as the confirmation's first probes
and `--fresh-processes` run), and so on. Reported per mode: each pair's ratio
B/A, their median and spread (the noise of one pair, 1.4826 x MAD of the log
ratios), A's median FULL samples/s, and whether A's fixed-seed losses were the
same in every probe. If what a shared process keeps between probes biased a
comparison, the two modes' ratios would differ by more than their spread.

    python bench/shared_vs_fresh.py --pairs 6 --blocks 2 \\
        --out bench/results/shared_vs_fresh_cpu.json

Not a test: about two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _record import record

from tuneup.cluster.launch import LocalLauncher
from tuneup.preset.load import load_preset
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import ProbeResult
from tuneup.trainers.adapters import load_trainer
from tuneup.trainers.backends import probe_config
from tuneup.tuning.session.datakeep import base_values, reads_npy

VARIANTS = {
    "bf16": {"amp_mode": "bf16"},
    "channels_last": {"channels_last": True},
    "fused": {"optimizer_impl": "fused"},
}


def spread(ratios: list[float]) -> float:
    """The noise of one pair's log ratio: 1.4826 x the median absolute deviation."""
    logs = [math.log(r) for r in ratios]
    centre = statistics.median(logs)
    return 1.4826 * statistics.median(abs(x - centre) for x in logs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-smoke")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="bf16")
    parser.add_argument("--pairs", type=int, default=6, help="pairs per block")
    parser.add_argument("--blocks", type=int, default=2, help="blocks per mode")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    preset = load_preset(args.preset)
    # the synthetic box, made once (with the .npy copies where its loader reads them)
    a = base_values(preset, load_trainer("unet"), None, npy=reads_npy(preset.train))
    b = {**a, **VARIANTS[args.variant]}
    runner = ProbeRunner(LocalLauncher(), Path(tempfile.mkdtemp()) / "probes")

    def probe(values: dict[str, Any], shared: bool) -> ProbeResult:
        spec = ProbeSpec(config=probe_config(values, preset.budget), plan=plan_probe(preset.budget))
        result = runner.run("compare", {}, spec, reuse="cpu" if shared else None)
        if not result.ok:
            raise SystemExit(f"a probe failed: {result.status.value}: {result.reason}")
        return result

    modes: dict[str, dict[str, list[Any]]] = {
        m: {"ratios": [], "a_sps": [], "losses": []} for m in ("shared", "fresh")
    }
    for _block in range(args.blocks):
        for mode in ("shared", "fresh"):
            runner.close()  # each block starts from a fresh process
            for pair in range(args.pairs):
                first, second = (a, b) if pair % 2 == 0 else (b, a)
                x, y = probe(first, mode == "shared"), probe(second, mode == "shared")
                ra, rb = (x, y) if first is a else (y, x)
                modes[mode]["ratios"].append((rb.full_sps or 0) / (ra.full_sps or 1))
                modes[mode]["a_sps"].append(ra.full_sps)
                modes[mode]["losses"].append(tuple(ra.losses))
            print(f"{mode:<7} block done: {len(modes[mode]['ratios'])} pairs", flush=True)
    runner.close()

    figures: dict[str, Any] = {}
    for mode, got in modes.items():
        ratios = got["ratios"]
        figures[mode] = {
            "ratios": [round(r, 4) for r in ratios],
            "median_ratio": round(statistics.median(ratios), 4),
            "pair_noise_pct": round(100 * math.expm1(spread(ratios)), 2),
            "a_full_sps_median": round(statistics.median(got["a_sps"]), 1),
            "a_losses_identical": len(set(got["losses"])) == 1,
        }
        print(mode, {k: v for k, v in figures[mode].items() if k != "ratios"}, flush=True)
    shared, fresh = figures["shared"], figures["fresh"]
    record(
        "shared_vs_fresh",
        args.out,
        preset=args.preset,
        variant=args.variant,
        pairs_per_block=args.pairs,
        blocks=args.blocks,
        modes=figures,
        ratio_of_ratios=round(shared["median_ratio"] / fresh["median_ratio"], 4),
        same_losses_across_modes=modes["shared"]["losses"][0] == modes["fresh"]["losses"][0],
    )


if __name__ == "__main__":
    main()
