"""The checks behind a preset's strict validation: each section's problems, all of them.

Every function takes the raw YAML value of one section and returns what it
means (normalised) together with a list of problems, one line each, naming
where in the preset the problem is and what would be valid. Nothing stops at
the first problem: a preset with three mistakes gets three lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tuneup.cluster.site import SITE_HINT_KEYS, hint_problem
from tuneup.config import TUTORIAL_BOXES, Boxes, build_config
from tuneup.config.coerce import is_finite
from tuneup.costs.estimate import SCALE_BOUNDS
from tuneup.errors import UsageError, did_you_mean
from tuneup.probe.types import PHASES, STEP_COUNTED_BUDGET, ProbeBudget

PRESET_KEYS = ("name", "description", "train", "synthetic_data", "real_data", "probe")
"""The core keys of a preset; a trainer may read one more, named after it (preset.sections)."""
PROBE_KEYS = ("stages", "without", "candidates", "budget", "hints", "launch", "costs")
COST_KEYS = (
    "spawn_s",
    "setup_s",
    "first_s",
    "step_s",
    "trials",
    "pairs_per_stage",
    "adopt_rate",
    "scale",
    "batch_exponent",
    "kernel_s",
    "unsettled",
    "measured",
    "source",
)
FIGURE_KEYS = COST_KEYS[:-3]  # the figures; `measured` names those a run measured
SYNTH_KEYS = ("box", "val_box", "seed")
REAL_KEYS = ("box", "val_box")
LAUNCH_KEYS = ("nproc", "nodes")
# Hints for the cluster model (tuneup.cluster.scaling) rather than sbatch: network GB/s
# per GPU (the node's NIC bandwidth over its GPUs), the latency of one network step
# (us), and the ring bandwidth inside a node per GPU (GB/s).
INTERCONNECT_HINTS = ("interconnect_gbs", "interconnect_latency_us", "intra_node_gbs")


def unknown_keys(data: Mapping[str, Any], valid: Iterable[str], where: str) -> list[str]:
    """One problem per key of `data` that is not in `valid`."""
    valid = tuple(valid)
    return [
        f"{where}{key}: unknown key: {did_you_mean(key, valid)}valid keys are {', '.join(valid)}"
        for key in data
        if key not in valid
    ]


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite number (YAML reads `.nan`, `.inf` and 1e400 as floats: none is a figure)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and is_finite(value)


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# --- train: TrainConfig knobs -----------------------------------------------------------------


def config_problem(values: Mapping[str, Any]) -> str | None:
    """build_config's one-line complaint about `values`, or None when they are valid."""

    try:
        build_config(values, source="this section")
    except UsageError as exc:
        return str(exc)
    return None


def knob_problems(values: Mapping[str, Any], where: str = "train") -> list[str]:
    """Every bad knob in `values`, not just the first (build_config stops at one).

    Each knob is checked alone; one that fails alone is checked again with the
    knobs that passed, since some rules span knobs (data_size must suit levels).
    Only when every knob passes is the whole mapping checked once more.
    """
    good: dict[str, Any] = {}
    alone: dict[str, tuple[Any, str]] = {}
    for key, value in values.items():
        message = config_problem({key: value})
        if message is None:
            good[key] = value
        else:
            alone[key] = (value, message)
    problems = []
    for key, (value, message) in alone.items():
        if config_problem({**good, key: value}) is None:
            good[key] = value
        else:
            problems.append(f"{where}: {message}")
    if not problems:
        message = config_problem(values)
        if message is not None:
            problems.append(f"{where}: {message}")
    return problems


def check_train(raw: Any) -> tuple[dict[str, Any], list[str]]:
    if raw is None:
        return {}, []
    if not isinstance(raw, Mapping):
        return {}, [f"train: must be a mapping of TrainConfig knobs, got {type_name(raw)}"]
    values = dict(raw)
    return values, knob_problems(values)


# --- synthetic_data and probe.launch ----------------------------------------------------------


