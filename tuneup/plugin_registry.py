"""A registry of plugins found through one entry-point group, shared by stages and trainers.

Three ways in, as harlequin does it: listing names reads package metadata and
imports nothing; loading one by name imports only that plugin and raises a
clear UsageError; scanning all imports every plugin, turns each failure into
a one-line warning and keeps going. A plugin is reported and skipped when it
fails to import, is not the expected kind of object, names itself differently
from its entry point, was written for a plugin API version this tuneup does
not support, or repeats a name already taken (tuneup's own plugins win a
clash, so a third-party package cannot shadow a built-in stage).

A third-party plugin imports in a thread within a time limit, its output captured: one
that exits at import (argparse at module level), fails or hangs is named and skipped, never
heard as tuneup. Each is tried once a process; `skipped` says which of those tried failed.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import math
import os
import threading
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

IMPORT_TIME_LIMIT_S = 10.0
"""Seconds a third-party plugin's import may take before it is called hung and skipped:
enough for a cold `import torch` from a network filesystem, short beside a ladder."""
IMPORT_TIME_LIMIT_ENV = "TUNEUP_PLUGIN_IMPORT_TIMEOUT_S"
_PRINTED_CHARS = 160  # of what a broken plugin printed at import, quoted in its warning

# Top-level packages whose import ran past the limit -> the plugin that hung. Its thread holds
# their import locks: importing them again would hang the process (as wide as the locks).
_HUNG: dict[str, str] = {}
_IMPORTING = threading.Lock()  # one at a time: sys.stdout and sys.stderr are swapped
_INSIDE = threading.local()  # set in an import thread: a plugin loading another is bounded

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
    top = _top_package(ep)
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
        # each entry point is checked once a process (a broken one exits or hangs once)
        self._checked: dict[tuple[str, str, str], tuple[T | None, str]] = {}

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
        raise UsageError(self.unknown(name))

    def unknown(self, name: str) -> str:
        """Why no plugin answers to `name`, in one line: one this checkout declares but
        has not registered says so and how to register it; another lists the known names."""
        stale = checkout_unregistered({self.group: name})
        if stale:
            return stale[0]
        known = self.names()
        hint = did_you_mean(name, known)
        listed = ", ".join(known) if known else "none (is tuneup installed?)"
        return f"unknown {self.kind} '{name}': {hint}known {self.kind}s are {listed}"

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
                warnings.append(self._warning(ep, info))
            else:
                loaded[info.name] = obj
        return dict(sorted(loaded.items())), warnings

    def skipped(self) -> list[str]:
        """A warning per installed entry point this process tried (loaded by name or
        scanned) and skipped; imports nothing, so a plugin nothing needed stays unsaid."""
        return [self._warning(ep, info) for ep, info, obj in self._walk(met=True) if obj is None]

    def describe(self) -> list[PluginInfo]:
        """Every entry point with its origin and status, sorted by name (imports them all)."""
        return sorted((info for _, info, _ in self._walk()), key=lambda i: (i.name, not i.ok))

    def _walk(
        self, met: bool = False
    ) -> list[tuple[importlib.metadata.EntryPoint, PluginInfo, T | None]]:
        """Every entry point, checked, with clashes resolved (`met`: only those tried before)."""
        taken: dict[str, str] = {}  # name -> origin of the plugin that holds it
        rows: list[tuple[importlib.metadata.EntryPoint, PluginInfo, T | None]] = []
        for ep in self.entry_points():
            if met and _key(ep) not in self._checked:
                continue
            origin = origin_of(ep)
            obj: T | None = None
            description = ""
            if ep.name in taken:
                status = f"repeats a name already loaded (from {taken[ep.name]})"
                self._checked.setdefault(_key(ep), (None, status))  # met, never imported
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

    def _warning(self, ep: importlib.metadata.EntryPoint, info: PluginInfo) -> str:
        return f"{self._label(ep)} from {info.origin} {info.status}: skipped"

    def _load(self, ep: importlib.metadata.EntryPoint) -> T:
        """Import one entry point and check it; every failure is a one-line UsageError."""
        obj, problem = self._check(ep)
        if obj is None:
            raise UsageError(f"{self._label(ep)} from {origin_of(ep)} {problem}")
        return obj

    def _check(self, ep: importlib.metadata.EntryPoint) -> tuple[T | None, str]:
        """The plugin and "ok", or None and what is wrong with it (one line)."""
        key = _key(ep)
        if key not in self._checked:
            self._checked[key] = self._checked_now(ep)
        return self._checked[key]

    def _checked_now(self, ep: importlib.metadata.EntryPoint) -> tuple[T | None, str]:
        obj, problem = _import_plugin(ep, self._label(ep))
        if problem is not None:
            return None, problem
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


def _key(ep: importlib.metadata.EntryPoint) -> tuple[str, str, str]:
    """An entry point and the metadata folder it comes from (another folder: another plugin)."""
    path = getattr(getattr(ep, "dist", None), "_path", None)  # PathDistribution's folder
    return ep.name, ep.value, "" if path is None else str(path)


def import_time_limit(env: Mapping[str, str] = os.environ) -> float:
    """Seconds a plugin's import may take: IMPORT_TIME_LIMIT_S, or what `env` says.

    Raises:
        UsageError: the variable is set to something other than a positive number.
    """
    raw = env.get(IMPORT_TIME_LIMIT_ENV, "").strip()
    if not raw:
        return IMPORT_TIME_LIMIT_S
    with contextlib.suppress(ValueError):
        if math.isfinite(seconds := float(raw)) and seconds > 0:
            return seconds
    raise UsageError(
        f"{IMPORT_TIME_LIMIT_ENV}={raw!r}: give the seconds a plugin's import may take, "
        f"e.g. 30 (unset: {IMPORT_TIME_LIMIT_S:g})"
    )


def _import_plugin(ep: importlib.metadata.EntryPoint, label: str) -> tuple[Any, str | None]:
    """The entry point's object, or None and why its import failed (one line).

    tuneup's own plugins import here (a slow cold start must not drop a built-in stage).
    A third-party one imports in a daemon thread within the time limit, its output
    captured: quoted when it fails, dropped when it loads (stdout is for results). The
    thread that waits takes Ctrl-C as ever.
    """
    if origin_of(ep) == BUILTIN:
        try:
            return ep.load(), None
        except Exception as exc:  # a stale install: its module or attribute has moved
            return None, f"{_import_problem(exc, '')}: {REINSTALL}, if the checkout moved it"
    if getattr(_INSIDE, "active", False):  # loaded by a plugin as it imports
        obj, error = _load_caught(ep)
        return (obj, None) if error is None else (None, _import_problem(error, ""))
    top = _top_package(ep)
    with _IMPORTING:
        if top in _HUNG:
            return None, (
                f"was not imported: its package '{top}' did not finish importing earlier, "
                f"for {_HUNG[top]}"
            )
        limit = import_time_limit()
        done: list[tuple[Any, BaseException | None]] = []
        printed = io.StringIO()

        def run() -> None:
            _INSIDE.active = True
            done.append(_load_caught(ep))

        thread = threading.Thread(target=run, name=f"tuneup import {ep.value}", daemon=True)
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            thread.start()
            thread.join(limit)
        said = _excerpt(printed.getvalue())
        if not done:
            _HUNG[top] = label
            return None, (
                f"did not finish importing within {limit:g} s (hung? {IMPORT_TIME_LIMIT_ENV}="
                f"SECONDS waits longer{'; it printed ' + said if said else ''})"
            )
    obj, error = done[0]
    return (obj, None) if error is None else (None, _import_problem(error, said))


def _load_caught(ep: importlib.metadata.EntryPoint) -> tuple[Any, BaseException | None]:
    try:
        return ep.load(), None
    except BaseException as exc:  # SystemExit too: a plugin's exit is not tuneup's
        return None, exc


def _import_problem(exc: BaseException, said: str) -> str:
    """Why an import failed, in one line, with what the plugin printed as it failed."""
    if isinstance(exc, SystemExit):  # sys.exit("why") exits 1, saying why
        code = exc.code
        status = f"{code or 0}" if code is None or isinstance(code, int) else f"1: {_excerpt(code)}"
        return f"exited at import (status {status}{'; it printed ' + said if said else ''})"
    problem = "failed to import: " + _one_line(f"{type(exc).__name__}: {exc}")
    return problem + (f" (it printed {said})" if said else "")


def _excerpt(text: str) -> str:
    """Text a plugin printed, quoted on one line and cut short; "" for none."""
    line = _one_line(text)
    if len(line) > _PRINTED_CHARS:
        line = line[: _PRINTED_CHARS - 3].rstrip() + "..."
    return f"'{line}'" if line else ""


def _top_package(ep: importlib.metadata.EntryPoint) -> str:
    return ep.value.split(":", 1)[0].split(".", 1)[0].strip()


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


GROUPS = {"tuneup.stages": "stage", "tuneup.trainers": "trainer"}
REINSTALL = "run `pip install -e .` again"
"""The fix for a built-in plugin the installed metadata lacks or points at wrongly: the
entry points are read from the metadata the last install wrote, not from pyproject.toml."""


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
                    f"pyproject.toml but not registered: {REINSTALL}"
                )
    return lines


def checkout_unregistered(only: Mapping[str, str] | None = None) -> list[str]:
    """`unregistered` for the checkout this tuneup runs from (none for an installed wheel);
    `only`: of one name in one group ({group: name}), the one a user asked for."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    declared = declared_entry_points(pyproject)
    if only is not None:
        declared = {
            group: {n: v for n, v in names.items() if only.get(group) == n}
            for group, names in declared.items()
        }
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
