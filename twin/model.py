"""The twin: the `sim` trainer replaying a recorded machine's rates and costs.

Work on the ladder happens on CPU machines far more often than on a GPU, and
the GPU's costs are not the CPU's (a fresh process's first step took 13-56 s on
an H200; starting a process costs 2 s on a 2-core CPU). The twin answers each
probe as the recorded machine did, from an evidence folder (bench/gpu/EVIDENCE.md
says what one holds; evidence.py reads it), so the ladder's plan, probe count
and wall time can be predicted on any machine (bench/gpu_twin.py).

Its one-time costs are the worker's own cost model (tuneup.costs.one_time):
a process start, the set-up, the first step by what is new to the process (a
conv key, a compile cold or from the disk caches, a script, a capture), a
warm-up that may not settle, a failed probe's start and first step. Each
figure is measured where the evidence has it and assumed otherwise, and the
twin is run at the figures' low, likely or high end (`end`).

Its rates come from one of two sources:

* a gathered table (`bench/gpu_twin.py --gather`): every stage's candidates
  measured once on the baseline, every phase; a configuration's rate is the
  baseline's times each of its changes' measured ratio, phase by phase, and
  its noise is what the gather's trials and the baseline's repeats showed;
* a GPU run's knobs.json and baseline probes (the first H200 run): SYNTHETIC
  per knob row, the baseline's IO and FULL, and for what they lack the rate
  assumptions in `ASSUMED`, each with its source.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# mypy checks the plugins as plugins/; an editable install hides their installed name from it
from tuneup_plugins.sim import SimCosts, SimTrainer  # type: ignore[import-not-found]

from tuneup.config import loader
from tuneup.costs.estimate import ProbeCosts
from tuneup.costs.one_time import (
    Cost,
    End,
    FirstUse,
    ProcessHistory,
    WorkerCosts,
    graph_key,
    row_of,
)
from tuneup.errors import UsageError
from tuneup.probe.stats import median, relative_spread
from tuneup.probe.types import PHASES, Status

from .costs import worker_costs
from .evidence import GATHER, JournalFigures, Measured, read_measured
from .learned import RecordedFailure, batch_gains, measured_gains
from .rates import Row, change_of, debiased_ratio, deviation_of_steps, effect_noise

# Each rate the twin assumes where a GPU run's evidence is silent, with its source: the bench
# prints them beside every prediction, so a figure is never taken for a measurement. (Its
# one-time costs are the cost model's figures: measured, or assumed with a range.)
ASSUMED: dict[str, str] = {
    "fused Adam": "+4% SYNTHETIC: the tutorial's apex FusedAdam on an A100 (513 -> 534 "
    "samples/s, unet-workload.md)",
    "TorchScript": "+2% SYNTHETIC: the tutorial's JIT on an A100 (534 -> 542 FULL, 661 -> "
    "708 SYNTHETIC with apex; unet-workload.md)",
    "torch.compile": "+5% SYNTHETIC",
    "CUDA graphs": "+2.7% SYNTHETIC: the sim's launch model (2 ms of launches in a 63 ms "
    "step, cut to 0.3 ms by a graph)",
    "bf16 + channels_last": "bf16 x the fp32 channels_last gain (1.035): no measurement",
    "batch size": "SYNTHETIC per sample as a ladder measured it at that batch over the same "
    "configuration at 64, else x (batch / 64)^0.05; memory fits 141 GB",
    "loaders": "lowmem per worker as measured at 2 (58.8 samples/s), sublinear in workers "
    "as the sim's curve fitted to the tutorial's 2/4/8/16 workers on 32 cores, scaled to 16; "
    "inmem 1.6x lowmem; the GPU-resident loader 8000 samples/s; DALI absent (as on that node)",
    "noise": "SYNTHETIC's trials repeat as recorded (0.01%); IO and FULL vary as recorded with "
    "the CPU loaders (their trials' spread; probe to probe, every ladder's repeats of one "
    "configuration: 9.5% over the H200 runs, 5.5% in the first run's baselines alone), and "
    "as SYNTHETIC with the GPU-resident loader, which takes the CPU workers out of the loop",
    "composition": "FULL = (IO^-3 + SYNTHETIC^-3)^(-1/3): 0.99 of min(IO, SYNTHETIC) at "
    "the recorded baseline, 0.79 where the two are equal (the tutorial's 0.77-0.81)",
}

_GAIN_NAMES = {"fused": "fused Adam", "script": "TorchScript", "compile": "torch.compile",
               "graphs": "CUDA graphs"}  # fmt: skip


def assumed_rates(evidence: Evidence) -> dict[str, str]:
    """ASSUMED, less the gains a ladder measured (Evidence.gains); none beside a gather."""
    if evidence.table:
        return {}
    measured = {_GAIN_NAMES[name] for name in evidence.gains}
    return {what: why for what, why in ASSUMED.items() if what not in measured}


def measured_rates(evidence: Evidence) -> dict[str, str]:
    """The gains and batch speeds a ladder measured, said as the assumptions are."""
    said = {
        _GAIN_NAMES[name]: f"{100 * (gain - 1):+.1f} % (a ladder's probes with and without it)"
        for name, gain in evidence.gains.items()
    }
    for batch, gain in evidence.batch_gains.items():
        said[f"batch {batch}"] = f"{100 * (gain - 1):+.1f} % per sample over batch 64 (a ladder's)"
    return said


COMPOSITION_P = 3.0
GPU_LOADER_SPS = 8000.0
INMEM_FACTOR = 1.6
GAINS = {"fused": 1.04, "script": 1.02, "compile": 1.05, "graphs": 1.027}
OVERHEAD = Cost.assumed(
    0.2,
    low=0.1,
    high=1.0,
    source="a probe's bookkeeping beyond its wall: journal, events, telemetry join",
    settle="the time around each probe beyond its wall (gather)",
)


@dataclass(frozen=True)
class Evidence:
    """A recorded machine's figures, as read from its evidence folder.

    Attributes:
        folder: where they came from.
        gpu: the GPU's name ("CPU" on a machine without one).
        on_gpu: the probes ran on a GPU.
        synthetic_sps: SYNTHETIC samples/s at batch 64 by knobs.json row.
        first_step_s: each knobs.json row's first step in a fresh process.
        io_sps, workers, full_sps: the baseline's IO (and its workers), its FULL probes.
        spawn_s: a fresh probe process's start, to its set-up built.
        syn_trial_noise, full_trial_noise: the trials' relative spread.
        full_probe_noise: FULL's probe-to-probe difference (the baseline's repeats).
        costs: the cost model's figures, measured or assumed (WorkerCosts).
        table: the gathered configurations' rates (empty: a knobs.json run's model).
        baseline: the configuration the table's changes are from.
        trial_noise, probe_noise: per phase, where a gather measured them.
        effect_noise: per phase, how far one gathered reading of a candidate's ratio strays
            (rates.effect_noise): what the table's ratios are debiased by.
        overhead: a probe's bookkeeping beyond its wall.
        start: the session's start before its first probe, where a gather measured it.
        recorded_stages: the probes each stage took in a recorded ladder's journal (what
            the twin's own stages are set beside).
        failures: the crashed probes of recorded ladders (learned.py): the same
            candidate in the same conv row fails again, at the recorded cost.
        batch_gains: per-sample speed at a batch over the base batch's, where a ladder
            measured both (learned.batch_gains).
        gains: GAINS that a ladder measured (learned.measured_gains): they replace
            the assumed ones.
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
    costs: WorkerCosts
    on_gpu: bool = True
    cpus: int = 16
    date: str = ""
    table: tuple[Row, ...] = ()
    baseline: Mapping[str, Any] = field(default_factory=dict)
    trial_noise: Mapping[str, float] = field(default_factory=dict)
    probe_noise: Mapping[str, float] = field(default_factory=dict)
    effect_noise: Mapping[str, float] = field(default_factory=dict)
    overhead: Cost = OVERHEAD
    start: Cost | None = None
    recorded_stages: Mapping[str, int] = field(default_factory=dict)
    failures: tuple[RecordedFailure, ...] = ()
    batch_gains: Mapping[int, float] = field(default_factory=dict)
    gains: Mapping[str, float] = field(default_factory=dict)

    def figures(self) -> dict[str, Cost]:
        """Every cost figure the twin prices with, by name."""
        named = self.costs.figures()
        named["overhead"] = self.overhead
        if self.start is not None:
            named["session_start"] = self.start
        return named


