"""The `sim` trainer: a documented synthetic response surface that answers like a probe.

It lets the search, the journal and the app be exercised in milliseconds, and
it is calibrated on the tutorial's A100 figures (unet-workload.md): the
baseline (2 lowmem workers, fp32 + TF32, batch 64) gives IO ~89, SYNTHETIC
~381 and FULL ~88 samples/s (tutorial: 89, 376, 90); 8 workers FULL ~253; DALI + AMP + fused Adam +
compile + channels_last + batch 128 reaches ~615 (the tutorial's
hand-tuned run: 539).

Response surface for one rank (samples/s; w = num_data_workers, c = the
rank's simulated cores, B = its batch: global batch, or local_batch_size
when set; Ranks below for several):

IO, the loader alone:
    per-worker rate r: lowmem 44.6, inmem 1.6 r, synthetic 4 r.
    w = 0 (loading in the training process): IO = 0.9 r.
    w > 0: IO = r w / (1 + (w / h)^3) * min(1, c / w), h = 14.2 sqrt(c / 32):
        rises, peaks near w = 0.8 h (11 workers on 32 cores) and falls as
        workers fight over the file and the cores (2/4/8/16 workers: 89,
        174, 303, 294 on 32 cores, like the tutorial's 2 -> 4 -> 8 -> 16).
    dali-lowmem: IO = 790 whatever w (GPU decoding; needs CUDA and DALI).

SYNTHETIC, one cached batch: a step takes B / R + O seconds.
    GPU math rate R = 416 * prec * cl * jit * bench * (B / 64)^0.1 where
        prec = 1 (fp32 with TF32), 0.33 (TF32 off), 1.55 (fp16), 1.57 (bf16);
               TF32 off costs only 3% under AMP (the convolutions run in half);
        cl   = channels_last: 1.10 with AMP (tensor-core layout), 0.97 without;
        jit  = script 1.02; compile 1.10 with AMP, 1.04 without;
        bench = 1 with cudnn_benchmark, 0.85 without.
    Per-step overhead O = launches + Adam: launches 2 ms (1.2 ms compiled,
        x 0.15 under CUDA graphs); Adam 12 ms foreach, 2 ms fused or apex.
    CPU device: R = 3.2 (bf16 x1.05, fp16 x0.6, compile x1.08, others ~1),
        O = 0.05 s; TF32, cuDNN benchmark and CUDA graphs do nothing there
        (graphs and DALI are `unsupported`).

FULL, the real loop: loading overlaps compute imperfectly,
    FULL = (IO^-p + SYNTHETIC^-p)^(-1/p), p = 2.5 (p = 1 when w = 0: no
    overlap), so FULL < min(IO, SYNTHETIC), and a compute knob is worth
    little while the loader is the wall (AMP adds ~1% at 2 workers, ~10% at
    8, ~37% with DALI).

Memory (GPU, default 40 GB like the tutorial's A100): 2 GB of weights and
Adam state + B x 0.45 GB of activations (x 0.55 under AMP, x 1.05 with CUDA
graphs' static buffers); more than the GPU holds is `oom`.

Losses (20 recorded steps, from the fixed training seed, not the noise seed):
    L(s) = 0.04 + 0.08 exp(-0.08 P(s)) (1 + jitter), P(s) = sum of
    lr(step) / 2e-4 over the steps so far (batch scaling and warm-up as the
    real schedule); jitter is +-2% from the crops (the same for every probe)
    plus arithmetic noise seeded by the precision knobs: none in plain fp32,
    +-0.3% with TF32, +-1% under AMP. When the peak
    lr exceeds 5e-3 the run is unstable: the loss grows by 30% x (lr / 5e-3)
    per step and turns NaN once above 1e3.

Ranks (world_size N, or a candidate's own `ranks`): one node, every rank
with its own GPU and loader. The per-rank batch b is local_batch_size, else
global_batch_size // N. Each rank's loader has cores / world_size cores (its
share of the allocation, as --cpus-per-task gives it, also when a reference
probe runs on fewer ranks). A rank's step takes b / R + O (SYNTHETIC above,
at batch b) plus its communication C; the job's rates are N times a rank's:
    IO = N IO_rank, SYNTHETIC = N b / (b / R + O + C),
    FULL = N (IO_rank^-p + SYNTHETIC_rank^-p)^(-1/p).

Communication C per step (DDP; 0 with noddp or a single rank):
    gradients G = 117 M parameters x 4 B = 468 MB, all-reduced over a ring
    at a fixed intra-node bandwidth W = 100 GB/s (2 GB/s over gloo when the
    device is the CPU): ring = 2 (N - 1) / N x G / W (7.0 ms on 4 GPUs);
    buckets n = ceil(G / bucket_cap_mb MiB), each costing 80 us of launch
    and synchronisation; DDP overlaps all but the last bucket with the
    backward pass, hiding 80% of their time, so the exposed all-reduce is
        0.2 ring (1 - f) + ring f + 80 us n, f = min(1, bucket / G);
    broadcast_buffers adds 1.8 ms (a broadcast call every step, though the
    model has no buffers); without gradient_as_bucket_view the gradients
    are copied into the buckets, G / 1 TB/s = 0.47 ms.
    On 4 GPUs at local batch 16 (the tutorial's multi-GPU run, compute
    58 ms a step) communication costs ~8% of SYNTHETIC; broadcast_buffers
    off gains ~3% (tutorial: 1272 -> 1315), bucket 100 ~+0.15% (tutorial:
    1315 -> 1316), 50 ~+0.6%, 10 and 200 lose 3% and 1.6%,
    gradient_as_bucket_view ~+0.7%. Without gradient_as_bucket_view the
    buckets also take G of GPU memory.

Stragglers: SimTrainer(straggler=r) makes rank r's step 15% slower; the
ranks wait for it at every all-reduce, so the job's SYNTHETIC and FULL drop
by that much, `rank_sps` shows rank r behind and `stragglers` names it.

Noise: each phase's T trials are the true rate times exp(noise x N(0, 1)),
drawn from a generator seeded by (seed, knob values, ranks when not 1, how
many times this trainer has measured these values), so a run is
reproducible and a repeated measurement (baseline repeats, confirmation
pairs) draws fresh noise.

Disturbances (`Disturbance`), what real machines add on top, all applied to
every phase of the n-th probe this trainer measures (n from 0), from a
generator seeded by (seed, n):
    probe noise: the whole probe x exp(probe_noise x N(0, 1)) (a new process,
        new allocations, another placement: what varies between probes and
        not between a probe's trials);
    drift: x (1 + drift_per_probe)^n (a node warming up, a file cache
        filling, a neighbour's load creeping up);
    step: x step_factor from probe step_at on (another job starts or ends);
    bursts: with probability burst_rate a probe is hit by a contention burst,
        x burst_factor, and (when burst_detected) its result carries a
        `contention` note as the host-load watch would write it.

Extra knobs (`effects`): a knob named there multiplies every rate by
(1 + effect) when set truthy; an effect of 0 is a knob with no real effect.
The repeatability benchmark (bench/repeatability.py) measures false
adoptions and detection rates with them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from tuneup.config import TrainConfig, loader, process_kind
from tuneup.hardware.types import MachineInfo
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.estimate import ProbeCosts, probe_seconds
from tuneup.probe.plan import MeasurementPlan, plan_for
from tuneup.probe.stats import clearly_slower, early_stop_reason, iqr_pct, median
from tuneup.probe.types import Budget, Candidate, Contention, ProbeResult, Status
from tuneup.trainer.schedule import initial_lr
from tuneup.tuning.search_records import StagePlan

MODELED_KNOBS: tuple[str, ...] = (
    "device",
    "num_data_workers",
    "data_loader_config",
    "amp_mode",
    "tf32",
    "optimizer_impl",
    "jit",
    "compile_mode",
    "cuda_graphs",
    "channels_last",
    "cudnn_benchmark",
    "global_batch_size",
    "local_batch_size",
    "base_batch_size",
    "lr_schedule",
)
DDP_KNOBS = ("bucket_cap_mb", "broadcast_buffers", "gradient_as_bucket_view", "noddp")
MODELED_KNOBS += DDP_KNOBS
LOWMEM_RATE = 44.6
# The simulated speed of a loader against lowmem's, where it differs (a loader it does not
# name runs as lowmem): the simulator's model, not a list of loaders.
LOADER_FACTOR = {"inmem": 1.6, "synthetic": 4.0}
DALI_IO = 790.0
GPU_RATE = 416.0
CPU_RATE = 3.2
LOSS_STEPS = 20
DEFAULT_LR = 2e-4
UNSTABLE_LR = 5e-3

# The communication model (module docstring, Communication).
GRADIENT_BYTES = 117e6 * 4
RING_BANDWIDTH = 100e9  # B/s between the GPUs of one node
GLOO_BANDWIDTH = 2e9  # B/s between CPU ranks
BUCKET_LATENCY_S = 80e-6
OVERLAP = 0.8  # share of the all-reduce of all buckets but the last hidden behind backward
BROADCAST_S = 1.8e-3
COPY_BANDWIDTH = 1e12  # B/s of the gradient-to-bucket copy
STRAGGLER_SLOWDOWN = 0.15


@dataclass(frozen=True)
class Disturbance:
    """What a real machine adds to the trial noise (module docstring, Disturbances)."""

    probe_noise: float = 0.0
    drift_per_probe: float = 0.0
    step_at: int | None = None
    step_factor: float = 1.0
    burst_rate: float = 0.0
    burst_factor: float = 0.5
    burst_detected: bool = True

    def factor(self, seed: int, n: int) -> tuple[float, bool]:
        """The n-th probe's speed factor, and whether a contention burst hit it."""
        rng = random.Random(_digest(f"disturbance|{seed}|{n}"))
        factor = math.exp(self.probe_noise * rng.gauss(0.0, 1.0))
        factor *= (1.0 + self.drift_per_probe) ** n
        if self.step_at is not None and n >= self.step_at:
            factor *= self.step_factor
        burst = rng.random() < self.burst_rate
        if burst:
            factor *= self.burst_factor
        return factor, burst


