"""The README's offline install on a python that is itself a venv (as the H200 node's was)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def a_wheel(folder: Path) -> Path:
    """A one-module wheel, as `pip download` would bring one along."""
    folder.mkdir()
    path = folder / "offline_probe-1.0-py3-none-any.whl"
    info = "offline_probe-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("offline_probe.py", "ANSWER = 42\n")
        wheel.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: offline-probe\nVersion: 1.0\n"
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.slow
def test_the_offline_install_sees_the_torch_of_a_venv_and_writes_nothing_there(tmp_path: Path):
    # This test's own python is a venv that holds torch: the H200 node's situation.
    assert sys.prefix != sys.base_prefix, "the test runs from a venv"
    site = Path(sysconfig.get_paths()["purelib"])
    before = sorted(p.name for p in site.iterdir())
    venv, wheels = tmp_path / "venv", tmp_path / "wheels"
    a_wheel(wheels)
    env = {**os.environ, "PYTHON": sys.executable, "VENV": str(venv), "WHEELS": str(wheels)}
    env.pop("PIP_INDEX_URL", None)
    done = subprocess.run(
        ["bash", str(ROOT / "install-offline.sh")],
        env={**env, "PIP_NO_INDEX": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    seen = subprocess.run(
        [str(python), "-c", "import sys, torch, tuneup, offline_probe; print(sys.prefix)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.strip() == str(venv)  # its own environment, the site's packages seen
    doctor = subprocess.run(
        [str(venv / "bin" / "tuneup"), "doctor", "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert sorted(p.name for p in site.iterdir()) == before  # nothing written into the site


def test_an_offline_install_without_the_sites_python_is_a_one_line_error(tmp_path: Path):
    done = subprocess.run(
        ["bash", str(ROOT / "install-offline.sh")],
        env={**os.environ, "PYTHON": str(tmp_path / "no-python"), "VENV": str(tmp_path / "v")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "PYTHON=" in done.stderr and not (tmp_path / "v").exists()