def read_evidence(folder: Path, journals: Sequence[Path] = ()) -> Evidence:
    """The figures of an evidence folder (bench/gpu/EVIDENCE.md), and of `journals`.

    Raises:
        UsageError: the folder holds neither knobs.json nor a journal with a baseline.
    """
    measured = read_measured(Path(folder), journals)
    if measured.gathered is None and "baseline" not in measured.knob_rows:
        raise UsageError(
            f"{folder}: no rates to replay: neither knobs.json's baseline row nor a gather "
            "(a ladder's journal holds only the configurations it tried); give it as "
            "--journal-evidence beside an --evidence folder that has one"
        )
    machine = measured.machine
    on_gpu = bool(machine.get("cuda", True)) and bool(machine.get("gpu_count", 1))
    gathered = measured.gathered
    figures = gathered or next(iter(measured.journals.values()))
    syn = {name: float(r["samples_per_s"]) for name, r in measured.knob_rows.items()}
    first = {
        name: float(r["first_step_s"])
        for name, r in measured.knob_rows.items()
        if r.get("first_step_s") and r.get("process", "fresh") == "fresh"
    }
    trial = {
        p: median([j.trial_noise[p] for j in measured.journals.values() if p in j.trial_noise])
        for p in PHASES
        if any(p in j.trial_noise for j in measured.journals.values())
    }
    full_trials = trial.get("full", 0.02)
    spreads = [
        relative_spread(r["ms_per_step_trials"])
        for r in measured.knob_rows.values()
        if r.get("ms_per_step_trials")
    ]
    spawns = measured.all_of("spawn")
    overheads = list(gathered.overhead_s) if gathered else []
    starts = list(gathered.start_s) if gathered else []
    names = machine.get("gpu_names") or []
    return Evidence(
        folder=measured.folder,
        gpu=str(names[0]) if names and on_gpu else ("a GPU" if on_gpu else "CPU"),
        synthetic_sps=syn,
        first_step_s=first,
        io_sps=median(list(figures.io_sps)) if figures.io_sps else 0.0,
        workers=figures.workers,
        full_sps=figures.full_sps,
        spawn_s=median(spawns) if spawns else 8.0,
        syn_trial_noise=median(spreads) if spreads else trial.get("synthetic", 0.001),
        full_trial_noise=full_trials,
        full_probe_noise=_loader_probe_noise(measured, figures),
        costs=worker_costs(measured, on_gpu),
        on_gpu=on_gpu,
        cpus=int(machine.get("cpus_usable", 16) or 16),
        date=measured.date,
        table=gathered.rows if gathered else (),
        baseline=gathered.baseline if gathered else {},
        trial_noise=trial if gathered else {},
        probe_noise=dict(gathered.probe_noise) if gathered else {},
        effect_noise=effect_noise(gathered.rows, gathered.probe_noise) if gathered else {},
        overhead=Cost.of(overheads, "the time around each gathered probe beyond its wall")
        if overheads
        else OVERHEAD,
        start=Cost.of(starts, "the gather's session start before its first probe")
        if starts
        else None,
        recorded_stages={
            stage: n
            for name, j in measured.journals.items()
            if name != GATHER
            for stage, n in j.pairs.items()
        },
        failures=tuple(measured.failures()),
        batch_gains=batch_gains(measured.ladders()),
        gains=measured_gains(measured.ladders()),
    )


