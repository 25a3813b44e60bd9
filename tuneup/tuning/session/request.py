"""What a front end asks of a session, each setting declared once: its default, its flag,
its help, and how its text is read.

`tuneup probe` and `tuneup tui` build their arguments from these declarations
(`add_arguments`) and the request from what was given (`from_arguments`), so a new
setting is one field here, not a flag, a keyword and a parameter in four places.
Kept light (no import of the session's machinery): `tuneup --help` builds the
parser at once.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneup.errors import UsageError

if TYPE_CHECKING:
    from tuneup.probe.types import ProbeBudget


def parse_stages(text: str | None) -> tuple[str, ...] | None:
    """`--stages a,b` as names; None when the flag was not given."""
    if text is None:
        return None
    return tuple(s.strip() for s in text.split(",") if s.strip())


def parse_budget(text: str) -> float:
    """`--budget 10m` in seconds (tuneup.probe.durations.parse_duration)."""
    from tuneup.probe.durations import parse_duration  # loaded when given: --help stays instant

    return parse_duration(text)


def parse_count(text: str) -> int:
    """A count of ranks or nodes: a whole number of at least 1 (`--nproc`, the app's field)."""
    given = text.strip()
    if not given.isdigit() or int(given) < 1:
        raise ValueError(f"must be a whole number of at least 1, got {text!r}")
    return int(given)


@dataclass(frozen=True)
class Field:
    """A setting's face in the app: a text field (`Input`) with this id and placeholder,
    validated by the flag's own parser (`read_setting`)."""

    id: str
    placeholder: str


def setting(
    default: Any,
    flag: str | None = None,
    help: str = "",
    *,
    metavar: str | None = None,
    parse: Callable[[str], Any] | None = None,
    kind: type | None = None,
    choices: tuple[str, ...] | None = None,
    switch: bool = False,
    app: Field | None = None,
) -> Any:
    """A request field with its command-line face (none: set by the app alone) and its
    face in the app's setup screen (`app`; none: the screen sets it another way).

    `parse` reads the flag's text (a ValueError is the flag's one-line error), `kind`
    converts it (int), `switch` makes a flag without a value that sets True.
    """
    face = {
        "flag": flag,
        "help": help,
        "metavar": metavar,
        "parse": parse,
        "kind": kind,
        "choices": choices,
        "switch": switch,
        "app": app,
    }
    return field(default=default, metadata=face)


PRESET_HELP = (
    "preset name or YAML path (default: picked by the GPUs found, by GPU 0's model and their "
    "count: H200: h200; H100: jean-zay-h100; A100: jean-zay-a100 (8+ of 80 GB), "
    "perlmutter-a100-4gpu (4+) or perlmutter-a100; V100: summit-v100 (6+) or jean-zay-v100; "
    "another model: generic-cuda; no GPU, or a torch without CUDA: cpu-smoke; it says which "
    "and why)"
)
TRAINER_HELP = (
    "unet (the real trainer, default), sim (a synthetic response surface that answers in "
    "milliseconds), command (any training script, set up in the preset's command section) "
    "or an installed plugin's (see `tuneup plugins list`)"
)


@dataclass(frozen=True)
class SessionRequest:
    """What a front end asks for; None means the default (new) or what was recorded (resume).

    Attributes:
        preset: a preset name or YAML path; None: picked by the GPUs found.
        stages: the stages to run, in order; None: the preset's.
        trainer: a registered trainer's name; None: DEFAULT_TRAINER.
        search: "staged" or "grid".
        seed: the session's seed.
        nproc: ranks per node; None: the preset's, else what the job gives.
        nodes: nodes per probe; None: likewise.
        data_path: the user's training file (train.h5; its sibling val.h5 is used
            when present); None: the preset's data, or its synthetic box.
        budget: replaces the preset's probe budget (the app's setting).
        fresh_processes: every probe in a process of its own (a trainer that can
            share one, the U-Net's, does so otherwise); None: no (new) or as recorded.
        time_budget_s: the ladder's time budget in seconds (`--budget`); None: the
            allocation's time left, or none outside a job. The ladder is planned to
            fit it and kept to it (tuning.planner).
        retry_failed: on a resume, measure again every journaled probe that failed or
            ran contended (`--retry-failed`); without it, only those whose cause may be
            gone (ProbeSession.start says which).
        accept_changes: on a resume in a setting that differs from the recorded one
            (tuneup.tuning.session.setting), keep the journaled baseline; without it the
            baseline is measured again, and the new probes compare against it.
    """

    preset: str | None = setting(None, "--preset", PRESET_HELP, metavar="P")
    stages: tuple[str, ...] | None = setting(
        None, "--stages", "only these stages, in this order", metavar="a,b,...", parse=parse_stages
    )
    trainer: str | None = setting(None, "--trainer", TRAINER_HELP, metavar="T")
    nproc: int | None = setting(
        None,
        "--nproc",
        "ranks per node, one per GPU (default: the GPUs the allocation gives, 1 on a "
        "CPU-only machine); more than 1 runs each probe under torchrun",
        metavar="N",
        parse=parse_count,
        app=Field("nproc", "ranks per node"),
    )
    nodes: int | None = setting(
        None,
        "--nodes",
        "nodes per probe (default: the nodes of the SLURM allocation, else 1); more than 1 "
        "runs each probe through srun",
        metavar="M",
        parse=parse_count,
        app=Field("nodes", "nodes"),
    )
    search: str | None = setting(
        None,
        "--search",
        "staged greedy search (default) or the full grid",
        choices=("staged", "grid"),
    )
    seed: int | None = setting(None, "--seed", "seed (default 0)", metavar="S", kind=int)
    data_path: Path | None = setting(
        None,
        help="the tutorial's train.h5 (its sibling val.h5 is used when present); empty: the "
        "preset's data, or its synthetic box made on first use",
        app=Field("data", "empty: synthesize the preset's box; or the path of train.h5"),
    )
    budget: ProbeBudget | None = setting(None)
    fresh_processes: bool | None = setting(
        None,
        "--fresh-processes",
        "start every probe in a process of its own (slower: by default the ladder's probes "
        "share one warm worker, and a fresh one starts only where a knob or a failure "
        "demands it)",
        switch=True,
    )
    time_budget_s: float | None = setting(
        None,
        "--budget",
        "the ladder's time budget (10m, 90s, 1h30m or HH:MM:SS; default: the time left in "
        "the SLURM allocation, else none): it says before the first probe what fits and "
        "what it leaves out, keeps to it, and confirms the best it found",
        metavar="TIME",
        parse=parse_budget,
        app=Field("time-budget", "none"),
    )
    retry_failed: bool = setting(
        False,
        "--retry-failed",
        "with --resume: measure again every journaled probe that failed or ran contended "
        "(once its cause is fixed)",
        switch=True,
    )
    accept_changes: bool = setting(
        False,
        "--accept-changes",
        "with --resume on a machine that changed since the session ran (CPUs, thread "
        "settings, GPUs, driver, torch, the preset): go on with the journaled baseline "
        "instead of measuring it again in the new setting",
        switch=True,
    )


def _face(name: str) -> Mapping[str, Any]:
    """A setting's declared face: its flag, help and parser."""
    return next(f.metadata for f in dataclasses.fields(SessionRequest) if f.name == name)


def app_field(name: str) -> Field:
    """A setting's field in the app, as declared (a KeyError: it declares none)."""
    face = _face(name).get("app")
    if not isinstance(face, Field):
        raise KeyError(f"setting {name} declares no field in the app")
    return face


def help_of(name: str) -> str:
    """A setting's help, as declared: the app's tooltip says what the flag's help says."""
    return str(_face(name).get("help", ""))


def _faces(names: Iterable[str] | None) -> list[dataclasses.Field[Any]]:
    fields = [f for f in dataclasses.fields(SessionRequest) if f.metadata.get("flag")]
    if names is None:
        return fields
    wanted = list(names)
    by_name = {f.name: f for f in fields}
    return [by_name[n] for n in wanted]


def add_arguments(
    parser: argparse.ArgumentParser,
    names: Iterable[str] | None = None,
    helps: dict[str, str] | None = None,
) -> None:
    """The request's flags (those of `names`, else all), each as declared; `helps` gives a
    command its own words for a flag."""
    for f in _faces(names):
        face = f.metadata
        text = (helps or {}).get(f.name, face["help"])
        if face["switch"]:
            parser.add_argument(
                face["flag"],
                dest=f.name,
                action="store_const",
                const=True,
                default=f.default,
                help=text,
            )
            continue
        parser.add_argument(
            face["flag"],
            dest=f.name,
            default=None,
            metavar=face["metavar"],
            help=text,
            type=face["kind"],
            choices=face["choices"],
        )


def from_arguments(args: argparse.Namespace, **more: Any) -> SessionRequest:
    """The request the parsed `args` ask for (flags absent from them keep their default),
    with `more` fields set by the caller.

    Raises:
        UsageError: a flag's text that does not read (`--budget 10 minutes`), in one line.
    """
    values: dict[str, Any] = {}
    for f in _faces(None):
        if not hasattr(args, f.name):
            continue
        given = getattr(args, f.name)
        values[f.name] = given if given is None else read_setting(f.name, given)
    return SessionRequest(**values, **more)


def read_setting(name: str, text: Any) -> Any:
    """A setting's value from its text, as its flag reads it: the app's field validates with
    this, so both faces take the same text and refuse it in the same words.

    Raises:
        UsageError: text that does not read, in one line naming the flag.
    """
    face = _face(name)
    parse = face.get("parse")
    if parse is None:
        return text
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"{face.get('flag') or name}: {exc}") from None
