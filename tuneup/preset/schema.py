"""The checks behind a preset's strict validation: each section's problems, all of them.

Every function takes the raw YAML value of one section and returns what it
means (normalised) together with a list of problems, one line each, naming
where in the preset the problem is and what would be valid. Nothing stops at
the first problem: a preset with three mistakes gets three lines.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from tuneup.cluster.site import SITE_HINT_KEYS, hint_problem
from tuneup.config import build_config
from tuneup.errors import UsageError, did_you_mean
from tuneup.probe.estimate import SCALE_BOUNDS
from tuneup.probe.stages import default_ladder, load_stage, stage_names
from tuneup.probe.types import PHASES, STEP_COUNTED_BUDGET, Candidate, ProbeBudget

PRESET_KEYS = ("name", "description", "train", "synthetic_data", "probe")
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
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# --- train: TrainConfig knobs -----------------------------------------------------------------


def _build(values: Mapping[str, Any]) -> str | None:
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
        message = _build({key: value})
        if message is None:
            good[key] = value
        else:
            alone[key] = (value, message)
    problems = []
    for key, (value, message) in alone.items():
        if _build({**good, key: value}) is None:
            good[key] = value
        else:
            problems.append(f"{where}: {message}")
    if not problems:
        message = _build(values)
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
    estimate's figures before this machine has measured its own (tuneup.probe.estimate)."""
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


# --- probe.stages -----------------------------------------------------------------------------


def candidate_label(values: Mapping[str, Any]) -> str:
    """A candidate's label from its values: `num_data_workers=8`."""

    def show(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) or value is None else str(value)

    return ", ".join(f"{k}={show(v)}" for k, v in values.items())


def _expand(spec: Any, where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A stage entry's candidate values: {knob: [values]} (every combination) or [{knob: v}].

    A knob whose value is itself a list (box_size) needs a list of lists there.
    """
    if isinstance(spec, Mapping):
        if not spec:
            return [], [f"{where}: give at least one knob with its values"]
        knobs = list(spec)
        columns = [v if isinstance(v, list) else [v] for v in spec.values()]
        if any(not column for column in columns):
            return [], [f"{where}: every knob needs at least one value"]
        return [dict(zip(knobs, combo, strict=True)) for combo in itertools.product(*columns)], []
    if isinstance(spec, list):
        bad = [i for i, item in enumerate(spec) if not isinstance(item, Mapping) or not item]
        if bad or not spec:
            return [], [
                f"{where}: a list of candidates must hold mappings of knob values "
                "(e.g. [{amp_mode: bf16}])"
            ]
        return [dict(item) for item in spec], []
    return [], [
        f"{where}: must map knobs to candidate values (e.g. {{num_data_workers: [4, 8]}}), "
        f"got {type_name(spec)}"
    ]


def _stage_knobs(name: str) -> tuple[str, ...] | None:
    """The knobs stage `name` sets; None when its plugin does not load (reported elsewhere)."""

    try:
        return load_stage(name).knobs
    except UsageError:
        return None


def _candidate_problems(
    values: Mapping[str, Any],
    stage: str,
    knobs: tuple[str, ...] | None,
    train: Mapping[str, Any],
    where: str,
) -> list[str]:
    problems = []
    for knob, value in values.items():
        if knobs is not None and knob not in knobs:
            problems.append(
                f"{where}: stage {stage} does not set '{knob}' "
                f"({did_you_mean(knob, knobs)}its knobs: {', '.join(knobs)})"
            )
            continue
        # A value valid alone, or on top of the preset's knobs, is a valid candidate.
        message = _build({knob: value})
        if message is not None and _build({**train, knob: value}) is not None:
            problems.append(f"{where}: {message}")
    return problems


def check_stages(
    raw: Any, train: Mapping[str, Any], *, without: Any = None, own: Any = None
) -> tuple[tuple[str, ...], dict[str, tuple[Candidate, ...]], list[str]]:
    """The stage plan: names in order, each stage's own candidates, and the problems.

    `stages` absent (or "default") is the default ladder (probe.stages.default_ladder:
    every registered stage in the order it declares), so a preset says only what it
    changes: `without` (stages left out) and `candidates` (a stage's own values,
    `{stage: spec}`). A list gives another order; an entry is a stage name, or a
    one-key mapping from the name to its candidates. A spec is `{knob: [values]}`
    (one candidate per combination) or a list of `{knob: value}` mappings (one each).
    """
    problems: list[str] = []
    specs: list[tuple[str, Any, str]] = []  # (stage, spec, where)
    if raw is None or raw == "default":
        names = list(default_ladder())
    elif isinstance(raw, list):
        names = []
        for index, entry in enumerate(raw):
            where = f"probe.stages[{index}]"
            spec: Any = None
            if isinstance(entry, Mapping) and len(entry) == 1:
                name, spec = next(iter(entry.items()))
            elif isinstance(entry, str):
                name = entry
            else:
                problems.append(
                    f"{where}: must be a stage name or {{stage: {{knob: [values]}}}}, got {entry!r}"
                )
                continue
            problem = _unknown_stage(name, where)
            if problem is not None:
                problems.append(problem)
                continue
            if name in names:
                problems.append(f"{where}: stage '{name}' is listed twice")
                continue
            names.append(name)
            if spec is not None:
                specs.append((name, spec, f"probe.stages.{name}"))
    else:
        names = list(default_ladder())
        problems.append(
            f"probe.stages: must be `default` or a list of stage names, got {type_name(raw)}"
        )
    names, found = _without(names, without)
    problems += found
    if own is not None and not isinstance(own, Mapping):
        problems.append(
            f"probe.candidates: must be a mapping of stage: values, got {type_name(own)}"
        )
    elif own is not None:
        for name, spec in own.items():
            where = f"probe.candidates.{name}"
            problem = _unknown_stage(name, where)
            if problem is None and name not in names:
                problem = f"{where}: stage '{name}' is not in the ladder (see probe.without)"
            if problem is not None:
                problems.append(problem)
            else:
                specs.append((name, spec, where))
    candidates: dict[str, tuple[Candidate, ...]] = {}
    for name, spec, where in specs:
        values_list, spec_problems = _expand(spec, where)
        problems += spec_problems
        knobs = _stage_knobs(name) if values_list else None
        for values in values_list:
            problems += _candidate_problems(values, name, knobs, train, where)
        candidates[name] = tuple(Candidate(candidate_label(v), v) for v in values_list)
    # Candidates of one knob repeat the same complaint: say it once.
    return tuple(names), candidates, list(dict.fromkeys(problems))


def _unknown_stage(name: Any, where: str) -> str | None:
    """The problem with a stage name that no stage is registered under; None when one is."""
    known = stage_names()
    if name in known:
        return None
    listed = ", ".join(known) or "none (is tuneup installed?)"
    return f"{where}: unknown stage '{name}': {did_you_mean(name, known)}known stages are {listed}"


def _without(names: list[str], without: Any) -> tuple[list[str], list[str]]:
    """The ladder less the stages `probe.without` leaves out, and its problems."""
    if without is None:
        return names, []
    if not isinstance(without, list) or not all(isinstance(n, str) for n in without):
        return names, [f"probe.without: must be a list of stage names, got {without!r}"]
    problems = [p for n in without if (p := _unknown_stage(n, "probe.without")) is not None]
    return [n for n in names if n not in without], problems
