"""The stage API and the registry that finds stages through entry points.

A stage proposes variants of one knob (or a few linked knobs) on top of the
incumbent configuration. Stages are plain data plus one method
(`candidates_for`), so the app can list and render them and the search can
plan them without running anything. Built-in stages live in
``tuneup_plugins.stages`` and register exactly as a third-party package would,
under the entry-point group ``tuneup.stages``.

The registry (tuneup.plugin_registry, shared with the trainer adapters)
separates listing (names only, imports nothing), loading one by name (a clear
UsageError) and scanning all (a broken plugin is a warning and is skipped).
Each stage declares the plugin API version it was written for
(`api_version`); plugins/README.md is the guide for plugin authors.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuneup.config import TrainConfig, build_config, knob_names
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.plugin_registry import PLUGIN_API_VERSION, PluginInfo, Registry
from tuneup.probe.types import PHASES, Candidate

ENTRY_POINT_GROUP = "tuneup.stages"
API_VERSION = PLUGIN_API_VERSION  # what a stage built against this tuneup declares

# What a stage may declare in `needs`, checked against MachineInfo.
REQUIREMENTS = ("cuda", "apex", "multi_gpu", "multi_rank", "dali")


def requirement_missing(need: str, machine: MachineInfo) -> str | None:
    """Why `machine` lacks `need`, as a short reason; None when it has it."""
    if need == "cuda":
        if machine.cuda:
            return None
        if machine.gpu_count > 0:
            return "needs CUDA (GPUs visible, but this torch build has no CUDA)"
        return "needs CUDA (no GPU visible)"
    if need == "apex":
        return None if machine.apex else "needs NVIDIA apex (not importable)"
    if need == "dali":
        return None if machine.dali else "needs NVIDIA DALI (not importable)"
    if need == "multi_gpu":
        ranks = max(machine.gpu_count, machine.world_size)
        return None if ranks >= 2 else f"needs several GPUs ({machine.gpu_count} visible)"
    if need == "multi_rank":
        if machine.world_size >= 2:
            return None
        return "needs a multi-rank probe (run with --nproc 2 or more, or --nodes 2 or more)"
    raise ValueError(f"unknown requirement {need!r}: expected one of {', '.join(REQUIREMENTS)}")


@functools.lru_cache(maxsize=1)
def _defaults() -> dict[str, Any]:
    return TrainConfig().to_dict()


def knob_defaults() -> dict[str, Any]:
    """Every knob's default value (a fresh copy), for reading a partial incumbent."""
    return copy.deepcopy(_defaults())


def current(base: Mapping[str, Any], knob: str) -> Any:
    """The incumbent's value of `knob`: its own, else the knob's default."""
    if knob in base:
        return base[knob]
    return _defaults()[knob]


def runs_on_cuda(machine: MachineInfo, base: Mapping[str, Any]) -> bool:
    """Whether the incumbent will train on a GPU of this machine (device auto|cuda)."""
    return machine.cuda and current(base, "device") != "cpu"


@dataclass(frozen=True)
class Proposal:
    """What a stage will do from one incumbent: the variants to probe, or why it is skipped.

    `rejected` holds (label, reason) for candidates dropped because they would
    not make a valid configuration on top of this incumbent.
    """

    stage: str
    candidates: tuple[Candidate, ...] = ()
    reason: str | None = None
    rejected: tuple[tuple[str, str], ...] = ()

    @property
    def skipped(self) -> bool:
        return self.reason is not None