@dataclass(frozen=True)
class SimCosts:
    """What a simulated probe's parts take, in seconds (module docstring, Time): priced by
    the estimate's own model (tuneup.probe.estimate.probe_seconds).

    Attributes:
        spawn_s: a fresh worker process, to its set-up built.
        setup_s: a probe's set-up in a warm worker.
        first_s: the first steps of a configuration whose kernels are new to the process.
    """

    spawn_s: float = 30.0
    setup_s: float = 3.0
    first_s: float = 5.0

    def start_s(self, fresh: bool) -> float:
        return self.spawn_s if fresh else self.setup_s

    def one_time(self, knobs: dict[str, Any], fresh: bool, new: bool) -> dict[str, float]:
        """The probe's one-time costs: its start, and where its kernels are new, their first
        steps with what the knobs add (loader workers, DALI's pipeline, compilation, capture)."""
        costs = {("spawn" if fresh else "setup"): self.start_s(fresh)}
        if fresh or new:
            costs["first_steps"] = self.first_s
            costs.update(_one_time(knobs))
        return costs

    def probe_costs(
        self, step_s: dict[str, float], trials: dict[str, float], first_s: float
    ) -> ProbeCosts:
        """One probe's costs in the estimate's terms: a fresh start runs to its first step
        done, a warm one pays its first steps where they are new (`first_s`)."""
        return ProbeCosts(self.spawn_s + first_s, self.setup_s, first_s, step_s, trials)


