"""The GPU twin: the `sim` trainer replaying a recorded GPU's rates and costs.

Work on the ladder happens on CPU machines far more often than on a GPU, and
the GPU's costs are not the CPU's (a fresh process's first step took 13-56 s on
an H200; starting a process costs 2 s on a 2-core CPU). The twin answers each
probe as that GPU did, from an evidence folder (bench/gpu/EVIDENCE.md says
what one holds), so the ladder's plan, probe count and wall time can be
predicted on any machine (bench/gpu_twin.py), and the estimate's model
(tuneup.probe.estimate) is the one that prices every probe here too.

What is read from the folder, measured (knobs.json, session/journal.jsonl):

* SYNTHETIC at batch 64 for each knob row knobs.json measured (fp32 with TF32,
  TF32 off, bf16, fp16, channels_last), and each row's first step in a fresh
  process;
* the baseline's IO (lowmem, 2 workers), FULL, spawn, and its FULL against
  min(IO, SYNTHETIC);
* trial noise: SYNTHETIC's trial spread (knobs.json), FULL's (the journal),
  and FULL's probe-to-probe difference (the two baseline probes).

What it lacks is assumed, each with its source (`ASSUMED`, printed by the
bench): fused Adam, TorchScript, torch.compile, CUDA graphs, bf16 with
channels_last, other batch sizes, the loaders other than lowmem with 2 workers,
the set-up of a probe in a warm worker, and how a new configuration's first
step in a warm worker compares with a fresh process's.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.config import loader
from tuneup.errors import UsageError
from tuneup.probe.stats import median, relative_spread

from .sim import SimCosts, SimTrainer

# Each assumption the twin makes where the evidence is silent, with its source: the bench
# prints them beside every prediction, so a figure is never taken for a measurement.
ASSUMED: dict[str, str] = {
    "fused Adam": "+4% SYNTHETIC: the tutorial's apex FusedAdam on an A100 (513 -> 534 "
    "samples/s, unet-workload.md)",
    "TorchScript": "+2% SYNTHETIC: the tutorial's JIT on an A100 (534 -> 542 FULL, 661 -> "
    "708 SYNTHETIC with apex; unet-workload.md)",
    "torch.compile": "+5% SYNTHETIC, a 60 s cold compile (gpu-ladder.md's time box), one "
    "recompile for the first new batch (PyTorch's automatic dynamic shapes); a graph the "
    "worker compiled before costs nothing again",
    "CUDA graphs": "+2.7% SYNTHETIC: the sim's launch model (2 ms of launches in a 63 ms "
    "step, cut to 0.3 ms by a graph), 2 s capture: gpu-ladder.md",
    "bf16 + channels_last": "bf16 x the fp32 channels_last gain (1.035): no measurement",
    "batch size": "SYNTHETIC per sample x (batch / 64)^0.05; memory fits 141 GB",
    "loaders": "lowmem per worker as measured at 2 (58.8 samples/s), sublinear in workers "
    "as the sim's curve fitted to the tutorial's 2/4/8/16 workers on 32 cores, scaled to 16; "
    "inmem 1.6x lowmem; the GPU-resident loader 8000 samples/s; DALI absent (as on that node)",
    "warm set-up": "2 s to build a probe's model, optimizer and loader in a warm worker (the "
    "spawn's 7.7 s less the interpreter, torch's import and CUDA's context)",
    "noise": "SYNTHETIC's trials repeat as recorded (0.01%); IO and FULL vary as recorded with "
    "the CPU loaders (1.6% a trial, 5.5% a probe), and as SYNTHETIC with the GPU-resident "
    "loader, which takes the CPU workers out of the loop",
    "warm first step": "a configuration new to a warm worker pays its recorded fresh first "
    "step less the floor all rows share (fp16's, 12.6 s: the process's own start); one it "
    "saw before pays nothing",
    "composition": "FULL = (IO^-3 + SYNTHETIC^-3)^(-1/3): 0.99 of min(IO, SYNTHETIC) at "
    "the recorded baseline, 0.79 where the two are equal (the tutorial's 0.77-0.81)",
}

COMPOSITION_P = 3.0
GPU_LOADER_SPS = 8000.0
INMEM_FACTOR = 1.6
WARM_SETUP_S = 2.0
GAINS = {"fused": 1.04, "script": 1.02, "compile": 1.05, "graphs": 1.027}
COMPILE_S = 60.0
SCRIPT_S = 5.0
CAPTURE_S = 2.0


@dataclass(frozen=True)
class Evidence:
    """A recorded GPU's figures, as read from its evidence folder.

    Attributes:
        folder: where they came from.
        gpu: the GPU's name.
        synthetic_sps: SYNTHETIC samples/s at batch 64 by knob row ("baseline",
            "tf32 off", "amp bf16", "amp fp16", "channels_last", ...).
        first_step_s: each row's first step in a fresh process.
        io_sps: the baseline's IO (lowmem, its workers), and `workers` it ran with.
        full_sps: the baseline's FULL probes.
        spawn_s: a fresh probe process's start, to its set-up built.
        syn_trial_noise, full_trial_noise: the trials' relative spread.
        full_probe_noise: FULL's probe-to-probe difference (the baseline's repeats).
    """

    folder: Path
    gpu: str
    synthetic_sps: Mapping[str, float]
    first_step_s: Mapping[str, float]
    io_sps: float
    workers: int
    full_sps: tuple[float, ...]
    spawn_s: float
    syn_trial_noise: float
    full_trial_noise: float
    full_probe_noise: float
    cpus: int = 16
    date: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def overlap(self) -> float:
        """The baseline's FULL over min(IO, SYNTHETIC)."""
        bound = min(self.io_sps, self.synthetic_sps["baseline"])
        return median(list(self.full_sps)) / bound