@dataclass(frozen=True)
class Stage:
    """A probe stage: plain data plus `candidates_for`.

    Attributes:
        name: the registry name (the entry point's name), used in presets and the journal.
        title: a few words for the app's list.
        description: one or two sentences saying what the stage finds out and why.
        knobs: the TrainConfig knobs its candidates set.
        needs: requirements from REQUIREMENTS; the stage is skipped when one is missing.
        candidates: the declared variants; subclasses may derive them from the machine
            and the incumbent instead.
        judged_on: the phase whose figure decides it, the phase its knobs can move:
            "io" for a loader knob (the loader alone), "synthetic" for a compute
            knob (the model on one cached batch), "full" (the real loop) for a knob
            that moves both or neither. The configuration a stage adopts is then
            measured whole and FULL checked against min(IO, SYNTHETIC); where the
            two disagree the stage is decided on FULL.
        expected_gain: the relative speed-up the stage typically brings (0.3 for
            +30%; 0 for a stage that shows what a switch is worth, such as TF32
            off): what a time budget keeps first.
        order: its place in the default ladder (lower runs first), the one declaration
            of that order: every registered stage with an order runs in a preset that
            does not list its stages. None: only where a preset lists it.
        api_version: the plugin API version the stage was written for; the
            registry skips a stage whose version this tuneup does not support.
    """

    name: str
    title: str
    description: str
    knobs: tuple[str, ...]
    needs: tuple[str, ...] = ()
    candidates: tuple[Candidate, ...] = field(default=())
    judged_on: str = "full"
    expected_gain: float = 0.0
    order: float | None = None
    api_version: int = API_VERSION

    def __post_init__(self) -> None:
        # A plugin author's mistake, caught when the plugin is imported.
        unknown = [n for n in self.needs if n not in REQUIREMENTS]
        if unknown:
            raise ValueError(
                f"stage {self.name!r}: unknown needs {unknown}; "
                f"choose from {', '.join(REQUIREMENTS)}"
            )

        if self.judged_on not in PHASES:
            raise ValueError(
                f"stage {self.name!r}: judged_on {self.judged_on!r}; "
                f"choose from {', '.join(PHASES)}"
            )
        names = set(knob_names())
        bad = [k for k in self.knobs if k not in names]
        if bad:
            raise ValueError(f"stage {self.name!r}: {bad} are not TrainConfig knobs")
        for cand in self.candidates:
            stray = [k for k in cand.values if k not in self.knobs]
            if stray:
                raise ValueError(
                    f"stage {self.name!r}: candidate {cand.label!r} sets {stray}, "
                    f"which are not among its knobs {list(self.knobs)}"
                )

    def unavailable_reason(self, machine: MachineInfo) -> str | None:
        """Why this machine cannot run the stage at all (the first missing need); None if it can."""
        for need in self.needs:
            reason = requirement_missing(need, machine)
            if reason is not None:
                return reason
        return None

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        """Why the incumbent `base` rules the stage out on this machine; None when it does not.

        The default is None. Stages whose candidates depend on the incumbent override
        it to say why `candidates_for` has nothing to offer (e.g. "the incumbent
        trains on the CPU").
        """
        del machine, base
        return None

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        """The variants to try on top of `base` (the incumbent's knob values, maybe partial).

        The default is the declared candidates, or none when `incumbent_reason`
        gives a reason. Override to derive them from the machine or the incumbent;
        return [] (never raise) when there is nothing to try.
        """
        if self.incumbent_reason(machine, base) is not None:
            return []
        return list(self.candidates)

    def with_candidates(self, candidates: Iterable[Candidate]) -> Stage:
        """A copy with other declared candidates (a preset's own values for this stage)."""
        return dataclasses.replace(self, candidates=tuple(candidates))

    def propose(self, machine: MachineInfo, base: Mapping[str, Any]) -> Proposal:
        """Decide what to probe from `base`: skip with a reason, or the distinct valid variants.

        Variants that change nothing are dropped (the incumbent is already measured);
        variants that make an invalid configuration are dropped with the error.
        """
        reason = self.unavailable_reason(machine) or self.incumbent_reason(machine, base)
        if reason is not None:
            return Proposal(self.name, reason=reason)

        kept: list[Candidate] = []
        rejected: list[tuple[str, str]] = []
        for cand in self.candidates_for(machine, base):
            if all(current(base, k) == v for k, v in cand.values.items()):
                continue
            try:
                build_config({**base, **cand.values}, source=f"stage {self.name}")
            except UsageError as exc:
                rejected.append((cand.label, str(exc)))
                continue
            kept.append(cand)
        if not kept:
            why = "every candidate matches the incumbent" if not rejected else "no valid candidate"
            return Proposal(self.name, reason=why, rejected=tuple(rejected))
        return Proposal(self.name, candidates=tuple(kept), rejected=tuple(rejected))


# --- the registry ---------------------------------------------------------------------------

_REGISTRY: Registry[Stage] = Registry(ENTRY_POINT_GROUP, "stage", Stage)


def stage_names() -> list[str]:
    """Names of the registered stages, sorted; reads entry-point metadata and imports nothing."""
    return _REGISTRY.names()


def unknown_stage(name: str) -> str:
    """Why no stage is registered as `name`, in one line: a built-in one this checkout
    declares but has not registered names the reinstall; else the known names."""
    return _REGISTRY.unknown(name)


def default_ladder() -> tuple[str, ...]:
    """The default ladder: every registered stage that declares an `order`, in that order.

    Every stage is imported to learn its `order` (entry points carry only names), a
    third-party one in isolation; one that fails to load is left out, and
    `skipped_stages` (said by `tuneup probe`) and `tuneup plugins list` say why.
    """
    stages, _warnings = scan_stages()
    placed = [(s.order, name) for name, s in stages.items() if s.order is not None]
    return tuple(name for _order, name in sorted(placed))


def load_stage(name: str) -> Stage:
    """Load the stage registered as `name` (the built-in one when a plugin repeats its name).

    Raises:
        UsageError: no stage has that name (the known ones are listed), or its
            plugin fails to import, is not a Stage, names itself differently or
            was written for an unsupported plugin API version.
    """
    return _REGISTRY.load(name)


def scan_stages() -> tuple[dict[str, Stage], list[str]]:
    """Load every registered stage; broken plugins are reported and skipped.

    Returns:
        The stages by name, and one warning line per plugin that failed to
        import, is not a Stage, has an unsupported API version or repeats a
        name already loaded. The caller prints the warnings (on stderr) and
        keeps going.
    """
    return _REGISTRY.scan()


def skipped_stages() -> list[str]:
    """One warning per stage plugin this process tried and skipped; imports nothing."""
    return _REGISTRY.skipped()


def describe_stages() -> list[PluginInfo]:
    """Every stage entry point with its origin and status, for `tuneup plugins list`."""
    return _REGISTRY.describe()