def _loader_probe_noise(measured: Measured, figures: JournalFigures) -> float:
    """IO's and FULL's probe-to-probe spread with a CPU loader: every ladder journal's repeats
    of a configuration (rates.repeat_steps), else the first journal's baselines."""
    steps = [
        step
        for name, journal in measured.journals.items()
        if name != GATHER
        for phase in ("io", "full")
        for step in journal.repeat_steps.get(phase, ())
    ]
    return deviation_of_steps(steps) if len(steps) >= 3 else figures.probe_noise.get("full", 0.03)


class GpuTwin(SimTrainer):
    """The sim trainer answering as the recorded machine did (the module docstring).

    Args:
        evidence: what the machine recorded.
        end: which end of every figure's range to take ("low", "likely", "high").
        compiled: configurations whose compiled graphs the machine's compile caches hold
            already (a ladder run after a gather finds them warm).
    """

    def __init__(
        self,
        evidence: Evidence,
        seed: int = 0,
        *,
        end: End = "likely",
        compiled: Sequence[Mapping[str, Any]] = (),
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("cores", evidence.cpus)
        kwargs.setdefault("gpu_memory_gb", 141.0 if evidence.on_gpu else 0.0)
        kwargs.setdefault("dali", not evidence.on_gpu)
        kwargs.setdefault("cuda", evidence.on_gpu)
        costs = evidence.costs
        kwargs.setdefault(
            # its starts; the cost model prices the rest (one_time)
            "costs",
            SimCosts(spawn_s=costs.spawn.at(end), setup_s=costs.setup.at(end)),
        )
        super().__init__(seed=seed, noise=evidence.full_trial_noise, **kwargs)
        self.evidence = evidence
        self.end: End = end
        graphs = (graph_key(self.knobs(dict(config))) for config in compiled)
        self.history = ProcessHistory(compiled={g for g in graphs if g is not None})
        self._use = FirstUse(fresh=True)

    # --- one-time costs: the cost model ----------------------------------------------------

    def is_new(self, knobs: dict[str, Any], fresh: bool) -> bool:
        """Every probe pays its first step: the cost model prices what is new in it."""
        self._use = self.history.probe(knobs, fresh)
        return True

    def one_time(self, knobs: dict[str, Any], fresh: bool, new: bool) -> dict[str, float]:
        return self.evidence.costs.one_time(self._use, knobs, self.end, self.first_batch_s(knobs))

    def first_batch_s(self, knobs: dict[str, Any]) -> float:
        """The first step's wait for a CPU loader's first batch: one worker makes a whole
        batch, at the IO rate per worker (0 where a warm first step was measured with it,
        or the loader is on the GPU)."""
        if self.evidence.costs.warm_first.measured or loader(knobs["data_loader_config"]).on_gpu:
            return 0.0
        workers = max(1, int(knobs["num_data_workers"]))
        per_worker = self.expected_sps(knobs)["io"] / workers
        return float(knobs["global_batch_size"]) / max(per_worker, 1e-9)

    def failed_costs(self, knobs: dict[str, Any]) -> dict[str, float]:
        """A recorded crash costs what it cost there, all of it past its start; another
        failure, its start and first step. The worker serves on after a compile failure."""
        self._process_for(knobs)
        recorded = self._recorded_failure(knobs)
        if recorded is None or not recorded.survived:
            self.history.failed()
        parts = self.evidence.costs.failed(self._use, knobs, self.end)
        if recorded is None:
            return parts
        start = "spawn" if self._use.fresh else "setup"
        return {start: parts[start], "failed": max(0.0, recorded.wall_s - parts[start])}

    def serves_on_after_failure(self, values: dict[str, Any]) -> bool:
        recorded = self._recorded_failure(self.knobs(values))
        return recorded is not None and recorded.survived

    def _recorded_failure(self, knobs: Mapping[str, Any]) -> RecordedFailure | None:
        return next((f for f in self.evidence.failures if f.matches(knobs)), None)

    def unsettled(self, knobs: dict[str, Any]) -> dict[str, float]:
        """The share of each phase's warm-ups that run to the cap: those the CPU loader
        paces (IO, and FULL unless the loader is on the GPU), and SYNTHETIC's own."""
        on_gpu = loader(knobs["data_loader_config"]).on_gpu and self.evidence.on_gpu
        costs = self.evidence.costs
        shares = {p: costs.unsettled_share(p, self.end) for p in PHASES}
        if on_gpu:
            shares["io"] = shares["full"] = shares["synthetic"]
        return shares

    def probe_costs_for(self, costs: ProbeCosts, knobs: dict[str, Any]) -> ProbeCosts:
        return replace(
            costs,
            unsettled=self.unsettled(knobs),
            warm_windows=self.evidence.costs.windows(self.end),
            scale=self.evidence.costs.scale.at(self.end),
            batch_exponent=self.evidence.costs.batch_exponent.at(self.end),
        )

    # --- noise -------------------------------------------------------------------------------

    def trial_noise(self, phase: str, knobs: dict[str, Any]) -> float:
        if self.evidence.table:
            return self.evidence.trial_noise.get(phase, self.noise)
        if phase == "synthetic" or loader(knobs["data_loader_config"]).on_gpu:
            return self.evidence.syn_trial_noise
        return self.evidence.full_trial_noise

    def probe_noise(self, phase: str, knobs: dict[str, Any]) -> float:
        if self.evidence.table:
            return self.evidence.probe_noise.get(phase, 0.0)
        if phase == "synthetic" or loader(knobs["data_loader_config"]).on_gpu:
            return 0.0
        return self.evidence.full_probe_noise

    # --- rates -------------------------------------------------------------------------------

    def problem(
        self, values: dict[str, Any], ranks: int | None = None
    ) -> tuple[Status, str] | None:
        """A recorded crash comes back; a gathered change runs as it ran in the gather; the
        rest as the sim says."""
        recorded = self._recorded_failure(self.knobs(values))
        if recorded is not None:
            return Status.CRASH, f"as recorded: {recorded.reason}"
        if self.evidence.table and _covered(self._change(values), self.evidence.table):
            return None
        return super().problem(values, ranks)

    def expected_sps(self, values: dict[str, Any], ranks: int | None = None) -> dict[str, float]:
        if self.evidence.table:
            return self._table_sps(values)
        k = self.knobs(values)
        syn = self._twin_synthetic(k)
        io = self._twin_io(k)
        p = COMPOSITION_P
        full = (io**-p + syn**-p) ** (-1.0 / p)
        return {"io": io, "synthetic": syn, "full": full}

    def _change(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return change_of(values, self.evidence.baseline)

    def _table_sps(self, values: dict[str, Any]) -> dict[str, float]:
        """The baseline's rates times each gathered change's ratio, phase by phase, each
        ratio with its readings' noise taken out of its size (rates.debiased_ratio)."""
        table = self.evidence.table
        base = next(r for r in table if not r.change)
        change = self._change(values)
        rates = {}
        for phase in PHASES:
            rate = base.rate(phase) or 1.0
            for row in _cover(change, table):
                own, typical = row.rate(phase), base.rate(phase)
                if own is not None and typical:
                    readings = len(row.rates.get(phase, ()))
                    noise = self.evidence.effect_noise.get(phase, 0.0)
                    rate *= debiased_ratio(own / typical, readings, noise)
            rates[phase] = rate
        return rates

    def _twin_synthetic(self, k: dict[str, Any]) -> float:
        rows = self.evidence.synthetic_sps
        base = rows["baseline"]
        rate = rows.get(row_of(k), base)
        if k["amp_mode"] != "none" and k["channels_last"]:
            rate *= rows.get("channels_last", base) / base
        gains = {**GAINS, **self.evidence.gains}
        if k["optimizer_impl"] in ("fused", "apex"):
            rate *= gains["fused"]
        if k["jit"] == "script":
            rate *= gains["script"]
        elif k["jit"] == "compile":
            rate *= gains["compile"]
        if k["cuda_graphs"]:
            rate *= gains["graphs"]
        batch = int(k["global_batch_size"])
        return rate * self.evidence.batch_gains.get(batch, (batch / 64) ** 0.05)

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


def _items(change: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {(k, json.dumps(v, sort_keys=True, default=str)) for k, v in change.items()}


def _cover(change: Mapping[str, Any], table: Sequence[Row]) -> list[Row]:
    """The gathered rows whose changes together make up `change`: the largest first, none
    overlapping (a batch's row carries its learning-rate change with it)."""
    wanted = _items(change)
    chosen: list[Row] = []
    for row in sorted(table, key=lambda r: -len(r.change)):
        items = _items(row.change)
        if items and items <= wanted:
            chosen.append(row)
            wanted -= items
    return chosen


def _covered(change: Mapping[str, Any], table: Sequence[Row]) -> bool:
    wanted = _items(change)
    for row in _cover(change, table):
        wanted -= _items(row.change)
    return not wanted


__all__ = [
    "ASSUMED",
    "Evidence",
    "GpuTwin",
    "Measured",
    "assumed_rates",
    "measured_rates",
    "read_evidence",
]