SESSION_FOLDERS = ("session", "speed/*", "ladder")
"""Where an evidence folder holds a tuneup session, in the order looked at: the first GPU
run's `session/`, the GPU suite's default ladder (`speed/<run>/`) or short ladder."""


def session_folder(folder: Path) -> Path | None:
    """The evidence folder's tuneup session with a journal, where it has one."""
    for pattern in SESSION_FOLDERS:
        for found in sorted(folder.glob(pattern)):
            if (found / "journal.jsonl").is_file():
                return found
    return None


def read_evidence(folder: Path) -> Evidence:
    """The figures of an evidence folder (bench/gpu/EVIDENCE.md: knobs.json and a session).

    Raises:
        UsageError: the folder lacks knobs.json or a session journal with a baseline.
    """
    folder = Path(folder)
    knobs_path = folder / "knobs.json"
    session = session_folder(folder)
    missing = "knobs.json" if not knobs_path.is_file() else "a tuneup session (session/)"
    if not knobs_path.is_file() or session is None:
        raise UsageError(
            f"{folder} is not an evidence folder: {missing} is missing "
            "(bench/gpu/run.sh writes one; bench/gpu/EVIDENCE.md says what it holds)"
        )
    journal_path = session / "journal.jsonl"
    knobs = json.loads(knobs_path.read_text(encoding="utf-8"))
    rows = [r for r in knobs.get("rows", []) if r.get("status") == "pass"]
    synthetic = {r["knob"]: float(r["samples_per_s"]) for r in rows}
    # A fresh process's first step (a row measured after another knob in a shared process
    # paid a warm first step: not this figure).
    first = {
        r["knob"]: float(r["first_step_s"])
        for r in rows
        if r.get("first_step_s") and r.get("process", "fresh") == "fresh"
    }
    spreads = [
        relative_spread(r["ms_per_step_trials"]) for r in rows if r.get("ms_per_step_trials")
    ]
    if "baseline" not in synthetic:
        raise UsageError(f"{knobs_path} has no passing baseline row: nothing to replay")
    baselines = [
        json.loads(line)
        for line in journal_path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line).get("stage") == "baseline"
    ]
    ok = [b for b in baselines if b.get("status") == "ok" and b.get("full_sps")]
    if not ok:
        raise UsageError(f"{journal_path} has no ok baseline probe: nothing to replay")
    full = tuple(float(b["full_sps"]) for b in ok)
    trials = [relative_spread(b["full_sps_trials"]) for b in ok if b.get("full_sps_trials")]
    spawns = [b["one_time_s"]["spawn"] for b in ok if "spawn" in b.get("one_time_s", {})]
    recorded = _json(session / "session.json")
    machine = recorded.get("machine", {}) if isinstance(recorded, dict) else {}
    gpu = (machine.get("gpu_names") or [ok[0].get("device") or "a GPU"])[0]
    pairs = [math.log(b / a) for a, b in itertools.pairwise(full)]
    return Evidence(
        folder=folder,
        gpu=str(gpu),
        synthetic_sps=synthetic,
        first_step_s=first,
        io_sps=float(ok[0]["io_sps"]),
        workers=int(ok[0]["config"].get("num_data_workers", 2)),
        full_sps=full,
        spawn_s=median(spawns) if spawns else 8.0,
        syn_trial_noise=median(spreads) if spreads else 0.001,
        full_trial_noise=median(trials) if trials else 0.02,
        full_probe_noise=abs(pairs[0]) / math.sqrt(2) if pairs else 0.03,
        cpus=int(machine.get("cpus_usable", 16) or 16),
        date=str(knobs.get("date", "")),
    )


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def conv_key(knobs: Mapping[str, Any]) -> tuple[Any, ...]:
    """What cuDNN builds its execution plans for: precision, TF32, layout, batch."""
    return (knobs["amp_mode"], knobs["tf32"], knobs["channels_last"], knobs["global_batch_size"])


