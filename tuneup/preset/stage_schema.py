"""The checks of a preset's `probe.stages`, `probe.without` and `probe.candidates`: which
stages run, in which order, with which candidate values; every problem, one line each
(as the rest of the schema, tuneup.preset.schema).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from tuneup.errors import UsageError, did_you_mean
from tuneup.preset.schema import config_problem, type_name
from tuneup.probe.stages import default_ladder, load_stage, stage_names, unknown_stage
from tuneup.probe.types import Candidate


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
        message = config_problem({knob: value})
        if message is not None and config_problem({**train, knob: value}) is not None:
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
    if name in stage_names():
        return None
    return f"{where}: {unknown_stage(str(name))}"


def _without(names: list[str], without: Any) -> tuple[list[str], list[str]]:
    """The ladder less the stages `probe.without` leaves out, and its problems."""
    if without is None:
        return names, []
    if not isinstance(without, list) or not all(isinstance(n, str) for n in without):
        return names, [f"probe.without: must be a list of stage names, got {without!r}"]
    problems = [p for n in without if (p := _unknown_stage(n, "probe.without")) is not None]
    return [n for n in names if n not in without], problems