def check_synthetic(raw: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The synthetic box made when no data path is given: box and val_box sides, a seed."""
    if raw is None:
        return None, []
    if not isinstance(raw, Mapping):
        return None, [
            f"synthetic_data: must be a mapping (box, val_box, seed), got {type_name(raw)}"
        ]
    problems = unknown_keys(raw, SYNTH_KEYS, "synthetic_data.")
    for key in ("box", "val_box"):
        if key not in raw:
            problems.append(f"synthetic_data.{key}: missing: give the box side in voxels")
        elif not is_count(raw[key]) or raw[key] < 1:
            problems.append(
                f"synthetic_data.{key}: must be a positive whole number, got {raw[key]!r}"
            )
    seed = raw.get("seed", 0)
    if not is_count(seed) or seed < 0:
        problems.append(f"synthetic_data.seed: must be a whole number of 0 or more, got {seed!r}")
    return dict(raw), problems


def check_real(raw: Any, synthetic: bool) -> tuple[Boxes | None, list[str]]:
    """The boxes the real run reads (`real_data`), which the loaders that hold a box whole
    are weighed against: absent, the tutorial's 1024^3 + 512^3 where the preset probes on
    a synthetic box (`synthetic`), else none (its probes read the real files)."""
    if raw is None:
        return (TUTORIAL_BOXES if synthetic else None), []
    if not isinstance(raw, Mapping):
        return None, [
            "real_data: must be a mapping (box, val_box: the sides of the boxes the real run "
            f"reads, e.g. {{box: 1024, val_box: 512}}), got {type_name(raw)}"
        ]
    problems = unknown_keys(raw, REAL_KEYS, "real_data.")
    if "box" not in raw:
        problems.append("real_data.box: missing: give the training box's side in voxels")
    elif not is_count(raw["box"]) or raw["box"] < 1:
        problems.append(f"real_data.box: must be a positive whole number, got {raw['box']!r}")
    val = raw.get("val_box", 0)
    if not is_count(val) or val < 0:
        problems.append(
            f"real_data.val_box: must be a whole number of 0 (no validation box) or more, "
            f"got {val!r}"
        )
    if problems:
        return None, problems
    return Boxes(raw["box"], val), []


def check_launch(raw: Any) -> tuple[dict[str, int], list[str]]:
    """probe.launch: the ranks each probe runs with (nproc per node, nodes)."""
    if raw is None:
        return {}, []
    if not isinstance(raw, Mapping):
        return {}, [f"probe.launch: must be a mapping (nproc, nodes), got {type_name(raw)}"]
    problems = unknown_keys(raw, LAUNCH_KEYS, "probe.launch.")
    values: dict[str, int] = {}
    for key in LAUNCH_KEYS:
        if key not in raw or raw[key] is None:
            continue
        if not is_count(raw[key]) or raw[key] < 1:
            problems.append(
                f"probe.launch.{key}: must be a whole number of at least 1, got {raw[key]!r}"
            )
        else:
            values[key] = raw[key]
    return values, problems


# --- probe.budget -----------------------------------------------------------------------------

_AT_LEAST_ONE = ("min_trials", "max_trials")


def check_budget(
    raw: Any, laid_over: ProbeBudget | None = None
) -> tuple[dict[str, Any], list[str]]:
    """ProbeBudget fields by name and type: trial counts whole numbers, times numbers; the
    trial counts checked as they will be, laid over `laid_over` (the device's default).

    A key of the step-counted budget tuneup had before (trial_steps, ...) is named
    with what replaced it.
    """
    if raw is None:
        return {}, []
    if not isinstance(raw, Mapping):
        return {}, [f"probe.budget: must be a mapping, got {type_name(raw)}"]
    defaults = (laid_over or ProbeBudget()).to_dict()
    problems = []
    for key in raw:
        if key in STEP_COUNTED_BUDGET:
            problems.append(
                f"probe.budget.{key}: trials are timed in seconds now, not counted in steps: "
                f"use {STEP_COUNTED_BUDGET[key]}"
            )
    problems += unknown_keys(
        {k: v for k, v in raw.items() if k not in STEP_COUNTED_BUDGET}, defaults, "probe.budget."
    )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in defaults:
            continue
        if isinstance(defaults[key], int):
            least = 1 if key in _AT_LEAST_ONE else 0
            if not is_count(value) or value < least:
                problems.append(
                    f"probe.budget.{key}: must be a whole number of at least {least}, got {value!r}"
                )
                continue
        elif not is_number(value) or value < 0 or (value == 0 and key not in _MAY_BE_ZERO):
            problems.append(f"probe.budget.{key}: must be a positive number, got {value!r}")
            continue
        values[key] = float(value) if isinstance(defaults[key], float) else value
    merged = {**defaults, **values}
    if merged["min_trials"] > merged["max_trials"]:
        problems.append(
            f"probe.budget: min_trials ({merged['min_trials']}) is more than "
            f"max_trials ({merged['max_trials']})"
        )
    return values, problems


_MAY_BE_ZERO = ("trial_noise", "warmup_tolerance")


# --- probe.costs ------------------------------------------------------------------------------


def check_costs(raw: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """What a probe's parts cost on the machine the preset is for, as recorded there: the
    estimate's figures before this machine has measured its own (tuneup.costs.estimate)."""
    if raw is None:
        return None, []
    if not isinstance(raw, Mapping):
        return None, [f"probe.costs: must be a mapping ({', '.join(COST_KEYS)})"]
    problems = unknown_keys(raw, COST_KEYS, "probe.costs.")
    for key in ("spawn_s", "setup_s", "first_s", "kernel_s", "pairs_per_stage"):
        value = raw.get(key, 0.0)
        if not is_number(value) or value < 0:
            problems.append(f"probe.costs.{key}: must be a number of 0 or more, got {value!r}")
    scale = raw.get("scale", 1.0)
    low, high = SCALE_BOUNDS
    if not is_number(scale) or not low <= scale <= high:
        problems.append(
            "probe.costs.scale: must be what probes took over the model's parts, from "
            f"{low:g} to {high:g}, got {scale!r}"
        )
    if not is_number(grows := raw.get("batch_exponent", 0.0)) or not 0 <= grows <= 2:
        problems.append(
            f"probe.costs.batch_exponent: must be from 0 (not at all) to 2, got {grows!r}"
        )
    rate = raw.get("adopt_rate", 0.5)
    if not is_number(rate) or not 0 <= rate <= 1:
        problems.append(f"probe.costs.adopt_rate: must be a share from 0 to 1, got {rate!r}")
    for key in ("step_s", "trials"):
        block = raw.get(key, {})
        if not isinstance(block, Mapping):
            problems.append(f"probe.costs.{key}: must map io, synthetic, full to numbers")
            continue
        for phase, value in block.items():
            if phase not in PHASES or not is_number(value) or value <= 0:
                problems.append(
                    f"probe.costs.{key}.{phase}: must be a phase ({', '.join(PHASES)}) with a "
                    f"positive number, got {value!r}"
                )
    unsettled = raw.get("unsettled", {})
    if not isinstance(unsettled, Mapping) or any(
        phase not in PHASES or not is_number(v) or not 0 <= v <= 1 for phase, v in unsettled.items()
    ):
        problems.append(
            "probe.costs.unsettled: must map io, synthetic, full to the share (0 to 1) of "
            "warm-ups that run to their cap"
        )
    measured = raw.get("measured", [])
    if not isinstance(measured, list) or any(m not in FIGURE_KEYS for m in measured):
        problems.append(
            "probe.costs.measured: must list the figures a run measured "
            f"({', '.join(FIGURE_KEYS)}); the others are predicted"
        )
    if "source" in raw and not isinstance(raw["source"], str):
        problems.append("probe.costs.source: must be text (where the figures were measured)")
    return dict(raw), problems


# --- probe.hints ------------------------------------------------------------------------------


def hint_keys() -> tuple[str, ...]:
    """Every hint a preset may give: the site's (sbatch, env), plus the interconnect's."""
    return tuple(dict.fromkeys((*SITE_HINT_KEYS, *INTERCONNECT_HINTS)))


def _hint_value_problem(key: str, value: Any, where: str) -> str | None:
    if value is None:
        return None
    if key == "interconnect_latency_us":
        if not is_number(value) or value < 0:
            return f"{where}{key}: must be a number of microseconds, 0 or more, got {value!r}"
    elif key in INTERCONNECT_HINTS:
        if not is_number(value) or value <= 0:
            return f"{where}{key}: must be a positive number of GB/s, got {value!r}"
    else:
        return hint_problem(key, value, where)
    return None


def check_hints(raw: Any) -> tuple[dict[str, Any], list[str]]:
    """Machine hints, at the top level or under `slurm:`; unknown keys and bad values listed."""
    if raw is None:
        return {}, []
    if not isinstance(raw, Mapping):
        return {}, [f"probe.hints: must be a mapping, got {type_name(raw)}"]
    known = hint_keys()
    problems = unknown_keys(raw, (*known, "slurm"), "probe.hints.")
    for key, value in raw.items():
        if key in known:
            problem = _hint_value_problem(key, value, "probe.hints.")
            if problem:
                problems.append(problem)
    nested = raw.get("slurm")
    if nested is not None:
        if not isinstance(nested, Mapping):
            problems.append(f"probe.hints.slurm: must be a mapping, got {type_name(nested)}")
        else:
            problems += unknown_keys(nested, known, "probe.hints.slurm.")
            for key, value in nested.items():
                if key in known:
                    problem = _hint_value_problem(key, value, "probe.hints.slurm.")
                    if problem:
                        problems.append(problem)
    return dict(raw), problems


def flat_hints(hints: Mapping[str, Any]) -> dict[str, Any]:
    """Hints with `slurm:` merged in and the cores_* spellings read as cpus_*."""
    flat: dict[str, Any] = {}
    nested = hints.get("slurm")
    for source in (hints, nested if isinstance(nested, Mapping) else {}):
        for key, value in source.items():
            if key != "slurm" and value is not None:
                flat[key.replace("cores_per_", "cpus_per_")] = value
    return flat
