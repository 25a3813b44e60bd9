"""The seams a newcomer reads first stay narrow: a session is built once from four values
(no keyword list to grow), it holds its terms as grouped values, a front end hears it
through the typed Reporter (nothing probes a reporter for what it can do), and nothing
rewires a session after it is built."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from tuneup.tuning.session.assembly import build_session
from tuneup.tuning.session.probe_session import ProbeSession

PACKAGE = Path(__file__).resolve().parents[1] / "tuneup"
SESSION_FIELDS = ("reporter", "backend", "sampler", "stop", "control", "terms", "timing")


def test_a_session_is_built_from_a_few_values_and_holds_few_fields():
    assert len(inspect.signature(build_session).parameters) <= 8
    public = [f.name for f in dataclasses.fields(ProbeSession) if not f.name.startswith("_")]
    assert len(public) <= 20, public


def assigned_session_fields(source: str) -> list[tuple[int, str]]:
    """`x.session.F = ...` or `session.F = ...` for a field F a builder sets: a rewiring."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if not isinstance(target, ast.Attribute) or target.attr not in SESSION_FIELDS:
                continue
            owner = target.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name == "session":
                found.append((node.lineno, target.attr))
    return found


def test_nothing_rewires_a_built_session_and_nothing_probes_a_reporter():
    rewired, probed = {}, {}
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        where = str(path.relative_to(PACKAGE))
        if assigned_session_fields(source):
            rewired[where] = assigned_session_fields(source)
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") in ("getattr", "hasattr")
                and node.args
                and "reporter" in ast.unparse(node.args[0])
            ):
                probed.setdefault(where, []).append(node.lineno)
    assert rewired == {} and probed == {}


def test_the_rewiring_guard_sees_one():
    assert assigned_session_fields("built.session.reporter = self\n") == [(1, "reporter")]
    assert assigned_session_fields("session.sampler = s\nother.reporter = r\n") == [(1, "sampler")]