def _one_time(k: dict[str, Any]) -> dict[str, float]:
    costs = {"worker_spawn": 0.5 * k["num_data_workers"]}
    if loader(k["data_loader_config"]).dali:
        costs["dali_build"] = 30.0
    if k["jit"] == "compile":
        costs["compile"] = 60.0
    elif k["jit"] == "script":
        costs["compile"] = 5.0
    if k["cuda_graphs"]:
        costs["graph_capture"] = 4.0
    return costs


def _defaults() -> dict[str, Any]:
    return {name: getattr(TrainConfig(), name) for name in MODELED_KNOBS}


_DEFAULTS = _defaults()


def buckets(bucket_cap_mb: float) -> int:
    """Gradient buckets DDP all-reduces each step: one NCCL call each."""
    return math.ceil(GRADIENT_BYTES / (bucket_cap_mb * 2**20))


class SimTrainer(ProbeBackend):
    """A fake trainer whose throughput follows the response surface in this module's docstring.

    Args:
        seed: seeds the measurement noise (the surface itself is fixed).
        noise: relative standard deviation of one trial (0.03: 3%).
        trials: the most trials a phase takes (when `budget` is not given).
        budget: the probe budget, as a session gives it (its trials, trial length and
            warm-up price the probes; `plan_for` decides what each measures).
        costs: what a probe's start, set-up and first steps take (SimCosts).
        cores: CPU cores of the node, shared by its ranks' loader workers.
        gpu_memory_gb: memory of the simulated GPU (0 or cuda=False: no GPU).
        cuda: whether the simulated machine has a GPU.
        dali: whether DALI is installed.
        apex: whether NVIDIA apex is importable.
        world_size: the ranks a probe runs with unless its candidate sets its own.
        straggler: a rank whose steps are 15% slower (None: all ranks alike).
        disturbance: probe noise, drift, a step change and contention bursts.
        effects: extra knobs and their relative effect on every rate.
    """

    def __init__(
        self,
        seed: int = 0,
        noise: float = 0.03,
        *,
        trials: int = 5,
        cores: int = 32,
        gpu_memory_gb: float = 40.0,
        cuda: bool = True,
        dali: bool = True,
        apex: bool = False,
        world_size: int = 1,
        straggler: int | None = None,
        disturbance: Disturbance | None = None,
        effects: dict[str, float] | None = None,
        budget: Budget | None = None,
        costs: SimCosts | None = None,
    ) -> None:
        if noise < 0 or trials < 1 or cores < 1 or world_size < 1:
            raise ValueError("noise must be >= 0, trials, cores and world_size >= 1")
        self.seed = seed
        self.noise = noise
        self.budget = budget or Budget(max_trials=trials, min_trials=min(2, trials))
        self.costs = costs or SimCosts()
        self.cores = cores
        self.gpu_memory_gb = gpu_memory_gb
        self.cuda = cuda
        self.dali = dali
        self.apex = apex
        self.world_size = world_size
        self.straggler = straggler
        self.disturbance = disturbance or Disturbance()
        self.effects = dict(effects or {})
        self.calls = 0
        self.measured = 0  # probes that ran (the disturbances' clock)
        self._repeats: dict[str, int] = {}
        self._started = False  # a (simulated) worker process is running
        self._kind = ""  # the process kind it runs (config.process_kind)
        self._warm: set[str] | None = None  # the configurations it ran
        self._served = 0

    @property
    def rank_cores(self) -> int:
        """Cores each rank's loader has: its share of the node."""
        return max(1, self.cores // self.world_size)

    def knobs(self, values: dict[str, Any]) -> dict[str, Any]:
        """The modeled knobs of `values`, defaults filled in from TrainConfig."""
        knobs = {**_DEFAULTS, **{k: v for k, v in values.items() if k in _DEFAULTS}}
        knobs["lr_schedule"] = {**_DEFAULTS["lr_schedule"], **dict(knobs["lr_schedule"])}
        return knobs

    def problem(
        self, values: dict[str, Any], ranks: int | None = None
    ) -> tuple[Status, str] | None:
        """Why these values cannot run here (`unsupported` or `oom`), or None."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        gpu = self._on_gpu(k)
        if k["device"] == "cuda" and not self.cuda:
            return Status.UNSUPPORTED, "device=cuda but the simulated machine has no GPU"
        if k["local_batch_size"] is None and k["global_batch_size"] < ranks:
            return Status.UNSUPPORTED, (
                f"global_batch_size {k['global_batch_size']} is smaller than the {ranks} ranks"
            )
        if k["cuda_graphs"] and not gpu:
            return Status.UNSUPPORTED, "cuda_graphs needs a CUDA device"
        if loader(k["data_loader_config"]).dali and not (gpu and self.dali):
            return Status.UNSUPPORTED, "a DALI loader needs a CUDA device and DALI installed"
        if k["optimizer_impl"] == "apex" and not (gpu and self.apex):
            return Status.UNSUPPORTED, "optimizer_impl=apex needs NVIDIA apex and a GPU"
        if k["cuda_graphs"] and k["amp_mode"] == "fp16":
            return Status.UNSUPPORTED, "cuda_graphs cannot capture the fp16 GradScaler's checks"
        if k["cuda_graphs"] and k["jit"] == "compile" and k["compile_mode"] == "reduce-overhead":
            return Status.UNSUPPORTED, "cuda_graphs and compile_mode=reduce-overhead both capture"
        if gpu and self.memory_gb(values, ranks) > self.gpu_memory_gb:
            need = self.memory_gb(values, ranks)
            return Status.OOM, f"needs {need:.0f} GB of the GPU's {self.gpu_memory_gb:.0f} GB"
        return None

    def memory_gb(self, values: dict[str, Any], ranks: int | None = None) -> float:
        """Peak GPU memory of one rank's step (see Memory and Communication in the docstring)."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        per_sample = 0.45 * (0.55 if k["amp_mode"] != "none" else 1.0)
        per_sample *= 1.05 if k["cuda_graphs"] else 1.0
        buckets_gb = 0.0
        if _exchanges(k, ranks) and not k["gradient_as_bucket_view"]:
            buckets_gb = GRADIENT_BYTES / 1e9
        return 2.0 + _batch(k, ranks) * per_sample + buckets_gb

    def communication_s(self, values: dict[str, Any], ranks: int | None = None) -> float:
        """Seconds of a rank's step spent on gradient exchange (Communication in the docstring)."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        if not _exchanges(k, ranks):
            return 0.0
        bandwidth = RING_BANDWIDTH if self._on_gpu(k) else GLOO_BANDWIDTH
        ring = 2 * (ranks - 1) / ranks * GRADIENT_BYTES / bandwidth
        last = min(1.0, k["bucket_cap_mb"] * 2**20 / GRADIENT_BYTES)
        exposed = (1 - OVERLAP) * ring * (1 - last) + ring * last
        exposed += BUCKET_LATENCY_S * buckets(k["bucket_cap_mb"])
        broadcast = BROADCAST_S if k["broadcast_buffers"] else 0.0
        copy = 0.0 if k["gradient_as_bucket_view"] else GRADIENT_BYTES / COPY_BANDWIDTH
        return exposed + broadcast + copy

    def expected_sps(self, values: dict[str, Any], ranks: int | None = None) -> dict[str, float]:
        """Noise-free IO, SYNTHETIC and FULL samples/s of the job (the surface itself)."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        batch = _batch(k, ranks)
        io = self._io(k)
        step = batch / self._synthetic(k, batch) + self.communication_s(values, ranks)
        if self.straggler is not None and self.straggler < ranks:
            step *= 1 + STRAGGLER_SLOWDOWN  # every rank waits for the slowest
        syn = batch / step
        dali = loader(k["data_loader_config"]).dali
        p = 1.0 if k["num_data_workers"] == 0 and not dali else 2.5
        full = (io**-p + syn**-p) ** (-1.0 / p)
        gain = 1.0
        for knob, effect in self.effects.items():
            if values.get(knob):
                gain *= 1.0 + effect
        return {
            "io": ranks * io * gain,
            "synthetic": ranks * syn * gain,
            "full": ranks * full * gain,
        }

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        return self.measure(stage, candidate, values)

    def replayed(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> None:
        """A resumed session took this probe from its journal: draw as if it had run here.

        The noise of a probe depends on how often its values were measured
        before, so without this a resumed session would draw other noise than
        the uninterrupted one and could decide otherwise.
        """
        ranks = candidate.ranks or self.world_size
        if self.problem(values, ranks) is not None:
            return
        key = _noise_key(self.knobs(values), ranks) + _effects_key(self.effects, values)
        self._repeats[key] = self._repeats.get(key, 0) + 1
        self.measured += 1

    def measure(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        """Answer like a real probe (a `Measure` for the search), by the probe's plan."""
        self.calls += 1
        ranks = candidate.ranks or self.world_size
        k = self.knobs(values)
        variant = dict(candidate.values)
        problem = self.problem(values, ranks)
        if problem is not None:
            status, reason = problem
            self._process_ended()
            return ProbeResult(
                stage, variant, dict(values), status, f"simulated: {reason}", ranks=ranks
            )
        plan = plan_for(self.budget, candidate)
        key = _noise_key(k, ranks) + _effects_key(self.effects, values)
        repeat = self._repeats.get(key, 0)
        self._repeats[key] = repeat + 1
        sps = self.expected_sps(values, ranks)
        factor, burst = self.disturbance.factor(self.seed, self.measured)
        self.measured += 1
        trials, stopped = self._draw(plan, sps, factor, f"{self.seed}|{repeat}|{key}", k)
        contention = None
        if burst and self.disturbance.burst_detected:
            share = 1.0 - self.disturbance.burst_factor
            contention = Contention(
                other_cpus=share * self.cores,
                usable_cpus=self.cores,
                note=f"simulated: other processes used {100 * share:.0f}% of the CPUs",
            )
        losses = self.losses(values, ranks) if plan.loss_steps else []
        fresh, new = self._process_for(k)
        one_time = self.one_time(k, fresh, new)
        costs = self.costs.probe_costs(
            {p: _batch(k, ranks) * ranks / max(r, 1e-9) for p, r in sps.items()},
            {p: float(len(t)) for p, t in trials.items()},
            first_s=sum(v for n, v in one_time.items() if n not in ("spawn", "setup")),
        )
        wall = probe_seconds(
            dataclasses.replace(plan, phases=tuple(trials)), costs, fresh=fresh, new=new
        )
        timed = sum(len(t) * max(plan.trial_s, costs.step(p)) for p, t in trials.items())
        full = median(trials["full"]) if trials.get("full") else None
        rank_sps, stragglers = self._ranks(full, ranks) if full is not None else ([], [])
        return ProbeResult(
            stage=stage,
            variant=variant,
            config=dict(values),
            status=Status.OK,
            io_sps=median(trials["io"]) if trials.get("io") else None,
            synthetic_sps=median(trials["synthetic"]) if trials.get("synthetic") else None,
            full_sps=full,
            full_sps_trials=trials.get("full", []),
            io_sps_trials=trials.get("io", []),
            synthetic_sps_trials=trials.get("synthetic", []),
            iqr_pct=iqr_pct(trials["full"]) if trials.get("full") else None,
            warmup_s=max(0.0, wall - timed),
            timed_s=timed,
            one_time_s=one_time,
            loss_start=losses[0] if losses else None,
            loss_end=losses[-1] if losses else None,
            losses=losses,
            gpu_util_mean=100.0 * sps["full"] / sps["synthetic"] if self._on_gpu(k) else None,
            mem_peak_mb=1024.0 * self.memory_gb(values, ranks) if self._on_gpu(k) else None,
            wall_s=wall,
            ranks=ranks,
            rank_sps=rank_sps,
            stragglers=stragglers,
            contention=contention,
            stopped_early=stopped,
            served_before=0 if fresh else self._served,
            plan={**plan.to_dict(), "steps": {p: plan.trial_steps(costs.step(p)) for p in trials}},
        )

    def _draw(
        self,
        plan: MeasurementPlan,
        sps: dict[str, float],
        factor: float,
        seed: str,
        knobs: dict[str, Any],
    ) -> tuple[dict[str, list[float]], str]:
        """Each planned phase's trials, drawn until the plan has enough (the worker's rule),
        its judged phase cut short where the worker would stop it early."""
        trials: dict[str, list[float]] = {}
        for phase in plan.phases:
            rng = random.Random(_digest(f"{seed}|{phase}"))
            noise = self.trial_noise(phase, knobs)
            jitter = self.probe_noise(phase, knobs)
            rate = sps[phase] * factor * math.exp(jitter * rng.gauss(0.0, 1.0))
            drawn: list[float] = []
            while not plan.enough_trials(drawn):
                drawn.append(rate * math.exp(noise * rng.gauss(0.0, 1.0)))
                judged = phase == plan.judged
                if judged and clearly_slower(drawn, plan.stop_below_sps):
                    assert plan.stop_below_sps is not None
                    trials[phase] = drawn
                    left = [p for p in plan.phases if p not in trials]
                    return trials, early_stop_reason(drawn, phase, plan.stop_below_sps, left)
            trials[phase] = drawn
        return trials, ""

    def one_time(self, knobs: dict[str, Any], fresh: bool, new: bool) -> dict[str, float]:
        """The probe's one-time costs (SimCosts.one_time)."""
        return self.costs.one_time(knobs, fresh, new)

    def trial_noise(self, phase: str, knobs: dict[str, Any]) -> float:
        """One trial's relative noise in `phase` (the same in every phase here)."""
        return self.noise

    def probe_noise(self, phase: str, knobs: dict[str, Any]) -> float:
        """A probe's own noise in `phase`, on top of its trials' (none here: Disturbance's
        probe_noise moves every phase alike)."""
        return 0.0

    def is_new(self, knobs: dict[str, Any], fresh: bool) -> bool:
        """Whether a configuration's kernels are new to the (simulated) worker: here, any
        configuration it did not run before."""
        if fresh or self._warm is None:
            self._warm = set()
        key = json.dumps(knobs, sort_keys=True, default=str)
        new = key not in self._warm
        self._warm.add(key)
        return new

    def _process_for(self, knobs: dict[str, Any]) -> tuple[bool, bool]:
        """Whether this probe starts the (simulated) process, and whether its kernels are new
        there: as the runner does, a worker serves the probes of its process kind
        (config.process_kind: cuDNN benchmarking, say) and another kind starts a new one."""
        kind = json.dumps(process_kind(knobs), sort_keys=True, default=str)
        fresh = not self._started or kind != self._kind
        self._started, self._kind = True, kind
        self._served = 0 if fresh else self._served + 1
        return fresh, self.is_new(knobs, fresh)

    def _process_ended(self) -> None:
        """A probe failed: the runner ends its process, the next starts a fresh one."""
        self._started = False

    def losses(self, values: dict[str, Any], ranks: int | None = None) -> list[float]:
        """The fixed-seed loss curve (see Losses in the module docstring)."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        sched = k["lr_schedule"]
        batch = _batch(k, ranks) * ranks  # the global batch sets the learning rate
        base = k["base_batch_size"]
        peak = initial_lr(sched["start_lr"], sched["scaling"], batch, base)
        warmup = sched["warmup_steps"] if batch > base and sched["scaling"] != "none" else 0
        wobble = 0.01 if k["amp_mode"] != "none" else (0.003 if k["tf32"] else 0.0)
        arith = random.Random(_digest(f"{k['amp_mode']}|{k['tf32']}|{k['jit']}"))
        crops = random.Random(1234)  # the fixed training seed: same crops for every probe
        losses: list[float] = []
        progress = 0.0
        value = 0.12
        for step in range(1, LOSS_STEPS + 1):
            lr = peak * min(1.0, step / warmup) if warmup else peak
            progress += lr / DEFAULT_LR
            jitter = 0.02 * crops.uniform(-1, 1) + wobble * arith.uniform(-1, 1)
            if peak > UNSTABLE_LR:
                value = value * (1.0 + 0.3 * peak / UNSTABLE_LR)
                losses.append(value if value < 1e3 else math.nan)
            else:
                value = 0.04 + 0.08 * math.exp(-0.08 * progress)
                losses.append(value * (1.0 + jitter))
        return losses

    def _ranks(self, full: float, ranks: int) -> tuple[list[float], list[int]]:
        """Each rank's own FULL samples/s and the stragglers, from the job's FULL."""
        if ranks == 1:
            return [full], []
        own = [full / ranks] * ranks
        if self.straggler is None or self.straggler >= ranks:
            return own, []
        # The job runs at the straggler's pace; the others would go faster on their own.
        fast = full / ranks * (1 + STRAGGLER_SLOWDOWN)
        return [own[0] if r == self.straggler else fast for r in range(ranks)], [self.straggler]

    def _on_gpu(self, k: dict[str, Any]) -> bool:
        return self.cuda and k["device"] in ("auto", "cuda")

    def _io(self, k: dict[str, Any]) -> float:
        kind = k["data_loader_config"]
        if loader(kind).dali:
            return DALI_IO
        rate = LOWMEM_RATE * LOADER_FACTOR.get(kind, 1.0)
        workers = k["num_data_workers"]
        if workers == 0:
            return 0.9 * rate
        cores = self.rank_cores
        half = 14.2 * math.sqrt(cores / 32)
        return rate * workers / (1 + (workers / half) ** 3) * min(1.0, cores / workers)

    def _synthetic(self, k: dict[str, Any], batch: int) -> float:
        """One rank's SYNTHETIC samples/s at `batch`, before any communication."""
        amp = k["amp_mode"] != "none"
        if not self._on_gpu(k):
            prec = {"none": 1.0, "bf16": 1.05, "fp16": 0.6}[k["amp_mode"]]
            jit = 1.08 if k["jit"] == "compile" else 1.0
            return batch / (batch / (CPU_RATE * prec * jit) + 0.05)
        prec = {"none": 1.0, "fp16": 1.55, "bf16": 1.57}[k["amp_mode"]]
        if not k["tf32"]:
            prec *= 0.97 if amp else 0.33
        cl = (1.10 if amp else 0.97) if k["channels_last"] else 1.0
        jit = {"none": 1.0, "script": 1.02, "compile": 1.10 if amp else 1.04}[k["jit"]]
        bench = 1.0 if k["cudnn_benchmark"] else 0.85
        rate = GPU_RATE * prec * cl * jit * bench * (batch / 64) ** 0.1
        launches = 0.0012 if k["jit"] == "compile" else 0.002
        launches *= 0.15 if k["cuda_graphs"] else 1.0
        adam = 0.012 if k["optimizer_impl"] == "foreach" else 0.002
        return batch / (batch / rate + launches + adam)


def _batch(k: dict[str, Any], ranks: int = 1) -> int:
    """The per-rank batch: local_batch_size, else the global batch shared out."""
    local = k.get("local_batch_size")
    return int(local) if local else max(1, int(k["global_batch_size"]) // ranks)


def _exchanges(k: dict[str, Any], ranks: int) -> bool:
    """Whether the ranks all-reduce gradients (DDP on, several ranks)."""
    return ranks > 1 and not k["noddp"]


def _noise_key(k: dict[str, Any], ranks: int) -> str:
    """What seeds a probe's noise: its knobs, and its ranks and DDP knobs when several.

    On one rank the DDP knobs change nothing, and leaving them out keeps
    single-rank draws what they were before the sim knew about ranks.
    """
    if ranks == 1:
        single = {name: v for name, v in k.items() if name not in DDP_KNOBS}
        return json.dumps(single, sort_keys=True, default=str)
    return json.dumps(k, sort_keys=True, default=str) + f"|ranks={ranks}"


def _effects_key(effects: dict[str, float], values: dict[str, Any]) -> str:
    """The extra knobs' part of the noise key (empty without any, keeping old draws)."""
    if not effects:
        return ""
    return "|" + json.dumps({k: values.get(k) for k in sorted(effects)}, default=str)


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def sim_stage_plans(machine: MachineInfo) -> list[StagePlan]:
    """A tutorial-like ladder of stages for tests and demos (the real stages are plugins)."""
    no_gpu = None if machine.cuda else "needs a CUDA GPU"
    workers = [
        Candidate(f"workers={w}", {"num_data_workers": w})
        for w in (4, 8, 16, 32)
        if w <= max(machine.cpus_usable, 4)
    ]
    loaders = [Candidate("loader=inmem", {"data_loader_config": "inmem"})]
    if machine.cuda and machine.dali:
        loaders.append(Candidate("loader=dali-lowmem", {"data_loader_config": "dali-lowmem"}))
    optimizers = [Candidate("optimizer=fused", {"optimizer_impl": "fused"})]
    if machine.cuda and machine.apex:
        optimizers.append(Candidate("optimizer=apex", {"optimizer_impl": "apex"}))
    # Judged as the built-in stages are (plugins/stages.py): the loader on IO, the model's
    # arithmetic on SYNTHETIC, the batch on FULL.
    io, syn = "io", "synthetic"
    return [
        StagePlan("workers", workers, judged=io),
        StagePlan("loader", loaders, judged=io),
        StagePlan("tf32", [Candidate("tf32=off", {"tf32": False})], no_gpu, judged=syn),
        StagePlan(
            "amp",
            [
                Candidate("amp=fp16", {"amp_mode": "fp16"}),
                Candidate("amp=bf16", {"amp_mode": "bf16"}),
            ],
            judged=syn,
        ),
        StagePlan("optimizer", optimizers, judged=syn),
        StagePlan(
            "jit",
            [
                Candidate("jit=script", {"jit": "script"}),
                Candidate("jit=compile", {"jit": "compile"}),
            ],
            judged=syn,
        ),
        StagePlan(
            "cuda_graphs", [Candidate("cuda_graphs=on", {"cuda_graphs": True})], no_gpu, judged=syn
        ),
        StagePlan(
            "channels_last", [Candidate("channels_last=on", {"channels_last": True})], judged=syn
        ),
        StagePlan(
            "batch_size",
            [
                Candidate("batch=128", {"global_batch_size": 128}),
                Candidate("batch=256", {"global_batch_size": 256}),
            ],
        ),
    ]


def sim_backend(seed: int, noise: float = 0.03) -> SimTrainer:
    """The documented synthetic response surface as a one-rank backend: answers in milliseconds."""
    return SimTrainer(seed=seed, noise=noise)
