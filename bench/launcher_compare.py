"""Does a probe launched by torchrun measure what the plain launcher measures?

Runs one preset's base config as probes, interleaved (local, torchrun, local,
torchrun, ...), through `ProbeRunner` with `LocalLauncher` and with
`TorchrunLauncher(nproc)`, and reports each launcher's FULL medians and their
ratio. With `--nproc 1` torchrun starts one rank (the worker sees WORLD_SIZE=1,
so no process group is formed); with `--nproc N` the torchrun figure is the
N-rank job's samples/s, to set against N x the local one.

    python bench/launcher_compare.py                              # cpu-smoke, 1 rank
    python bench/launcher_compare.py --preset h200 --pairs 3 --out bench/results/launcher_h200.json

Not a test: it takes minutes. The data box of the preset is made on first use.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-smoke")
    parser.add_argument("--nproc", type=int, default=1, help="torchrun ranks (default 1)")
    parser.add_argument("--pairs", type=int, default=3, help="interleaved local/torchrun pairs")
    parser.add_argument("--out", type=Path, help="write the summary as JSON")
    args = parser.parse_args()

    from tuneup.cluster.launch import LocalLauncher, TorchrunLauncher
    from tuneup.preset.load import load_preset
    from tuneup.probe.plan import ProbeSpec, plan_probe
    from tuneup.probe.runner import ProbeRunner
    from tuneup.trainers.adapters import load_trainer
    from tuneup.trainers.backends import probe_config
    from tuneup.tuning.session.datakeep import base_values, reads_npy

    preset = load_preset(args.preset)
    values = base_values(preset, load_trainer("unet"), None, npy=reads_npy(preset.train))
    spec = ProbeSpec(config=probe_config(values, preset.budget), plan=plan_probe(preset.budget))
    launchers = {"local": LocalLauncher(), "torchrun": TorchrunLauncher(args.nproc)}
    runs: dict[str, list[dict]] = {name: [] for name in launchers}
    with tempfile.TemporaryDirectory() as work:
        runner = ProbeRunner(LocalLauncher(), Path(work))
        for _ in range(args.pairs):
            for name, launcher in launchers.items():
                result = runner.run(name, {}, spec, launcher=launcher)
                runs[name].append(
                    {
                        "status": result.status.value,
                        "reason": result.reason,
                        "full_sps": result.full_sps,
                        "ranks": result.ranks,
                        "wall_s": result.wall_s,
                    }
                )
                print(f"{name:9s} {result.status.value:8s} FULL {result.full_sps}  {result.reason}")
    medians = {
        name: statistics.median([r["full_sps"] for r in rows if r["full_sps"]] or [float("nan")])
        for name, rows in runs.items()
    }
    summary = {
        "command": "python bench/launcher_compare.py "
        f"--preset {args.preset} --nproc {args.nproc} --pairs {args.pairs}",
        "date": time.strftime("%Y-%m-%d"),
        "host": platform.node(),
        "median_full_sps": medians,
        "torchrun_over_local": medians["torchrun"] / medians["local"],
        "runs": runs,
    }
    print(json.dumps({k: summary[k] for k in ("median_full_sps", "torchrun_over_local")}))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
