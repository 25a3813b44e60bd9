"""Presets for probing: the base training config, the stage plan and the probe budget.

A preset is YAML: `name`, `description`, `train` (TrainConfig knobs),
optionally `synthetic_data` (a box made on first use when no data path is
given) and `real_data` (the boxes the real run reads: the tutorial's where it
says nothing and probes on a synthetic box), `probe`, and a section for a
trainer that reads one, named after it (the `command` trainer's `command:`).
`probe` holds
`stages` (names, or a name mapped to that stage's own candidate values),
`budget`, `hints` (machine facts for exports and the cluster model) and
`launch` (`nproc`, `nodes`: the ranks each probe runs with; absent, the CLI's
default, the GPUs the allocation gives, applies).

Lookup of a name: the bundled presets first, then the user's config folder
($TUNEUP_CONFIG_DIR, else $XDG_CONFIG_HOME/tuneup, else ~/.config/tuneup;
presets in its `presets/` folder as NAME.yaml), then a path. A user preset
with a bundled preset's name is shadowed: load it by its path.

Validation is strict and complete: every problem is listed in one UsageError.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tuneup.bounded import OutOfBounds, read_yaml
from tuneup.bundled import bundled_preset_names, read_bundled_preset
from tuneup.errors import UsageError, did_you_mean
from tuneup.hardware.types import MachineInfo
from tuneup.preset import schema, stage_schema
from tuneup.preset.schema import PROBE_KEYS
from tuneup.preset.sections import check_sections
from tuneup.preset.types import Launch, ProbePreset
from tuneup.probe.stages import load_stage
from tuneup.probe.types import Candidate, default_budget

YAML_SUFFIXES = (".yaml", ".yml")
_NOT_IN_A_NAME = re.compile(r"[/\\\x00-\x1f\x7f]")


def problems_error(label: str, problems: list[str]) -> UsageError:
    """One error listing every problem: a first line, then one line per problem."""
    noun = "problem" if len(problems) == 1 else "problems"
    lines = [f"preset {label} has {len(problems)} {noun}:", *(f"  {p}" for p in problems)]
    return UsageError("\n".join(lines))


def parse_preset(data: Any, source: str, *, default_name: str | None = None) -> ProbePreset:
    """Check a preset mapping completely; raise one UsageError listing every problem.

    Args:
        data: the YAML document.
        source: names the preset in the error (its name or path).
        default_name: the name when the document gives none (the file's stem).
    """
    if not isinstance(data, Mapping):
        raise problems_error(source, [f"a preset must be a mapping, got {schema.type_name(data)}"])
    sections, problems = check_sections(data)
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            problems.append(f"{key}: must be text, got {schema.type_name(data[key])}")
    given = data.get("name")
    if isinstance(given, str) and (_NOT_IN_A_NAME.search(given) or given in (".", "..")):
        problems.append(
            f"name: must be a plain name, without '/', '\\' or control characters (it names "
            f"the results folder), got {given!r}"
        )
    train, found = schema.check_train(data.get("train"))
    problems += found
    synthetic, found = schema.check_synthetic(data.get("synthetic_data"))
    problems += found
    real, found = schema.check_real(data.get("real_data"), synthetic=synthetic is not None)
    problems += found
    probe = data.get("probe")
    if probe is None:
        probe = {}
    if not isinstance(probe, Mapping):
        problems.append(f"probe: must be a mapping, got {schema.type_name(probe)}")
        probe = {}
    problems += schema.unknown_keys(probe, PROBE_KEYS, "probe.")
    stages, candidates, found = stage_schema.check_stages(
        probe.get("stages"), train, without=probe.get("without"), own=probe.get("candidates")
    )
    problems += found
    laid_over = default_budget(str(train.get("device", "auto")))
    budget, found = schema.check_budget(probe.get("budget"), laid_over)
    problems += found
    hints, found = schema.check_hints(probe.get("hints"))
    problems += found
    launch, found = schema.check_launch(probe.get("launch"))
    problems += found
    costs, found = schema.check_costs(probe.get("costs"))
    problems += found
    if problems:
        raise problems_error(source, problems)
    name = data.get("name") or default_name or source
    return ProbePreset(
        name=str(name),
        description=" ".join(str(data.get("description") or "").split()),
        train=train,
        synthetic_data=synthetic,
        real_data=real,
        stages=stages,
        budget=dataclasses.replace(laid_over, **budget),
        hints=hints,
        stage_candidates=candidates,
        launch=Launch(**launch),
        sections=sections,
        document=_json_values(data),
        costs=costs,
    )


# --- where presets come from ------------------------------------------------------------------


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The user's folder: $TUNEUP_CONFIG_DIR, else $XDG_CONFIG_HOME/tuneup or ~/.config/tuneup."""
    env = os.environ if environ is None else environ
    if env.get("TUNEUP_CONFIG_DIR"):
        return Path(env["TUNEUP_CONFIG_DIR"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "tuneup"


def user_presets_dir(environ: Mapping[str, str] | None = None) -> Path:
    return config_dir(environ) / "presets"


def user_preset_files(environ: Mapping[str, str] | None = None) -> dict[str, Path]:
    """The user's presets by name (the file's stem); NAME.yaml wins over NAME.yml."""
    folder = user_presets_dir(environ)
    if not folder.is_dir():
        return {}
    found: dict[str, Path] = {}
    for suffix in reversed(YAML_SUFFIXES):
        for path in sorted(folder.glob(f"*{suffix}")):
            if path.is_file():
                found[path.stem] = path
    return dict(sorted(found.items()))


def _looks_like_path(text: str) -> bool:
    return "/" in text or os.sep in text or text.endswith(YAML_SUFFIXES) or text.startswith("~")


def _read_yaml(path: Path) -> Any:
    """The preset file's document, read within bounds (a binary file, an alias bomb)."""
    try:
        return read_yaml(path)
    except OutOfBounds as exc:
        raise UsageError(f"preset file {path} {exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise UsageError(f"preset file {path} is not valid YAML{at}: {problem}") from None
    except OSError as exc:
        raise UsageError(f"cannot read preset file {path}: {exc.strerror or exc}") from None


def _origin_of_file(path: Path, environ: Mapping[str, str] | None) -> str:
    folder = user_presets_dir(environ).expanduser()
    try:
        inside = path.resolve().parent == folder.resolve()
    except OSError:
        inside = False
    return f"{'user' if inside else 'file'}: {path}"


def _json_values(data: Mapping[str, Any]) -> dict[str, Any]:
    """The document as plain JSON values (a YAML date becomes its text)."""
    result: dict[str, Any] = json.loads(json.dumps(dict(data), default=str))
    return result


def _load_file(path: Path, environ: Mapping[str, str] | None) -> ProbePreset:
    resolved = path.expanduser().resolve()
    preset = parse_preset(_read_yaml(resolved), str(resolved), default_name=resolved.stem)
    return _with_place(preset, str(resolved), _origin_of_file(resolved, environ))


def _with_place(preset: ProbePreset, source: str, origin: str) -> ProbePreset:
    return dataclasses.replace(preset, source=source, origin=origin)


def known_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every name `load_preset` finds: the bundled ones, then the user's not shadowed."""
    bundled = bundled_preset_names()
    return bundled + [n for n in user_preset_files(environ) if n not in bundled]


def load_preset(name_or_path: str, *, environ: Mapping[str, str] | None = None) -> ProbePreset:
    """A preset by name (bundled, then the user's folder) or by path to a YAML file.

    Raises:
        UsageError: no such preset (the known names are listed), an unreadable
            file, or a preset with problems (every one listed).
    """
    text = str(name_or_path)
    if not _looks_like_path(text):
        if text in bundled_preset_names():
            preset = parse_preset(read_bundled_preset(text), text, default_name=text)
            return _with_place(preset, text, "bundled")
        user = user_preset_files(environ).get(text)
        if user is not None:
            return _load_file(user, environ)
    path = Path(text).expanduser()
    if path.is_file():
        return _load_file(path, environ)
    if _looks_like_path(text):
        raise UsageError(f"preset file not found: {path}")
    known = known_names(environ)
    raise UsageError(
        f"no preset named '{text}': {did_you_mean(text, known)}known presets are "
        f"{', '.join(known)} (user presets go in {user_presets_dir(environ)}/NAME.yaml), "
        "or give a path to a YAML file"
    )


@dataclass(frozen=True)
class PresetEntry:
    """One line of `tuneup presets list`.

    Attributes:
        origin: "bundled" or "user: PATH".
        shadowed: a user preset hidden by a bundled one of the same name.
        error: why it does not load (None when it does).
    """

    name: str
    origin: str
    description: str
    path: Path | None = None
    shadowed: bool = False
    error: str | None = None


def list_presets(environ: Mapping[str, str] | None = None) -> list[PresetEntry]:
    """Every preset, bundled then the user's; what fails to load is listed with why."""
    bundled = bundled_preset_names()
    entries = [
        _entry(name, functools.partial(load_preset, name, environ=environ)) for name in bundled
    ]
    for name, path in user_preset_files(environ).items():
        entry = _entry(name, functools.partial(_load_file, path, environ), path)
        entries.append(dataclasses.replace(entry, shadowed=name in bundled))
    return entries


def _entry(name: str, load: Callable[[], ProbePreset], path: Path | None = None) -> PresetEntry:
    origin = "bundled" if path is None else f"user: {path}"
    try:
        preset = load()
    except UsageError as exc:
        first = str(exc).splitlines()[0].rstrip(":")
        return PresetEntry(name, origin, "", path, error=first)
    return PresetEntry(name, origin, preset.description, path)


# --- a preset as YAML again -------------------------------------------------------------------


def preset_to_dict(preset: ProbePreset) -> dict[str, Any]:
    """The preset as a mapping `parse_preset` reads back to the same preset."""
    stages: list[Any] = []
    for name in preset.stages:
        cands = preset.stage_candidates.get(name)
        stages.append(name if cands is None else {name: _candidates_yaml(cands)})
    probe: dict[str, Any] = {"stages": stages, "budget": preset.budget.to_dict()}
    if preset.hints:
        probe["hints"] = dict(preset.hints)
    launch = {k: v for k, v in vars(preset.launch).items() if v is not None}
    if launch:
        probe["launch"] = launch
    if preset.costs is not None:
        probe["costs"] = dict(preset.costs)
    data: dict[str, Any] = {"name": preset.name, "description": preset.description}
    if preset.synthetic_data is not None:
        data["synthetic_data"] = dict(preset.synthetic_data)
    if preset.real_data is not None:
        data["real_data"] = preset.real_data.to_dict()
    data["train"] = dict(preset.train)
    data["probe"] = probe
    for trainer, section in preset.sections.items():
        data[trainer] = dict(section)
    return data


def _candidates_yaml(cands: tuple[Candidate, ...]) -> Any:
    """`{knob: [values]}` when every candidate sets the same one knob, else a list of mappings."""
    knobs = {tuple(c.values) for c in cands}
    if len(knobs) == 1 and len(next(iter(knobs))) == 1:
        (knob,) = next(iter(knobs))
        return {knob: [c.values[knob] for c in cands]}
    return [dict(c.values) for c in cands]


def preset_yaml(preset: ProbePreset) -> str:
    return yaml.safe_dump(preset_to_dict(preset), sort_keys=False, default_flow_style=None)


# --- using a preset ---------------------------------------------------------------------------


def apply_stage_candidates(stage: Any, preset: ProbePreset) -> Any:
    """`stage` with the preset's own candidate values for it, when the preset gives some.

    Raises:
        UsageError: a candidate sets a knob the stage does not own.
    """
    cands = preset.stage_candidates.get(stage.name)
    if cands is None:
        return stage
    try:
        return stage.with_candidates(cands)
    except ValueError as exc:
        raise UsageError(f"preset {preset.name}, stage {stage.name}: {exc}") from None


def preset_stage(name: str, preset: ProbePreset) -> Any:
    """Load stage `name` from the registry with the preset's candidates applied."""

    return apply_stage_candidates(load_stage(name), preset)


def preset_warnings(preset: ProbePreset, machine: MachineInfo) -> list[str]:
    """Values that cannot work on this machine, one line each (warnings: the preset still loads)."""
    warnings = []
    ranks = preset.launch.nproc or machine.ranks_per_node
    per_rank = max(1, machine.cpus_usable // max(1, ranks))
    share = f"{machine.cpus_usable} usable / {ranks} rank{'s' if ranks != 1 else ''}"
    cpus = f"{per_rank} CPU{'s' if per_rank != 1 else ''}"
    workers = preset.train.get("num_data_workers")
    if isinstance(workers, int) and workers > per_rank:
        warnings.append(
            f"train.num_data_workers is {workers}, more than the {cpus} each rank has "
            f"here ({share}): workers would share cores"
        )
    counts = [c.values.get("num_data_workers") for c in preset.stage_candidates.get("workers", ())]
    over = [str(n) for n in counts if isinstance(n, int) and n > per_rank]
    if over:
        warnings.append(
            f"probe.stages.workers: {_and(over)} workers are more than the {cpus} each rank "
            f"has here ({share})"
        )
    device = preset.train.get("device", "auto")
    on_gpu = device != "cpu"
    if device == "cuda" and not machine.cuda:
        why = "GPUs visible, but this torch has no CUDA" if machine.gpu_count else "no GPU visible"
        warnings.append(f"train.device is cuda, but this machine has no CUDA ({why})")
    gpus = schema.flat_hints(preset.hints).get("gpus_per_node")
    if on_gpu and isinstance(gpus, int) and gpus > machine.gpu_count:
        warnings.append(
            f"probe.hints.gpus_per_node is {gpus}, but {machine.gpu_count} GPU"
            f"{'s are' if machine.gpu_count != 1 else ' is'} visible here"
        )
    nproc = preset.launch.nproc
    if on_gpu and nproc is not None and nproc > machine.gpu_count:
        warnings.append(
            f"probe.launch.nproc is {nproc} (one rank per GPU), but {machine.gpu_count} GPU"
            f"{'s are' if machine.gpu_count != 1 else ' is'} visible here"
        )
    return warnings


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def default_preset_name(cuda: bool) -> str:
    """Without GPU facts: the CPU smoke ladder without CUDA, else generic-cuda (see autopick)."""
    return "generic-cuda" if cuda else "cpu-smoke"
