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

The model's figures and noise-free rules are in sim_surface, a probe's costs and the
disturbances in sim_costs, the demo ladder in sim_ladder; this module draws the probes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from typing import Any

from tuneup.config import loader_round, process_kind
from tuneup.costs.estimate import ProbeCosts, probe_seconds
from tuneup.costs.one_time import conv_key, kernels_new
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.figures import ProbeFigures
from tuneup.probe.plan import MeasurementPlan, plan_for
from tuneup.probe.stats import clearly_slower, early_stop_reason, iqr_pct, median
from tuneup.probe.types import Candidate, Contention, ProbeBudget, ProbeResult, Status

from .sim_costs import Disturbance, SimCosts
from .sim_ladder import sim_stage_plans
from .sim_surface import DDP_KNOBS, STRAGGLER_SLOWDOWN, SimSurface, _batch, _digest

__all__ = [
    "Disturbance",
    "SimCosts",
    "SimSurface",
    "SimTrainer",
    "sim_backend",
    "sim_stage_plans",
]


class SimTrainer(SimSurface, ProbeBackend):
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
        budget: ProbeBudget | None = None,
        costs: SimCosts | None = None,
    ) -> None:
        if noise < 0 or trials < 1 or cores < 1 or world_size < 1:
            raise ValueError("noise must be >= 0, trials, cores and world_size >= 1")
        self.seed = seed
        self.noise = noise
        self.budget = budget or ProbeBudget(max_trials=trials, min_trials=min(2, trials))
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
        self._warm: set[tuple[Any, ...]] | None = None  # the conv keys it ran
        self._served = 0

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
            spent = self.failed_costs(k)  # its start and first step: a failure shows there
            served = self._served  # as the runner reports the worker's count
            if not self.serves_on_after_failure(values):
                self._process_ended()
            said = f"simulated: {reason}"
            return ProbeResult(
                stage, variant, dict(values), status, said, ranks=ranks, one_time_s=spent,
                wall_s=sum(spent.values()), served_before=served,
            )  # fmt: skip
        plan = self.plan_of(candidate, k)
        key = _noise_key(k, ranks) + _effects_key(self.effects, values)
        repeat = self._repeats.get(key, 0)
        self._repeats[key] = repeat + 1
        sps = self.expected_sps(values, ranks)
        factor, burst = self.disturbance.factor(self.seed, self.measured)
        self.measured += 1
        trials, stopped = self._draw(plan, sps, factor, f"{self.seed}|{repeat}|{key}", k)
        contention = self._burst() if burst and self.disturbance.burst_detected else None
        losses = self.losses(values, ranks) if plan.loss_steps else []
        fresh, new = self._process_for(k)
        one_time = self.one_time(k, fresh, new)
        costs = self.costs.probe_costs(
            {p: _batch(k, ranks) * ranks / max(r, 1e-9) for p, r in sps.items()},
            {p: float(len(t)) for p, t in trials.items()},
            first_s=sum(v for n, v in one_time.items() if n not in ("spawn", "setup")),
        )
        costs = self.probe_costs_for(costs, k)
        wall = probe_seconds(
            dataclasses.replace(plan, phases=tuple(trials)), costs, fresh=fresh, new=new
        )
        timed = sum(len(t) * plan.trial_seconds(costs.step(p), p) for p, t in trials.items())
        full = median(trials["full"]) if trials.get("full") else None
        rank_sps, stragglers = self._ranks(full, ranks) if full is not None else ([], [])
        figures = ProbeFigures(  # what the worker would have measured, as it declares it
            io_sps=median(trials["io"]) if trials.get("io") else None,
            synthetic_sps=median(trials["synthetic"]) if trials.get("synthetic") else None,
            full_sps=full,
            full_sps_trials=tuple(trials.get("full", [])),
            io_sps_trials=tuple(trials.get("io", [])),
            synthetic_sps_trials=tuple(trials.get("synthetic", [])),
            iqr_pct=iqr_pct(trials["full"]) if trials.get("full") else None,
            warmup_s=max(0.0, wall - timed),
            timed_s=timed,
            one_time_s=one_time,
            loss_start=losses[0] if losses else None,
            loss_end=losses[-1] if losses else None,
            losses=tuple(losses),
            mem_peak_mb=1024.0 * self.memory_gb(values, ranks) if self._on_gpu(k) else None,
            ranks=ranks,
            rank_sps=tuple(rank_sps),
            stragglers=tuple(stragglers),
            stopped_early=stopped,
            plan={
                **plan.to_dict(),
                "steps": {p: plan.trial_steps(costs.step(p), p) for p in trials},
            },
        )
        return ProbeResult(
            stage,
            variant,
            dict(values),
            Status.OK,
            gpu_util_mean=100.0 * sps["full"] / sps["synthetic"] if self._on_gpu(k) else None,
            wall_s=wall,
            contention=contention,
            served_before=0 if fresh else self._served,
            **figures.journal_figures(),
        )

    def prior_costs(self, values: dict[str, Any]) -> ProbeCosts:
        """What its probes of `values` cost, in its simulated seconds, before any has run: the
        steps, start and first steps `measure` prices; as many trials as its noise takes
        (the budget's most where trials vary by more than the budget's trial_noise)."""
        ranks = self.world_size
        k = self.knobs(values)
        sps = self.expected_sps(values, ranks)
        steps = {p: _batch(k, ranks) * ranks / max(r, 1e-9) for p, r in sps.items()}
        once = self.one_time(k, fresh=True, new=True)
        first = sum(v for n, v in once.items() if n not in ("spawn", "setup"))
        noisy = self.noise > self.budget.trial_noise
        count = float(self.budget.max_trials if noisy else self.budget.min_trials)
        costs = self.costs.probe_costs(steps, {p: count for p in sps}, first_s=first)
        return dataclasses.replace(self.probe_costs_for(costs, k), loader_round=_round_of(k))

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

    def failed_costs(self, knobs: dict[str, Any]) -> dict[str, float]:
        """What a probe that fails costs before it fails: its process's start (or set-up)
        and its first step, where failures show (an out-of-memory, an unsupported knob)."""
        fresh, new = self._process_for(knobs)
        return self.one_time(knobs, fresh, new)

    def _burst(self) -> Contention:
        """What the tuneup side saw of a simulated burst of other processes."""
        share = 1.0 - self.disturbance.burst_factor
        return Contention(
            other_cpus=share * self.cores,
            usable_cpus=self.cores,
            note=f"simulated: other processes used {100 * share:.0f}% of the CPUs",
        )

    def plan_of(self, candidate: Candidate, knobs: dict[str, Any]) -> MeasurementPlan:
        """The plan the worker would measure `candidate` by, its loader round included."""
        return dataclasses.replace(plan_for(self.budget, candidate), loader_round=_round_of(knobs))

    def probe_costs_for(self, costs: ProbeCosts, knobs: dict[str, Any]) -> ProbeCosts:
        """A probe's costs with what the knobs add to the model's (the twin's warm-ups that
        do not settle); as they are here."""
        return costs

    def trial_noise(self, phase: str, knobs: dict[str, Any]) -> float:
        """One trial's relative noise in `phase` (the same in every phase here)."""
        return self.noise

    def probe_noise(self, phase: str, knobs: dict[str, Any]) -> float:
        """A probe's own noise in `phase`, on top of its trials' (none here: Disturbance's
        probe_noise moves every phase alike)."""
        return 0.0

    def is_new(self, knobs: dict[str, Any], fresh: bool) -> bool:
        """Whether a configuration's kernels are new to the (simulated) worker, as the clock
        counts them: a conv key it did not run before, or a compile, a script or a capture,
        which every probe pays (one_time.kernels_new); its optimizer or its loader alone
        are not."""
        if fresh or self._warm is None:
            self._warm = set()
        new = kernels_new(knobs, self._warm)
        self._warm.add(conv_key(knobs))
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

    def serves_on_after_failure(self, values: dict[str, Any]) -> bool:
        """Whether the worker survives this probe's failure (none does here)."""
        return False

    def _process_ended(self) -> None:
        """A probe failed: the runner ends its process, the next starts a fresh one."""
        self._started = False

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


def sim_backend(seed: int, noise: float = 0.03) -> SimTrainer:
    """The documented synthetic response surface as a one-rank backend: answers in milliseconds."""
    return SimTrainer(seed=seed, noise=noise)


def _round_of(knobs: dict[str, Any]) -> int:
    """The loader round the worker would read off these knobs (tuneup.config.loader_round)."""
    return loader_round(knobs["data_loader_config"], knobs["num_data_workers"])