@dataclass(frozen=True)
class TwinCosts(SimCosts):
    """The twin's costs: a process start and first steps as recorded (GpuTwin.one_time)."""

    evidence: Evidence | None = None

    def first_step(self, knobs: Mapping[str, Any], fresh: bool) -> float:
        """The first step of a configuration whose cuDNN plans are new (module docstring)."""
        if self.evidence is None:
            return self.first_s
        recorded = self.evidence.first_step_s
        value = recorded.get(knob_row(knobs), recorded.get("baseline", 30.0))
        if fresh:
            return value
        return max(0.0, value - min(recorded.values(), default=0.0))


def knob_row(knobs: Mapping[str, Any]) -> str:
    """The knobs.json row whose cuDNN plans a configuration shares."""
    if knobs["amp_mode"] in ("bf16", "fp16"):
        return f"amp {knobs['amp_mode']}"
    if not knobs["tf32"]:
        return "tf32 off"
    if knobs["channels_last"]:
        return "channels_last"
    return "baseline"


class GpuTwin(SimTrainer):
    """The sim trainer answering as the recorded GPU did (the module docstring)."""

    def __init__(self, evidence: Evidence, seed: int = 0, **kwargs: Any) -> None:
        kwargs.setdefault("cores", evidence.cpus)
        kwargs.setdefault("gpu_memory_gb", 141.0)
        kwargs.setdefault("dali", False)
        kwargs.setdefault(
            "costs",
            TwinCosts(spawn_s=evidence.spawn_s, setup_s=WARM_SETUP_S, evidence=evidence),
        )
        super().__init__(seed=seed, noise=evidence.full_trial_noise, **kwargs)
        self.evidence = evidence
        self._keys_seen: set[tuple[Any, ...]] = set()
        self._new_parts: dict[str, bool] = {}

    def trial_noise(self, phase: str, knobs: dict[str, Any]) -> float:
        if phase == "synthetic" or loader(knobs["data_loader_config"]).on_gpu:
            return self.evidence.syn_trial_noise
        return self.evidence.full_trial_noise

    def probe_noise(self, phase: str, knobs: dict[str, Any]) -> float:
        if phase == "synthetic" or loader(knobs["data_loader_config"]).on_gpu:
            return 0.0
        return self.evidence.full_probe_noise

    def is_new(self, knobs: dict[str, Any], fresh: bool) -> bool:
        """New to the worker: cuDNN plans for its key, a compilation, or a capture it did not
        do before (each priced by `one_time`)."""
        if fresh:
            self._keys_seen = set()
        plans = ("plans", *conv_key(knobs))
        # torch.compile recompiles once for a new batch, then marks the batch dynamic.
        compiled = ("compile", knobs["amp_mode"], knobs["channels_last"], knobs["jit"])
        other_batch = knobs["jit"] == "compile" and knobs["global_batch_size"] != 64
        batch = ("dynamic", knobs["jit"]) if other_batch else None
        capture = ("capture", *conv_key(knobs), knobs["jit"]) if knobs["cuda_graphs"] else None
        parts = {"plans": plans, "compile": compiled, "recompile": batch, "capture": capture}
        self._new_parts = {
            name: key is not None and key not in self._keys_seen for name, key in parts.items()
        }
        self._keys_seen.update(key for key in parts.values() if key is not None)
        return any(self._new_parts.values())

    def one_time(self, knobs: dict[str, Any], fresh: bool, new: bool) -> dict[str, float]:
        """Its start; the first steps of cuDNN plans new to the worker; a compilation (and
        one recompilation for a new batch), a capture, where new (module docstring)."""
        costs = self.costs
        assert isinstance(costs, TwinCosts)
        one_time = {("spawn" if fresh else "setup"): costs.start_s(fresh)}
        parts = self._new_parts
        if parts.get("plans"):
            one_time["first_steps"] = costs.first_step(knobs, fresh)
        if knobs["jit"] == "compile" and (parts.get("compile") or parts.get("recompile")):
            one_time["compile"] = COMPILE_S
        elif knobs["jit"] == "script" and parts.get("compile"):
            one_time["compile"] = SCRIPT_S
        if parts.get("capture"):
            one_time["graph_capture"] = CAPTURE_S
        return one_time

    def expected_sps(self, values: dict[str, Any], ranks: int | None = None) -> dict[str, float]:
        k = self.knobs(values)
        syn = self._twin_synthetic(k)
        io = self._twin_io(k)
        p = COMPOSITION_P
        full = (io**-p + syn**-p) ** (-1.0 / p)
        return {"io": io, "synthetic": syn, "full": full}

    def _twin_synthetic(self, k: dict[str, Any]) -> float:
        rows = self.evidence.synthetic_sps
        base = rows["baseline"]
        rate = rows.get(knob_row(k), base)
        if k["amp_mode"] != "none" and k["channels_last"]:
            rate *= rows.get("channels_last", base) / base
        if k["optimizer_impl"] in ("fused", "apex"):
            rate *= GAINS["fused"]
        if k["jit"] == "script":
            rate *= GAINS["script"]
        elif k["jit"] == "compile":
            rate *= GAINS["compile"]
        if k["cuda_graphs"]:
            rate *= GAINS["graphs"]
        return rate * (k["global_batch_size"] / 64) ** 0.05

    def _twin_io(self, k: dict[str, Any]) -> float:
        kind = k["data_loader_config"]
        if loader(kind).on_gpu:
            return GPU_LOADER_SPS
        per_worker = self.evidence.io_sps / max(1, self.evidence.workers)
        if kind == "inmem":
            per_worker *= INMEM_FACTOR
        workers = max(1, k["num_data_workers"])
        cores = self.rank_cores
        half = 14.2 * math.sqrt(cores / 32)
        return per_worker * workers / (1 + (workers / half) ** 3) * min(1.0, cores / workers)


def twin_from_evidence(folder: Path, seed: int = 0, **kwargs: Any) -> GpuTwin:
    """The twin of the GPU recorded in `folder`."""
    return GpuTwin(read_evidence(folder), seed=seed, **kwargs)
