"""What the first steps of a torch.compile probe cost: cold, after a release, warm and fresh.

The serving worker calls torch._dynamo.reset() between probes (tuneup.worker.serve:
release_probe_state), so the next compiled probe in that process traces again; the
disk caches (compile_cache_env: inductor's FX graph and AOT autograd caches) are what
should keep that cheap. This measures, on the cpu-smoke preset's model with
`jit: compile` and the jit stage's probe plan (the SYNTHETIC phase alone), through
the runner and serving worker a ladder uses:

    cold                compile, a fresh serving worker, an empty private cache folder
    after_release       compile, the next probe in that worker, after release_probe_state()
    new_batch           compile at twice the batch, the next probe in that worker: a new
                        graph after the release (the batch stage's candidates under compile)
    warm_fresh          compile, a fresh serving worker, the cache folder holding the graph
    none_fresh          jit none, a fresh serving worker (the floor of cold and warm_fresh)
    none_after_release  jit none, the next probe in that worker (the floor of after_release)

Each round gets a new private cache folder (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR:
compile_cache_env fills them only where unset), so every round's cold compile is cold
and tuneup's own cache folder is left alone. The compile and uncompiled groups swap
order from round to round. Per case: the median and min-max of the worker's
`first_steps` (what the warm-up took beyond steady steps) and of its start cost
(`spawn` in a fresh process, `setup` in a reused one), read from each probe's
result event with its `compile_cache`; then after_release/cold and warm_fresh/cold.

    python bench/compile_release.py --rounds 3 --out bench/results/compile_release_cpu.json

Not a test: a cold compile takes about 25 s on 2 cores, a round about a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from _record import record

from tuneup.bundled import cache_dir
from tuneup.cluster.launch import LocalLauncher
from tuneup.preset.load import load_preset
from tuneup.probe.events import Event, ResultEvent
from tuneup.probe.plan import ProbeSpec, plan_for
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import Candidate, ProbeBudget
from tuneup.trainers.backends import probe_config
from tuneup.tuning.session.datakeep import reads_npy
from tuneup.unet.datacache import ensure_synthetic_data

CASES = {
    "cold": "compile, fresh serving worker, empty private compile cache",
    "after_release": "compile, next probe in the same worker after release_probe_state()",
    "new_batch": "compile at twice the batch, next probe in the same worker after release",
    "warm_fresh": "compile, fresh serving worker, compile cache holding the graph",
    "none_fresh": "jit none, fresh serving worker",
    "none_after_release": "jit none, next probe in the same worker after release",
}
# Which uncompiled case is the floor of each compiled one (the same kind of start).
FLOOR = {
    "cold": "none_fresh",
    "after_release": "none_after_release",
    "new_batch": "none_after_release",
    "warm_fresh": "none_fresh",
}
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
# Both jit values may share a worker (jit is no per-process knob); `fresh` starts new ones.
PROCESS_KEY = "cpu"


@dataclass(frozen=True)
class Sample:
    """One probe's one-time costs, as its result event gave them."""

    case: str
    round: int
    first_steps_s: float
    start_s: float  # spawn (a fresh process) or setup (a reused one)
    start_kind: str
    compile_cache: str
    served_before: int
    wall_s: float
    load_1m: float  # the machine's load average when it ended: is it shared right now?


class LastResult:
    """Keeps the last `result` event the runner hears (from its reader thread)."""

    def __init__(self) -> None:
        self.event: ResultEvent | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, ResultEvent):
            self.event = event


