"""What the `sim` trainer adds on top of its surface: the simulated seconds a probe's parts
take (SimCosts) and what a real machine adds to the trial noise (Disturbance).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from tuneup.config import first_uses, loader
from tuneup.costs.estimate import ProbeCosts

from .sim_surface import _digest


@dataclass(frozen=True)
class Disturbance:
    """What a real machine adds to the trial noise (sim's docstring, Disturbances)."""

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
    """What a simulated probe's parts take, in seconds (sim's docstring, Time): priced by
    the estimate's own model (tuneup.costs.estimate.probe_seconds).

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
    compile_s = first_uses({"jit": k["jit"]}).get(("jit", k["jit"]))
    if compile_s is not None:  # as the knob declares it (a cold torch.compile, scripting)
        costs["compile"] = compile_s
    if k["cuda_graphs"]:
        costs["graph_capture"] = 4.0
    return costs
