"""A compile killed mid-write leaves no trap: the worker removes the empty or cut-short
files of torch.compile's caches before a compile probe, and the probe compiles."""

from __future__ import annotations

import fcntl
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tuneup.commands.progress import PlainReporter
from tuneup.probe.events import StartEvent
from tuneup.probe.plan import plan_probe
from tuneup.probe.types import ProbeBudget
from tuneup.worker.compile_cache import compile_cache_folders, elf_damage, mend_compile_cache

KEY = "cnufakekeyofakilledcompile".ljust(52, "z")  # no real graph hashes to it
CUT = "cabcdefakekeyofacutshortobject".ljust(52, "z")
WHOLE = "ccdwholekey".ljust(52, "z")
TRITON_KEY = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRST"


def inductor_path(root: Path, key: str, suffix: str) -> Path:
    """Where inductor puts a key's file: <cache>/<key[1:3]>/<key><suffix>."""
    assert len(key) == 52 and key.startswith("c")
    return root / key[1:3] / f"{key}{suffix}"


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
        "empty": inductor_path(root, KEY, ".main.so"),
        "cut": inductor_path(root, CUT, ".optimized.o"),
        "whole": inductor_path(root, WHOLE, ".main.so"),
        "source": inductor_path(root, KEY, ".main.cpp"),
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


def the_users_own_files(root: Path) -> dict[str, Path]:
    """What a user's own folder, set as TORCHINDUCTOR_CACHE_DIR, may also hold: a linker
    script, a library being copied in, an object a build still writes; none of them in
    inductor's layout, every one of them "not an ELF file" or cut short."""
    files = {
        "linker script": root / "lib" / "libtorch_stub.so",
        "copy coming in": root / "ab" / "libbig.so",
        "not its key's folder": root / "zz" / f"{CUT}.main.so",
        "deep": root / "ab" / "x" / f"{CUT}.o",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    files["linker script"].write_text("/* GNU ld script */\nINPUT(libtorch_real.so)\n")
    files["copy coming in"].write_bytes(a_shared_object().read_bytes()[:100])
    files["not its key's folder"].write_bytes(b"")
    files["deep"].write_bytes(b"")
    return files


def test_only_inductors_and_tritons_own_files_are_touched(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    own = cache_with_damage(root)
    others = the_users_own_files(root)
    triton = root / "triton" / "0" / TRITON_KEY / "__triton_launcher.so"
    own_triton = tmp_path / "triton" / TRITON_KEY.lower() / "cuda_utils.so"
    for path in (triton, own_triton):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"")
    removed = {r.path for r in mend_compile_cache([root, tmp_path / "triton"])}
    assert removed == {own["empty"], own["cut"], triton, own_triton}
    assert all(path.exists() for path in others.values())


def hold_open(path: Path) -> subprocess.Popen[bytes]:
    """Another process that holds `path` open for writing, as a compiler or a copy does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", f"f = open({str(path)!r}, 'ab'); print(flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline()  # it has it open now
    return holder


def test_a_file_another_process_holds_open_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "inductor"
    files = cache_with_damage(root)
    holder = hold_open(files["cut"])
    try:
        removed = [r.path for r in mend_compile_cache([root])]
    finally:
        holder.communicate(b"\n", timeout=30)
    assert removed == [files["empty"]]
    assert files["cut"].exists()


def test_the_caches_are_those_the_launcher_set() -> None:
    environ = {"TORCHINDUCTOR_CACHE_DIR": "/c/inductor", "TRITON_CACHE_DIR": "", "X": "1"}
    assert compile_cache_folders(environ) == [Path("/c/inductor")]


@pytest.mark.slow
def test_a_compile_probe_after_a_killed_compile_runs(
    tmp_path: Path, tiny_values: dict[str, Any]
) -> None:
    cache = tmp_path / "inductor"  # the user's own folder
    files = cache_with_damage(cache)
    others = the_users_own_files(cache)
    holder = hold_open(files["cut"])  # an object a running build still writes
    budget = ProbeBudget(trial_s=0.02, min_trials=2, max_trials=2, warmup_cap_s=0.3, loss_steps=2)
    spec = tmp_path / "spec.json"
    config = {**tiny_values, "jit": "compile"}
    spec.write_text(json.dumps({"config": config, "plan": plan_probe(budget).to_dict()}))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tuneup.worker", str(spec)],
            capture_output=True,
            text=True,
            timeout=600,  # one cold compile on a loaded 2-core machine
            env={**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache)},
        )
    finally:
        holder.communicate(b"\n", timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1]["event"] == "result"
    # said in the start event, which the session's reporter prints on the console
    start = next(e for e in events if e["event"] == "start")
    assert start["mended"] == (
        f"removed {files['empty']} (empty) from the compile cache: a compile killed "
        "mid-write left them; they are compiled again"
    )
    assert f"tuneup worker: {start['mended']}" in done.stderr  # and in the probe's log
    assert not files["empty"].exists()
    assert files["cut"].exists()  # held open by another process: not ours to take
    assert all(path.exists() for path in others.values())


def test_the_console_says_what_the_worker_mended() -> None:
    stream = io.StringIO()
    reporter = PlainReporter(stream)
    reporter.event(StartEvent(mended="removed /c/x.so (empty) from the compile cache: ..."))
    reporter.event(StartEvent())
    assert stream.getvalue() == "tuneup: removed /c/x.so (empty) from the compile cache: ...\n"