@contextlib.contextmanager
def private_cache(folder: Path) -> Iterator[None]:
    """Point the workers started inside at `folder` for torch.compile's caches: the runner
    reads this process's environment at each worker start."""
    saved = {name: os.environ.get(name) for name in CACHE_VARIABLES}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Bench:
    """The runner, the two probe specs and what the probes reported."""

    def __init__(self, preset_name: str, workdir: Path) -> None:
        preset = load_preset(preset_name)
        synth = preset.synthetic_data
        if synth is None:
            raise SystemExit(f"preset {preset_name} makes no synthetic data: this needs a box")
        train, val, _ = ensure_synthetic_data(
            synth["box"],
            synth["val_box"],
            synth.get("seed", 0),
            cache_dir(),
            npy=reads_npy(preset.train),
        )
        base = {**preset.train, "train_path": str(train), "val_path": str(val)}
        twice = 2 * int(base.get("global_batch_size", 1))
        self.values = {
            "compile": {**base, "jit": "compile"},
            "compile_x2": {**base, "jit": "compile", "global_batch_size": twice},
            "none": {**base, "jit": "none"},
        }
        self.budget: ProbeBudget = preset.budget
        self.last = LastResult()
        self.runner = ProbeRunner(LocalLauncher(), workdir, on_event=self.last)
        self.samples: list[Sample] = []

    def spec(self, name: str) -> ProbeSpec:
        """The probe the jit stage's screen runs: its candidate, judged on SYNTHETIC alone."""
        values = self.values[name]
        candidate = Candidate(name, {"jit": values["jit"]}, judged="synthetic", whole=False)
        return ProbeSpec(
            config=probe_config(values, self.budget), plan=plan_for(self.budget, candidate)
        )

    def probe(self, case: str, rnd: int, jit: str, *, fresh: bool) -> Sample:
        """One probe in the kept serving worker (`fresh`: in a new one), as a ladder runs it."""
        self.last.event = None
        result = self.runner.run(
            "compile_release",
            {"jit": self.values[jit]["jit"]},
            self.spec(jit),
            reuse=PROCESS_KEY,
            fresh=fresh,
        )
        event = self.last.event
        if not result.ok or event is None:
            raise SystemExit(f"{case}: the probe failed: {result.status.value}: {result.reason}")
        once = dict(event.one_time_s)
        kind = "spawn" if "spawn" in once else "setup"
        sample = Sample(
            case=case,
            round=rnd,
            first_steps_s=round(once.get("first_steps", 0.0), 4),
            start_s=round(once.get(kind, 0.0), 4),
            start_kind=kind,
            compile_cache=event.compile_cache,
            served_before=result.served_before,
            wall_s=round(result.wall_s, 3),
            load_1m=round(os.getloadavg()[0], 2),
        )
        print(
            f"  round {rnd} {case:<19} first_steps {sample.first_steps_s:7.3f} s"
            f"  {kind} {sample.start_s:6.3f} s  cache {sample.compile_cache or '-':<5}"
            f"  served_before {sample.served_before}  wall {sample.wall_s:6.2f} s"
            f"  load {sample.load_1m:.2f}",
            flush=True,
        )
        self.samples.append(sample)
        return sample

    def round(self, rnd: int) -> None:
        """One of each case, in a new private cache folder; the groups swap order each round."""
        folder = Path(tempfile.mkdtemp(prefix="tuneup-compile-cache-"))
        groups = ("compile", "none") if rnd % 2 == 0 else ("none", "compile")
        try:
            with private_cache(folder):
                for group in groups:
                    if group == "compile":
                        self.probe("cold", rnd, "compile", fresh=True)
                        self.probe("after_release", rnd, "compile", fresh=False)
                        self.probe("new_batch", rnd, "compile_x2", fresh=False)
                        self.probe("warm_fresh", rnd, "compile", fresh=True)
                    else:
                        self.probe("none_fresh", rnd, "none", fresh=True)
                        self.probe("none_after_release", rnd, "none", fresh=False)
                self.runner.close()  # every worker of this folder gone before it is removed
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def spread(values: list[float]) -> dict[str, float]:
    """Median and range: three rounds say little more than that."""
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def summary(samples: list[Sample]) -> dict[str, Any]:
    """Per case: first steps and start cost (median, min-max) and the compile cache states."""
    cases: dict[str, Any] = {}
    for case, what in CASES.items():
        got = [s for s in samples if s.case == case]
        cases[case] = {
            "what": what,
            "first_steps_s": spread([s.first_steps_s for s in got]),
            f"{got[0].start_kind}_s": spread([s.start_s for s in got]),
            "compile_cache": sorted({s.compile_cache or "-" for s in got}),
            "samples_first_steps_s": [s.first_steps_s for s in got],
        }
    return cases


def per_round(samples: list[Sample], case: str) -> list[float]:
    """`case`'s first steps, round by round."""
    return [s.first_steps_s for s in sorted(samples, key=lambda s: s.round) if s.case == case]


def ratios(samples: list[Sample]) -> dict[str, Any]:
    """after_release and warm_fresh over cold: of the medians, and the rounds' own ratios."""
    cold = per_round(samples, "cold")
    out: dict[str, Any] = {}
    for case in ("after_release", "new_batch", "warm_fresh"):
        mine = per_round(samples, case)
        paired = [a / c for a, c in zip(mine, cold, strict=True) if c > 0]
        out[f"{case}/cold"] = {
            "of_medians": round(statistics.median(mine) / statistics.median(cold), 4),
            "per_round": spread(paired),
        }
    return out


def compile_share(samples: list[Sample]) -> dict[str, Any]:
    """What compiling added to each case's first steps over its uncompiled floor (rounds paired)."""
    share: dict[str, Any] = {}
    for case, floor in FLOOR.items():
        diffs = [
            a - b for a, b in zip(per_round(samples, case), per_round(samples, floor), strict=True)
        ]
        share[f"{case}-{floor}"] = spread(diffs)
    return share


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it (empty where it does not)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-smoke")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")

    load_before = round(os.getloadavg()[0], 2)
    workdir = Path(tempfile.mkdtemp(prefix="tuneup-compile-release-"))
    bench = Bench(args.preset, workdir / "probes")
    try:
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds}", flush=True)
            bench.round(rnd)
    finally:
        bench.runner.close()
        shutil.rmtree(workdir, ignore_errors=True)

    cases = summary(bench.samples)
    figures = {"ratios": ratios(bench.samples), "compile_share_s": compile_share(bench.samples)}
    print(f"\n{'case':<19} {'first_steps s: median (min-max)':<32} start s: median  compile_cache")
    for case, got in cases.items():
        first = got["first_steps_s"]
        start_kind = "spawn_s" if "spawn_s" in got else "setup_s"
        print(
            f"{case:<19} {first['median']:7.3f} ({first['min']:.3f}-{first['max']:.3f})"
            f"{'':<10} {start_kind[:-2]} {got[start_kind]['median']:6.3f}"
            f"  {','.join(got['compile_cache'])}"
        )
    for name, ratio in figures["ratios"].items():
        rounds = ratio["per_round"]
        print(
            f"{name:<19} {ratio['of_medians']:.4f} of medians;"
            f" per round {rounds['median']:.4f} ({rounds['min']:.4f}-{rounds['max']:.4f})"
        )
    for name, share in figures["compile_share_s"].items():
        print(
            f"compile share {name}: {share['median']:.3f} s ({share['min']:.3f}-{share['max']:.3f})"
        )
    record(
        "compile_release",
        args.out,
        preset=args.preset,
        rounds=args.rounds,
        plan="the jit stage's screen: SYNTHETIC alone",
        machine={
            "cores": os.cpu_count(),
            "cpu": cpu_model(),
            "platform": platform.platform(),
            "load_1m_before": load_before,
            "load_1m_after": round(os.getloadavg()[0], 2),
        },
        torch=version("torch"),
        cases=cases,
        **figures,
        samples=[vars(s) for s in bench.samples],
    )


if __name__ == "__main__":
    main()
