"""What does the GPU sampler cost the parent process?

Runs the sampler at 10 Hz (the fastest it allows is 0.1 s) over four fake
GPUs for ~20 s while the main thread sleeps, then reports the process's CPU
time over the wall time, as a share of one core. The issue asks for < 1 %.

    python bench/sampler_cost.py                    # 20 s, four GPUs, 10 Hz
    python bench/sampler_cost.py --seconds 5 --out bench/results/sampler_cost.json

The fake backend builds full readings (every field, a process each) but
makes no driver calls: this measures the sampler's own thread, buffer and
wake-ups. A real NVML backend adds its per-call cost on top.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from tuneup.hardware.types import GpuDevice, GpuProcess, GpuSample
from tuneup.telemetry.sampler import Sampler


class FourFakeGpus:
    """Readings that change a little each round, as a busy node's would."""

    name = "bench-fake"

    def __init__(self, gpus: int = 4) -> None:
        self.gpus = gpus
        self.rounds = 0

    def available(self) -> tuple[bool, str]:
        return True, ""

    def devices(self) -> list[GpuDevice]:
        return [
            GpuDevice(index=i, name="fake A100", memory_total_mb=40960.0) for i in range(self.gpus)
        ]

    def sample(self) -> list[GpuSample]:
        self.rounds += 1
        now = time.time()
        wobble = self.rounds % 7
        return [
            GpuSample(
                index=i,
                time=now,
                util_gpu_pct=90.0 + wobble,
                util_mem_pct=40.0 + wobble,
                memory_used_mb=30_000.0 + 10 * wobble,
                memory_total_mb=40_960.0,
                power_w=300.0 + wobble,
                power_limit_w=400.0,
                energy_mj=1e9 + 30_000.0 * self.rounds,
                temperature_c=60.0,
                sm_clock_mhz=1410.0,
                mem_clock_mhz=1215.0,
                throttle_reasons=("none",),
                pcie_rx_kbs=1e5,
                pcie_tx_kbs=1e4,
                processes=(GpuProcess(pid=1000 + i, name="python", used_memory_mb=29_000.0),),
            )
            for i in range(self.gpus)
        ]

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()

    backend = FourFakeGpus(args.gpus)
    sampler = Sampler(backend, interval_s=args.interval)
    cpu0, wall0 = time.process_time(), time.monotonic()
    with sampler:
        time.sleep(args.seconds)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    window_started = time.perf_counter()
    sampler.window(time.time() - args.seconds, time.time(), samples_processed=1000)
    window_ms = 1000 * (time.perf_counter() - window_started)

    report = {
        "gpus": args.gpus,
        "interval_s": args.interval,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 4),
        "cpu_pct_of_one_core": round(100 * cpu / wall, 3),
        "rounds": sampler.rounds,
        "rounds_per_s": round(sampler.rounds / wall, 2),
        "errors": sampler.errors,
        "window_query_ms": round(window_ms, 2),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    ok = report["cpu_pct_of_one_core"] < 1.0
    print(
        f"sampler at {1 / args.interval:g} Hz over {args.gpus} fake GPUs for {wall:.1f} s: "
        f"{report['cpu_pct_of_one_core']:.3f} % of one core "
        f"({sampler.rounds} rounds, {sampler.errors} errors); a {args.seconds:g} s window "
        f"query takes {window_ms:.2f} ms; {'under' if ok else 'OVER'} the 1 % budget"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
