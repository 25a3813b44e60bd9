"""A registry of plugins found through one entry-point group, shared by stages and trainers.

Three ways in, as harlequin does it: listing names reads package metadata and
imports nothing; loading one by name imports only that plugin and raises a
clear UsageError; scanning all imports every plugin, turns each failure into
a one-line warning and keeps going. A plugin is reported and skipped when it
fails to import, is not the expected kind of object, names itself differently
from its entry point, was written for a plugin API version this tuneup does
not support, or repeats a name already taken (tuneup's own plugins win a
clash, so a third-party package cannot shadow a built-in stage).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from tuneup.errors import UsageError, did_you_mean

PLUGIN_API_VERSION = 3
"""The plugin API this tuneup implements. It changes only when a change to the
stage or trainer-adapter interface would break an existing plugin."""

# Version 3 renamed Budget to ProbeBudget and added what a plugin may leave out (a
# stage's `order`, the ProbeBackend base): a version-2 plugin that does not import
# Budget runs unchanged (plugins/README.md, "From version 2 to 3").
SUPPORTED_API_VERSIONS = (2, PLUGIN_API_VERSION)

BUILTIN = "built-in"
_BUILTIN_DISTRIBUTION = "tuneup"
_BUILTIN_MODULES = ("tuneup", "tuneup_plugins")

T = TypeVar("T")


@dataclass(frozen=True)
class PluginInfo:
    """One entry point as `tuneup plugins list` shows it.

    Attributes:
        kind: "stage" or "trainer".
        name: the entry point's name.
        value: where it points ("module:attribute").
        origin: "built-in", or the distribution that provides it ("name version").
        status: "ok", or the one-line reason it is skipped.
        description: the plugin's own description when it loaded, else "".
    """

    kind: str
    name: str
    value: str
    origin: str
    status: str
    description: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def origin_of(ep: importlib.metadata.EntryPoint) -> str:
    """ "built-in" for tuneup's own entry points, else the providing distribution.

    An entry point built without a distribution (tests, odd installs) is
    judged by its module's top-level package.
    """
    dist = getattr(ep, "dist", None)
    if dist is not None:
        name = dist.metadata["Name"] or ""
        if _normalise(name) == _BUILTIN_DISTRIBUTION:
            return BUILTIN
        version = dist.version
        return f"{name} {version}" if version else name
    top = ep.value.split(":", 1)[0].split(".", 1)[0].strip()
    return BUILTIN if top in _BUILTIN_MODULES else f"module {top}"


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


class Registry(Generic[T]):
    """The plugins of one entry-point group, all instances of one class.

    Args:
        group: the entry-point group, e.g. "tuneup.stages".
        kind: the word used in messages, e.g. "stage".
        cls: the class every plugin object must be an instance of; it has
            `name` and `api_version` attributes.
    """

    def __init__(self, group: str, kind: str, cls: type[T]) -> None:
        self.group = group
        self.kind = kind
        self.cls = cls

    def entry_points(self) -> list[importlib.metadata.EntryPoint]:
        """The group's entry points, tuneup's own first, otherwise in discovery order.

        Looked up through the module at call time so tests can monkeypatch
        `importlib.metadata.entry_points`.
        """
        eps = list(importlib.metadata.entry_points(group=self.group))
        return sorted(eps, key=lambda ep: origin_of(ep) != BUILTIN)

    def names(self) -> list[str]:
        """Registered names, sorted; reads metadata and imports nothing."""
        return sorted({ep.name for ep in self.entry_points()})

    def load(self, name: str) -> T:
        """The plugin registered as `name` (tuneup's own when names clash).

        Raises:
            UsageError: no plugin has that name (the known ones are listed), or
                it fails to import or check.
        """
        for ep in self.entry_points():
            if ep.name == name:
                return self._load(ep)
        known = self.names()
        hint = did_you_mean(name, known)
        listed = ", ".join(known) if known else "none (is tuneup installed?)"
        raise UsageError(f"unknown {self.kind} '{name}': {hint}known {self.kind}s are {listed}")

    def scan(self) -> tuple[dict[str, T], list[str]]:
        """Load every plugin; each broken one becomes a warning line and is skipped.

        Returns:
            The plugins by name (sorted), and one warning per skipped entry
            point, for the caller to print on stderr.
        """
        loaded: dict[str, T] = {}
        warnings: list[str] = []
        for ep, info, obj in self._walk():
            if obj is None:
                warnings.append(f"{self._label(ep)} from {info.origin} {info.status}: skipped")
            else:
                loaded[info.name] = obj
        return dict(sorted(loaded.items())), warnings

    def describe(self) -> list[PluginInfo]:
        """Every entry point with its origin and status, sorted by name (imports them all)."""
        return sorted((info for _, info, _ in self._walk()), key=lambda i: (i.name, not i.ok))

    def _walk(self) -> list[tuple[importlib.metadata.EntryPoint, PluginInfo, T | None]]:
        taken: dict[str, str] = {}  # name -> origin of the plugin that holds it
        rows: list[tuple[importlib.metadata.EntryPoint, PluginInfo, T | None]] = []
        for ep in self.entry_points():
            origin = origin_of(ep)
            obj: T | None = None
            description = ""
            if ep.name in taken:
                status = f"repeats a name already loaded (from {taken[ep.name]})"
            else:
                obj, status = self._check(ep)
                if obj is not None:
                    taken[ep.name] = origin
                    description = _one_line(getattr(obj, "description", ""))
            info = PluginInfo(self.kind, ep.name, ep.value, origin, status, description)
            rows.append((ep, info, obj))
        return rows

    def _label(self, ep: importlib.metadata.EntryPoint) -> str:
        return f"{self.kind} plugin '{ep.name}' ({ep.value})"

    def _load(self, ep: importlib.metadata.EntryPoint) -> T:
        """Import one entry point and check it; every failure is a one-line UsageError."""
        obj, problem = self._check(ep)
        if obj is None:
            raise UsageError(f"{self._label(ep)} {problem}")
        return obj

    def _check(self, ep: importlib.metadata.EntryPoint) -> tuple[T | None, str]:
        """The plugin and "ok", or None and what is wrong with it (one line)."""
        try:
            obj: Any = ep.load()
        except Exception as exc:  # any error inside a third-party plugin
            return None, "failed to import: " + _one_line(f"{type(exc).__name__}: {exc}")
        if not isinstance(obj, self.cls):
            path = f"{self.cls.__module__}.{self.cls.__qualname__}"
            return None, f"is a {type(obj).__name__}, not a {path}"
        version = getattr(obj, "api_version", None)
        if version not in SUPPORTED_API_VERSIONS:
            supported = ", ".join(str(v) for v in SUPPORTED_API_VERSIONS)
            return None, (
                f"was written for plugin API version {version}; this tuneup supports versions "
                f"{supported} (upgrade whichever of the two is older)"
            )
        name = getattr(obj, "name", None)
        if name != ep.name:
            return None, (
                f"calls itself '{name}': the entry point's name and the {self.kind}'s name "
                "must match"
            )
        return obj, "ok"


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


GROUPS = {"tuneup.stages": "stage", "tuneup.trainers": "trainer"}


def declared_entry_points(pyproject: Path) -> dict[str, dict[str, str]]:
    """The entry points a source checkout's pyproject.toml declares, by group (empty when
    there is none: an installed wheel has no pyproject beside its package; or on Python
    3.10, which reads no TOML: the check is for developers' checkouts)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return {}
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    declared = document.get("project", {}).get("entry-points", {})
    return {group: dict(declared.get(group) or {}) for group in GROUPS}


def unregistered(
    declared: Mapping[str, Mapping[str, str]],
    installed: Mapping[str, Iterable[importlib.metadata.EntryPoint]],
) -> list[str]:
    """One line per built-in stage or trainer the checkout declares but the installed
    metadata does not yet know: it exists only after `pip install -e .` again, and until
    then tuneup leaves it out without a word."""
    lines = []
    for group, names in declared.items():
        known = {ep.name: ep.value for ep in installed.get(group, ())}
        for name, value in sorted(names.items()):
            if known.get(name) != value:
                lines.append(
                    f"{GROUPS.get(group, group)} '{name}' ({value}) is declared in "
                    "pyproject.toml but not registered: run `pip install -e .` again"
                )
    return lines


def checkout_unregistered() -> list[str]:
    """`unregistered` for the checkout this tuneup runs from (none for an installed wheel)."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    declared = declared_entry_points(pyproject)
    if not any(declared.values()):
        return []
    installed = {g: list(importlib.metadata.entry_points(group=g)) for g in GROUPS}
    lines = unregistered(declared, installed)
    try:
        found = getattr(importlib.metadata.distribution(_BUILTIN_DISTRIBUTION), "_path", None)
    except importlib.metadata.PackageNotFoundError:
        found = None
    if lines and found is not None and Path(found).suffix == ".egg-info":
        # an old build's metadata beside the sources is read first from the checkout
        return [f"{line}, or delete the stale {found} that shadows it" for line in lines]
    return lines
