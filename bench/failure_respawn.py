"""What a failed probe costs the probe after it: a worker that serves on against a new one.

On the H200 (bench/results/gpu-h200-2026-11-27c) torch.compile failed 19 s into its
probe and the worker was given up: the next probe paid a new process and cuDNN's search
again (78 s), the confirmation fp32's search again (32 s). The worker now survives
torch.compile's own failure (worker/serve.sound_after). Here, on this machine, in
alternating rounds: a serving worker runs the cpu-smoke baseline, then a jit=compile
probe that fails, then the baseline again, with the failure

* ``survived``: torch.compile's own (TUNEUP_WORKER_FAULT=compile): the worker serves on;
* ``respawned``: any other exception (TUNEUP_WORKER_FAULT=crash), as every failure was
  before: the next probe starts a new process.

Reported per mode: the probe after the failure (its wall time, whether it shared the
failed probe's process), the three probes' wall time, medians with their spread, and
whether the probe after measured the fixed-seed losses the first did.

    python bench/failure_respawn.py --rounds 6 --out bench/results/failure_respawn_cpu.json

Not a test: about three minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
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

FAULTS = {"survived": "compile:jit=compile", "respawned": "crash:jit=compile"}


def spread(values: list[float]) -> float:
    """1.4826 x the median absolute deviation: one reading's noise."""
    centre = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - centre) for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-smoke")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per mode, alternating")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    preset = load_preset(args.preset)
    # the synthetic box, made once (with the .npy copies where its loader reads them)
    base = base_values(preset, load_trainer("unet"), None, npy=reads_npy(preset.train))
    runner = ProbeRunner(LocalLauncher(), Path(tempfile.mkdtemp()) / "probes", grace_s=2.0)

    def probe(values: dict[str, Any]) -> ProbeResult:
        spec = ProbeSpec(config=probe_config(values, preset.budget), plan=plan_probe(preset.budget))
        return runner.run("failure", {}, spec, reuse="cpu")

    got: dict[str, dict[str, list[Any]]] = {
        m: {"after_s": [], "three_s": [], "shared": [], "same_losses": []} for m in FAULTS
    }
    for round_ in range(args.rounds):
        order = list(FAULTS) if round_ % 2 == 0 else list(reversed(FAULTS))
        for mode in order:
            os.environ["TUNEUP_WORKER_FAULT"] = FAULTS[mode]
            runner.close()  # each round starts from a fresh worker
            began = time.monotonic()
            first = probe(base)
            failed = probe({**base, "jit": "compile"})
            after = probe(base)
            three = time.monotonic() - began
            if not (first.ok and after.ok) or failed.ok:
                raise SystemExit(f"{mode}: unexpected statuses {first.status} {failed.status}")
            got[mode]["after_s"].append(after.wall_s)
            got[mode]["three_s"].append(three)
            got[mode]["shared"].append(after.served_before > 0)
            got[mode]["same_losses"].append(after.losses == first.losses)
        latest = {m: round(g["after_s"][-1], 2) for m, g in got.items()}
        print(f"round {round_ + 1}: the probe after the failure {latest}", flush=True)
    runner.close()
    os.environ.pop("TUNEUP_WORKER_FAULT", None)

    figures: dict[str, Any] = {}
    for mode, values in got.items():
        figures[mode] = {
            "after_s": [round(v, 3) for v in values["after_s"]],
            "after_s_median": round(statistics.median(values["after_s"]), 3),
            "after_s_spread": round(spread(values["after_s"]), 3),
            "three_s_median": round(statistics.median(values["three_s"]), 3),
            "three_s_spread": round(spread(values["three_s"]), 3),
            "after_shared_the_process": all(values["shared"]),
            "after_same_losses": all(values["same_losses"]),
        }
        print(mode, {k: v for k, v in figures[mode].items() if k != "after_s"}, flush=True)
    survived, respawned = figures["survived"], figures["respawned"]
    record(
        "failure_respawn",
        args.out,
        preset=args.preset,
        rounds=args.rounds,
        faults=FAULTS,
        modes=figures,
        after_ratio=round(respawned["after_s_median"] / survived["after_s_median"], 3),
        three_ratio=round(respawned["three_s_median"] / survived["three_s_median"], 3),
    )


if __name__ == "__main__":
    main()
