"""The batch size stage, judged on FULL: it moves the loader and the model both."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.hardware.types import MachineInfo
from tuneup.probe.stages import Stage, current
from tuneup.probe.types import Candidate


@dataclass(frozen=True)
class BatchSizeStage(Stage):
    """The batch size scaled relative to the incumbent's."""

    factors: tuple[float, ...] = (0.5, 2.0)

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        if self.candidates:  # a preset's explicit batch sizes win over the factors
            return list(self.candidates)
        # local_batch_size, when set, overrides the global one: scale what is in force.
        local = current(base, "local_batch_size")
        knob, size = (
            ("local_batch_size", local)
            if local is not None
            else ("global_batch_size", current(base, "global_batch_size"))
        )
        ranks = 1 if knob == "local_batch_size" else max(1, machine.world_size)
        rule = _lr_rule(base, size * (max(1, machine.world_size) if local is not None else 1))
        proposed = []
        for factor in self.factors:
            new = round(size * factor)
            if new < ranks or new == size or new % ranks:
                continue  # every rank needs an equal, non-empty share
            proposed.append(Candidate(f"batch x{factor:g} ({knob} {new})", {knob: new, **rule}))
        return proposed

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        if self.candidates_for(machine, base):
            return None
        return f"the batch cannot be scaled by {list(self.factors)} into equal shares per rank"


def _lr_rule(base: Mapping[str, Any], global_batch: int) -> dict[str, Any]:
    """The knobs that make the learning rate follow the batch: none when the config has a rule.

    A config that scales by no rule (`lr_schedule.scaling: none`) would run a
    bigger batch at the same learning rate; the candidate then carries the
    tutorial's rule, sqrt of global/base batch, anchored at the incumbent's
    batch so the incumbent's own learning rate is unchanged.
    """
    schedule = dict(current(base, "lr_schedule") or {})
    if schedule.get("scaling", "sqrt") != "none":
        return {}
    return {
        "lr_schedule": {**schedule, "scaling": "sqrt"},
        "base_batch_size": int(global_batch),
    }


BATCH_SIZE = BatchSizeStage(
    name="batch_size",
    order=90,
    title="Batch size",
    description=(
        "Half and double the incumbent's batch (per rank when local_batch_size is set). "
        "Samples/s is compared, and the learning rate follows lr_schedule.scaling (sqrt by "
        "default) of global/base batch; a config that scales by no rule gets the tutorial's "
        "sqrt rule from the incumbent's batch. The loss is compared at equal samples seen, "
        "and the verdict says to check time-to-accuracy. A batch too big for memory ends as "
        "oom."
    ),
    knobs=("global_batch_size", "local_batch_size", "lr_schedule", "base_batch_size"),
    judged_on="full",
    expected_gain=0.05,
)
