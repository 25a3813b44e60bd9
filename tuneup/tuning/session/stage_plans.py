"""The preset's ladder as the search's stage plans: each stage proposed on the incumbent
when its turn comes, judged on the phase it declares, and candidates whose loader
workers would not fit in /dev/shm, that the trainer refuses, or whose loader cannot hold
the real run's data, not tried."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuneup.cluster import shm  # a module, so tests can stand in for /dev/shm
from tuneup.hardware.types import MachineInfo
from tuneup.plugin_registry import checkout_unregistered
from tuneup.preset.load import ProbePreset, preset_stage
from tuneup.probe.stages import load_stage, skipped_stages
from tuneup.probe.types import (
    PHASES,
)
from tuneup.trainers.adapters import TrainerAdapter, skipped_trainers
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.datakeep import reads_npy
from tuneup.tuning.session.preflight import loader_shm_problem
from tuneup.tuning.session.realdata import kept_text

Refusal = Callable[[dict[str, Any], int], str | None]
"""Why the trainer would refuse values on so many ranks (TrainerAdapter.refusal)."""
Weighing = Callable[[dict[str, Any], dict[str, Any]], str | None]
"""Why a candidate's values cannot hold the real run's data, on top of the incumbent's
(realdata.RealData.before)."""


def shm_free_for(adapter: TrainerAdapter) -> int | None:
    """Bytes free in /dev/shm where the trainer's loader workers use it (data_files); else None."""
    if not adapter.data_files:
        return None

    return shm.shm_free_bytes()


def _judged(
    declared: str, phases: tuple[str, ...], values: dict[str, Any], machine: MachineInfo
) -> str:
    """The phase a stage is judged on here (stage_plans says why it may differ)."""
    if declared not in phases:
        return "full"
    device = str(values.get("device", "auto"))
    on_cpu = device == "cpu" or (device == "auto" and not machine.cuda)
    return "full" if declared == "io" and on_cpu else declared


def stage_plans(
    names: tuple[str, ...],
    machine: MachineInfo,
    base: dict[str, Any],
    preset: ProbePreset | None = None,
    shm_free: int | None = None,
    phases: tuple[str, ...] = PHASES,
    refusal: Refusal | None = None,
    tunable: frozenset[str] | None = None,
    weigh: Weighing | None = None,
) -> list[StagePlan]:
    """The preset's ladder as search plans; an unavailable stage carries its reason.

    Each plan re-proposes on the incumbent when its turn comes, so a stage sees
    what earlier stages adopted. With `preset`, a stage it gives candidate
    values for proposes those instead of its own. With `shm_free` (bytes in
    /dev/shm), a candidate whose loader workers would not fit there is not tried; with
    `refusal` (the trainer's, TrainerAdapter.refusal), neither is one the trainer refuses;
    with `weigh`, nor one whose loader cannot hold the real run's data (realdata.py).
    A stage is judged on the phase it declares where the trainer measures that
    phase apart (`phases`), else on FULL. A loader's stage is judged on FULL where
    the model runs on the CPU: the loader's workers and the model then take turns
    on the same cores, and a loader that delivers no more alone may still leave the
    model more of them (on a 2-core machine DALI's CPU pipeline lifts FULL 4% with
    an IO 20% under the DataLoader's).
    """

    if preset is not None:

        def load(name: str) -> Any:
            return preset_stage(name, preset)
    else:
        load = load_stage

    def plan_for(stage: Any, values: dict[str, Any]) -> StagePlan:
        unmapped = StagePlan(stage.name, [], skip_reason=UNMAPPED, judged=stage.judged_on)
        if tunable is not None and not set(stage.knobs) & tunable:
            return unmapped
        proposal = stage.propose(machine, values)
        if _passes_none(proposal, tunable):
            return unmapped
        not_tried = [f"{label}: {why}" for label, why in proposal.rejected]
        candidates, refused, heavy = [], 0, 0
        for cand in proposal.candidates:
            merged = {**values, **cand.values}
            problem = loader_shm_problem(merged, machine.ranks_per_node, shm_free)
            if problem is None and refusal is not None:
                problem = refusal(merged, cand.ranks or machine.world_size)
                refused += problem is not None
            if problem is None and weigh is not None:
                problem = weigh(merged, values)
                heavy += problem is not None
            if problem is None:
                candidates.append(cand)
            else:
                not_tried.append(f"{cand.label}: {problem}")
        reason = proposal.reason
        if reason is None and not candidates:
            shm = len(not_tried) - refused - heavy
            reason = (
                "no candidate fits in /dev/shm"
                if shm
                else "the trainer refuses every candidate"
                if refused
                else f"no candidate can hold the real data ({', '.join(not_tried)}); the "
                f"next best is {kept_text(values)}"
            )
        return StagePlan(
            name=proposal.stage,
            candidates=candidates,
            skip_reason=reason,
            not_tried=not_tried,
            refresh=lambda incumbent: plan_for(stage, incumbent),
            judged=_judged(stage.judged_on, phases, values, machine),
            expected_gain=stage.expected_gain,
        )

    return [plan_for(load(name), base) for name in names]


def _passes_none(proposal: Any, tunable: frozenset[str] | None) -> bool:
    """Each candidate varies a knob the trainer cannot pass (the data stage's loader)."""
    return (
        tunable is not None
        and bool(proposal.candidates)
        and not any(set(c.values) <= tunable for c in proposal.candidates)
    )


def ladder_reads_npy(
    names: tuple[str, ...], machine: MachineInfo, base: dict[str, Any], preset: ProbePreset
) -> bool:
    """Whether a loader the ladder may run reads the boxes' .npy copies: the baseline's, or
    one a stage proposes on this machine (the data stage's DALI loader where the machine
    has DALI), so that the copies are made with the box, as the stages decide and not as
    what this process can import would guess."""
    if reads_npy(base):
        return True
    return any(
        reads_npy({**base, **cand.values})
        for name in names
        for cand in preset_stage(name, preset).propose(machine, base).candidates
    )


UNMAPPED = "not mapped: the trainer's section passes none of its knobs (map one to tune it)"


def unmapped_note(plans: list[StagePlan], adapter_name: str) -> list[str]:
    """One line, before the first probe, naming the stages left out because the trainer
    cannot pass their knobs (`TrainerAdapter.tunable`): the user need not find them."""
    left = [p.name for p in plans if p.skip_reason == UNMAPPED]
    if not left:
        return []
    return [
        f"left out, their knobs not mapped by the {adapter_name} section: {', '.join(left)} "
        f"(add a knob under {adapter_name}.flags or {adapter_name}.env to tune its stage)"
    ]


def plugin_alerts() -> list[str]:
    """The plugins met while assembling (the ladder's stages: every one for the default
    ladder, whose `order`s are read from them; the trainer) and skipped, and the built-in
    ones a source checkout declares but has not registered: each said once, as a warning."""
    lines = skipped_stages() + skipped_trainers() + checkout_unregistered()
    return [f"warning: {line}" for line in lines]
