"""Plugins are isolated: one that exits, fails or hangs at import is named and skipped, and
the rest of tuneup works; stage plugins a ladder does not use are not imported.

The "installed" packages are entry-point fixtures, as in test_plugins.py: a folder holding
the package and its ``*.dist-info`` put on the path, found as a pip install is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tuneup import plugin_registry
from tuneup.errors import UsageError
from tuneup.plugin_registry import IMPORT_TIME_LIMIT_ENV, import_time_limit
from tuneup.probe.stages import load_stage, scan_stages, skipped_stages

REPO = Path(__file__).resolve().parent.parent

# Parses tuneup's own command line at import, as a script's module would.
ARGPARSE_AT_IMPORT = """
    import argparse

    print("lrpkg: reading the command line")
    parser = argparse.ArgumentParser(prog="tuneup")
    parser.add_argument("--lr", type=float, required=True)
    ARGS = parser.parse_args()
"""

BROKEN_AT_IMPORT = {
    "lrpkg/__init__.py": "",
    "lrpkg/args.py": ARGPARSE_AT_IMPORT,
    "lrpkg/bye.py": """
        import os
        import sys

        if os.environ.get("LRPKG_IMPORTS"):  # counts its imports
            with open(os.environ["LRPKG_IMPORTS"], "a") as count:
                count.write("x")
        sys.exit("no GPU, no stage")
    """,
    "lrpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: lrpkg\nVersion: 1.0\n",
    "lrpkg-1.0.dist-info/entry_points.txt": """
        [tuneup.stages]
        lr = lrpkg.args:STAGE
        bye = lrpkg.bye:STAGE
    """,
}

SLEEPS_AT_IMPORT = {
    "sleepypkg/__init__.py": """
        import sys
        import time

        print("sleepypkg: connecting to the license server", file=sys.stderr)
        while True:
            time.sleep(3600)
    """,
    "sleepypkg-2.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: sleepypkg\nVersion: 2.0\n",
    "sleepypkg-2.0.dist-info/entry_points.txt": "[tuneup.stages]\nsleepy = sleepypkg:STAGE\n",
}


def _install(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh folder on sys.path for packages; what they imported is forgotten after."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(plugin_registry, "_HUNG", {})  # this test's hangs are its own
    yield root
    for name in [m for m in sys.modules if m.split(".")[0] in ("lrpkg", "slowpkg")]:
        del sys.modules[name]


def test_probe_runs_beside_plugins_that_exit_or_hang_at_import_and_names_them(tmp_path):
    root = _install(tmp_path / "site", {**BROKEN_AT_IMPORT, **SLEEPS_AT_IMPORT})
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(REPO)]),
        IMPORT_TIME_LIMIT_ENV: "1",
    }
    # cpu-smoke, as a machine without a GPU picks: its default ladder tries every stage
    argv = ["probe", "--trainer", "sim", "--preset", "cpu-smoke", "--seed", "3"]
    argv += ["--out", str(tmp_path / "run")]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "recommendation: " in done.stdout and "results: " in done.stdout
    lines = done.stderr.splitlines()
    said = {
        name: [line for line in lines if f"'{name}'" in line] for name in ("lr", "bye", "sleepy")
    }
    assert all(len(found) == 1 for found in said.values()), said
    assert all(line.startswith("tuneup: warning: stage plugin ") for (line,) in said.values())
    assert all(line.endswith(": skipped") for (line,) in said.values())
    (lr,) = said["lr"]
    assert "(lrpkg.args:STAGE) from lrpkg 1.0 exited at import (status 2; it printed " in lr
    assert "lrpkg: reading the command line usage: tuneup [-h] --lr LR" in lr
    (bye,) = said["bye"]
    assert "exited at import (status 1: 'no GPU, no stage')" in bye
    (sleepy,) = said["sleepy"]
    assert "did not finish importing within 1 s" in sleepy and IMPORT_TIME_LIMIT_ENV in sleepy
    assert "(sleepypkg:STAGE) from sleepypkg 2.0 did not finish importing" in sleepy
    assert "it printed 'sleepypkg: connecting to the license server'" in sleepy
    # What the plugins printed is theirs, quoted in their warnings, never a line of tuneup's.
    printed = ("usage:", "lrpkg:", "sleepypkg:")
    assert not any(line.startswith(printed) for line in [*lines, *done.stdout.splitlines()])
    assert took < 60  # the hang cost its limit, once


def test_an_exit_at_import_is_one_line_said_once_and_prints_nothing_itself(
    site, tmp_path, monkeypatch, capsys
):
    _install(site, BROKEN_AT_IMPORT)
    imports = tmp_path / "imports"
    monkeypatch.setenv("LRPKG_IMPORTS", str(imports))
    with pytest.raises(UsageError) as info:
        load_stage("lr")
    message = str(info.value)
    assert message.startswith(
        "stage plugin 'lr' (lrpkg.args:STAGE) from lrpkg 1.0 exited at import"
    )
    assert "--lr" in message and "\n" not in message
    stages, warnings = scan_stages()
    assert "workers" in stages and "lr" not in stages and "bye" not in stages
    assert any("'lr'" in w and "exited at import (status 2" in w for w in warnings)
    with pytest.raises(UsageError, match=r"'bye' .* exited at import \(status 1: 'no GPU"):
        load_stage("bye")
    assert scan_stages()[1] == warnings
    # tried once a process: neither its exit nor its output happens again, nor shows
    assert imports.read_text() == "x"
    assert capsys.readouterr() == ("", "")
    assert [w for w in skipped_stages() if "'lr'" in w] == [w for w in warnings if "'lr'" in w]


def test_a_hung_import_is_skipped_and_its_package_never_imported_again(site, monkeypatch):
    release = site / "release"
    slow = {
        "slowpkg/__init__.py": f"""
            import pathlib
            import time

            while not pathlib.Path({str(release)!r}).exists():
                time.sleep(0.02)
            STAGE = None
        """,
        "slowpkg/other.py": "STAGE = None\n",
        "slowpkg-0.3.dist-info/METADATA": "Metadata-Version: 2.1\nName: slowpkg\nVersion: 0.3\n",
        "slowpkg-0.3.dist-info/entry_points.txt": """
            [tuneup.stages]
            slow = slowpkg:STAGE
            slower = slowpkg.other:STAGE
        """,
    }
    _install(site, slow)
    monkeypatch.setenv(IMPORT_TIME_LIMIT_ENV, "0.3")
    try:
        with pytest.raises(UsageError, match=r"'slow' .* did not finish importing within 0.3 s"):
            load_stage("slow")
        # importing slowpkg.other would wait on slowpkg's import lock: it is not tried
        with pytest.raises(
            UsageError,
            match=r"'slower' .* its package 'slowpkg' did not finish importing earlier, "
            r"for stage plugin 'slow'",
        ):
            load_stage("slower")
        assert load_stage("workers").name == "workers"  # the rest of tuneup works
    finally:
        release.touch()
        for thread in threading.enumerate():
            if thread.name.startswith("tuneup import slowpkg"):
                thread.join(10)


def test_a_listing_ladder_imports_no_other_stage_plugin_and_says_an_unregistered_one(
    site, tmp_path, monkeypatch, capsys
):
    from tuneup.cli import main

    _install(site, BROKEN_AT_IMPORT)
    imports = tmp_path / "imports"
    monkeypatch.setenv("LRPKG_IMPORTS", str(imports))
    smoke = (REPO / "presets" / "cpu-smoke.yaml").read_text(encoding="utf-8")
    listing = smoke.replace("probe:\n", "probe:\n  stages: [workers]\n", 1)
    (tmp_path / "listing.yaml").write_text(listing.replace("name: cpu-smoke", "name: listing"))
    # a built-in stage added to pyproject.toml, the package not installed again since
    declared = plugin_registry.declared_entry_points(REPO / "pyproject.toml")
    stale = {**declared, "tuneup.stages": {**declared["tuneup.stages"], "pace": "x:PACE"}}
    monkeypatch.setattr(plugin_registry, "declared_entry_points", lambda _path: stale)

    preset = str(tmp_path / "listing.yaml")
    argv = ["probe", "--trainer", "sim", "--preset", preset, "--seed", "3", "--json"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert not any(m.split(".")[0] == "lrpkg" for m in sys.modules) and not imports.exists()
    assert "lrpkg" not in err
    (said,) = [line for line in err.splitlines() if "'pace'" in line]
    assert said.startswith(
        "tuneup: warning: stage 'pace' (x:PACE) is declared in pyproject.toml but not "
        "registered: run `pip install -e .` again"
    )


@pytest.mark.parametrize("raw", ["soon", "0", "-1", "nan", "inf"])
def test_an_import_time_limit_that_is_not_seconds_is_one_line(raw):
    with pytest.raises(UsageError, match=f"{IMPORT_TIME_LIMIT_ENV}='{raw}': give the seconds"):
        import_time_limit({IMPORT_TIME_LIMIT_ENV: raw})
    assert import_time_limit({}) == plugin_registry.IMPORT_TIME_LIMIT_S
    assert import_time_limit({IMPORT_TIME_LIMIT_ENV: " 2.5 "}) == 2.5
