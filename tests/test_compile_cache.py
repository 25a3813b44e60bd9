"""A compile killed mid-write leaves no trap: the worker removes the empty or cut-short
files of torch.compile's caches before a compile probe, and the probe compiles."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tuneup.probe.plan import plan_probe
from tuneup.probe.types import ProbeBudget
from tuneup.worker.compile_cache import compile_cache_folders, elf_damage, mend_compile_cache

KEY = "cfakekeyofakilledcompilezzzzzzzzzzzzzzzzzzzzzzzzzzz"  # no real graph hashes to it


def a_shared_object() -> Path:
    """A whole ELF shared object of this Python (an extension module)."""
    origin = importlib.util.find_spec("_ctypes").origin  # type: ignore[union-attr]
    assert origin is not None and origin.endswith(".so")
    return Path(origin)


def cache_with_damage(root: Path) -> dict[str, Path]:
    """An inductor cache as a killed compile leaves it: an empty .main.so, an object cut
    short, beside whole ones and the sources."""
    whole = a_shared_object()
    files = {
        "empty": root / "nu" / f"{KEY}.main.so",
        "cut": root / "ab" / "cabcdef.optimized.o",
        "whole": root / "cd" / "cwhole.main.so",
        "source": root / "nu" / f"{KEY}.main.cpp",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    files["empty"].write_bytes(b"")
    files["cut"].write_bytes(whole.read_bytes()[:3000])
    shutil.copy(whole, files["whole"])
    files["source"].write_text("// generated\n")
    return files


def test_empty_and_cut_short_builds_are_removed_and_the_rest_kept(tmp_path: Path) -> None:
    files = cache_with_damage(tmp_path / "inductor")
    assert elf_damage(files["whole"]) == ""
    removed = {r.path: r.why for r in mend_compile_cache([tmp_path / "inductor"])}
    assert removed[files["empty"]] == "empty"
    assert removed[files["cut"]].startswith("cut short (3,000 of at least ")
    assert set(removed) == {files["empty"], files["cut"]}
    assert files["whole"].is_file() and files["source"].is_file()
    assert not files["empty"].exists() and not files["cut"].exists()


def test_a_file_another_process_is_compiling_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "inductor"
    files = cache_with_damage(root)
    (root / "locks").mkdir()
    lock = root / "locks" / f"{KEY}.lock"
    with lock.open("w") as held:  # as inductor's FileLock holds it while it builds
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        mend_compile_cache([root])
        assert files["empty"].exists()
    assert [r.path for r in mend_compile_cache([root])] == [files["empty"]]


def test_the_caches_are_those_the_launcher_set() -> None:
    environ = {"TORCHINDUCTOR_CACHE_DIR": "/c/inductor", "TRITON_CACHE_DIR": "", "X": "1"}
    assert compile_cache_folders(environ) == [Path("/c/inductor")]


@pytest.mark.slow
def test_a_compile_probe_after_a_killed_compile_runs(
    tmp_path: Path, tiny_values: dict[str, Any]
) -> None:
    cache = tmp_path / "inductor"
    files = cache_with_damage(cache)
    budget = ProbeBudget(trial_s=0.02, min_trials=2, max_trials=2, warmup_cap_s=0.3, loss_steps=2)
    spec = tmp_path / "spec.json"
    config = {**tiny_values, "jit": "compile"}
    spec.write_text(json.dumps({"config": config, "plan": plan_probe(budget).to_dict()}))
    done = subprocess.run(
        [sys.executable, "-m", "tuneup.worker", str(spec)],
        capture_output=True,
        text=True,
        timeout=600,  # one cold compile on a loaded 2-core machine
        env={**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1]["event"] == "result"
    assert f"removed {files['empty']} (empty) and 1 more from the compile cache" in done.stderr
    assert not files["empty"].exists()
