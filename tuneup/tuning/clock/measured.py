"""What a ladder's own probes say its probes cost: start-ups, set-ups, first steps (read
back to the baseline's batch), step times, trial counts, the warm-ups that never settled,
and how far the model was off their running parts (`scale`). The clock (time_left.py)
prices what is left with them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from tuneup.costs.estimate import (
    ProbeCosts,
    one_time_seconds,
    probe_seconds,
    scale_of,
    searches_first,
)
from tuneup.costs.one_time import pays_every_probe
from tuneup.probe.batches import batch_over, config_batch
from tuneup.probe.plan import MeasurementPlan, plan_probe
from tuneup.probe.stats import median
from tuneup.probe.types import PHASES, ProbeBudget, ProbeResult


def result_plan(result: ProbeResult, budget: ProbeBudget) -> MeasurementPlan:
    """The plan a probe was measured by (as it recorded it), else its budget's whole plan."""
    if result.plan:
        try:
            return MeasurementPlan.from_dict(result.plan)
        except (TypeError, ValueError):
            pass
    return plan_probe(budget)


def step_seconds(result: ProbeResult, phase: str) -> float | None:
    """A steady step of `phase` in this probe: its global batch over the phase's rate."""
    rate = result.rate(phase)
    if rate is None:
        return None
    ranks = max(1, result.ranks if result.config.get("local_batch_size") else 1)
    return config_batch(result.config) * ranks / rate


class Heard(NamedTuple):
    """A probe as the clock heard it: whether its kernels were new to its process, and
    whether its conv key was (None: not said; a configuration that compiles, scripts or
    captures is then taken to have searched nothing)."""

    result: ProbeResult
    new: bool
    new_key: bool | None = None

    def searched(self) -> bool:
        if self.new_key is None:
            return not pays_every_probe(self.result.config)
        return self.new_key


def measured_costs(
    heard: Sequence[Heard | tuple[ProbeResult, bool]],
    budget: ProbeBudget,
    fallback: ProbeCosts,
    *,
    typical: bool = False,
    base_batch: float | None = None,
) -> ProbeCosts:
    """What probes cost here, from the ok probes heard so far; `fallback` for what none said.

    Args:
        heard: each probe with whether its configuration's kernels were new to its process
            (and whether its conv key was: Heard).
        budget: the session's budget (a probe without a recorded plan was measured by it).
        fallback: the guess, or an earlier ladder's record.
        typical: each phase's step over the whole ladder (the median: what a ladder's
            probes typically cost, as a record keeps it); else the latest (the incumbent's
            now, what the stage under way runs).
        base_batch: the baseline's batch: new kernels' first steps at another batch are
            read back to it (ProbeCosts.batch_exponent) before their mean is taken.
    """
    ran = [h for h in map(_as_heard, heard) if h.result.ok and h.result.wall_s > 0]
    if not ran:
        return fallback
    results = [h.result for h in ran]
    spawns = [
        r.one_time_s["spawn"] + r.one_time_s.get("first_steps", 0.0)
        for r in results
        if "spawn" in r.one_time_s
    ]
    setups = [r.one_time_s["setup"] for r in results if "setup" in r.one_time_s]
    # a warm probe's new kernels: a cuDNN search (read back to the baseline's batch) or a
    # compile (estimate.searches_first), else a script or a capture alone (kernel_s)
    warm = [h for h in ran if h.new and h.result.served_before > 0]
    searches = [
        _first_steps(h.result)
        / _searched_at(h.result.config, h.searched(), base_batch) ** fallback.batch_exponent
        for h in warm
        if searches_first(h.searched(), h.result.config)
    ]
    alone = [
        _first_steps(h.result) for h in warm if not searches_first(h.searched(), h.result.config)
    ]
    step_s = dict(fallback.step_s)
    trials = dict(fallback.trials)
    for phase in PHASES:
        steps = [s for r in results if (s := step_seconds(r, phase)) is not None]
        if steps:
            step_s[phase] = median(steps) if typical else steps[-1]
        counts = [len(r.trials_of(phase)) for r in results if r.trials_of(phase)]
        if counts:
            trials[phase] = median(counts)
    costs = replace(
        fallback,
        spawn_s=median(spawns) if spawns else fallback.spawn_s,
        setup_s=median(setups) if setups else fallback.setup_s,
        first_s=sum(searches) / len(searches) if searches else fallback.first_s,
        kernel_s=sum(alone) / len(alone) if alone else fallback.kernel_s,
        step_s=step_s,
        trials=trials,
        scale=1.0,
        measured=True,
        unsettled=unsettled_shares(results, fallback.unsettled),
    )
    modeled = []
    for h in ran:
        model, once = _as_run(h.result, budget, costs, h.new)
        modeled.append((h.result.wall_s - once, model - once))
    return replace(costs, scale=scale_of(modeled))


def _as_heard(item: Heard | tuple[ProbeResult, bool]) -> Heard:
    return item if isinstance(item, Heard) else Heard(item[0], item[1])


def _searched_at(config: Mapping[str, Any], new_key: bool, base_batch: float | None) -> float:
    """The batch a probe's first steps searched at, over the baseline's (a compile alone
    searches nothing the batch grows)."""
    return batch_over(config, base_batch) if new_key else 1.0


def _first_steps(result: ProbeResult) -> float:
    """A probe's first steps beyond its start (a compile's and a capture's included)."""
    return sum(v for k, v in result.one_time_s.items() if k not in ("spawn", "setup"))


def unsettled_shares(
    results: Sequence[ProbeResult], fallback: Mapping[str, float]
) -> dict[str, float]:
    """Per phase, the share of warm-ups that ran to their cap without settling (each probe's
    recorded plan says which were stable); `fallback` for a phase no probe recorded."""
    shares = dict(fallback)
    for phase in PHASES:
        stable = [r.plan["stable"][phase] for r in results if phase in _stable(r)]
        if stable:
            shares[phase] = sum(1 for s in stable if not s) / len(stable)
    return shares


def _stable(result: ProbeResult) -> Mapping[str, bool]:
    stable = result.plan.get("stable") if result.plan else None
    return stable if isinstance(stable, Mapping) else {}


def _as_run(
    result: ProbeResult, budget: ProbeBudget, costs: ProbeCosts, new: bool
) -> tuple[float, float]:
    """What the model says a finished probe took, given its own start, first steps, step
    times and trials, and the part of that it does not scale (its start, and its first
    steps where its kernels were `new`): the part of its running wall the model cannot see
    (bookkeeping, a slow warm-up, a warm probe's small first steps, which the model prices
    nowhere else) is `scale`."""
    once = result.one_time_s
    firsts = sum(v for k, v in once.items() if k not in ("spawn", "setup"))
    own = replace(
        costs,
        spawn_s=once.get("spawn", costs.spawn_s) + firsts,
        setup_s=once.get("setup", costs.setup_s),
        first_s=firsts,
        step_s={p: step_seconds(result, p) or costs.step(p) for p in PHASES},
        trials={p: float(len(result.trials_of(p)) or costs.trials.get(p, 1.0)) for p in PHASES},
        scale=1.0,
        shares=True,  # whether it shared a process, it says itself (served_before)
        unsettled={p: 0.0 if ok else 1.0 for p, ok in _stable(result).items()},
    )
    fresh = result.served_before == 0
    plan = result_plan(result, budget)
    model = probe_seconds(plan, own, fresh=fresh, new=new)
    return model, one_time_seconds(own, fresh=fresh, new=new)
