"""The fault matrix's rows for hostile input (issue 49), tuneup's own files: exports that
would run lines they did not write, `-o` onto what is not a plain file, a user's compile
cache, damaged journals (the environment, presets and plugins: _fault_rows_input.py).

Each row deals its fault for real, as the tester did, and records what a user would
see: the exit status and last line, and the row's own evidence (files a payload made,
whether a FIFO or a device is still one, seconds and peak memory). `held` says whether
tuneup did what the issue asks of it there. The rows use the harness of _fault_harness.py;
fault_matrix.py registers them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from _fault_harness import Harness, row

SIM = ["probe", "--trainer", "sim"]


def _planted(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("PWNED*"))


def _sandbox(h: Harness, name: str) -> Path:
    box = h.work / "sandbox" / name
    box.mkdir(parents=True, exist_ok=True)
    return box


def _bash(script: str, cwd: Path) -> int:
    """Run a script as its user would (no srun or scontrol here: it may fail after)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "SLURM_SUBMIT_DIR": str(cwd)}
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, timeout=60)
    return done.returncode


def _base_session(h: Harness) -> Path:
    """One finished sim session, copied by the rows that damage one."""
    base = h.work / "hostile-base"
    if not (base / "summary.json").is_file():
        h.run(*SIM, "--out", str(base))
    return base


def _copy(h: Harness, name: str) -> Path:
    out = h.work / name
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(_base_session(h), out, ignore=shutil.ignore_patterns("*.lock", "lock"))
    return out


def _edit_json(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))


# --- exports ---------------------------------------------------------------------------


def _sbatch_of(h: Harness, name: str, hints: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A sim session whose session.json holds `hints`, exported as sbatch and run: what
    the export said, and the files its payloads made."""
    out = _copy(h, name)
    _edit_json(out / "session.json", lambda s: s.update(hints=hints))
    box = _sandbox(h, name)
    first = h.run("export", str(out), "--format", "sbatch", "-o", str(box / "job.sbatch"))
    if first["exit"] == 0:
        _bash("bash job.sbatch", box)
    return first, _planted(box)


def sbatch_hints_from_session(h: Harness) -> dict[str, Any]:
    hints = {
        "job_name": "x\ntouch PWNED-job",
        "time": "01:00:00\ntouch PWNED-time",
        "setup": ["module load x\ntouch PWNED-setup"],
    }
    first, ran = _sbatch_of(h, "hints-session", hints)
    return row(
        "session.json hints with newlines (job_name, time, setup), export sbatch, bash it",
        first,
        ran=ran,
        held=not ran and first["exit"] in (0, 2),
    )


def setup_block(h: Harness) -> dict[str, Any]:
    block = "module load cuda\ntouch PWNED-line2\ntouch PWNED-line3\n"
    first, ran = _sbatch_of(h, "setup-block", {"setup": block})
    return row(
        "a `setup: |` block of three lines, export sbatch, bash it",
        first,
        ran=ran,
        held=not ran and first["exit"] == 0,
    )


def folder_newline_env(h: Harness) -> dict[str, Any]:
    base = _base_session(h)
    box = _sandbox(h, "folder")
    results = {}
    # the payload's line between two newlines: the quote shlex put around it opens on the
    # line before and closes on the line after, so the line itself is bare
    for name, formats in (
        ("r\ntouch PWNED-folder\n", ("env", "sbatch")),
        ("r\nevil: 1\n", ("yaml",)),
    ):
        out = h.work / name
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out, ignore=shutil.ignore_patterns("*.lock", "lock"))
        for fmt in formats:
            target = str(box / f"out.{fmt}")
            results[fmt] = h.run("export", str(out), "--format", fmt, "-o", target)
    _bash(". ./out.env", box)
    _bash("bash out.sbatch", box)
    keys: list[str] = []
    try:
        keys = list(yaml.safe_load((box / "out.yaml").read_text()) or {})
    except (OSError, yaml.YAMLError) as exc:
        keys = [f"unreadable: {type(exc).__name__}"]
    ran = _planted(box)
    return row(
        "results folders named 'r<nl>touch ...<nl>' and 'r<nl>evil: 1<nl>': export, run, parse",
        results["env"],
        ran=ran,
        yaml_top_keys=keys,
        held=not ran and keys == ["tuned"],
    )


def _reader(fifo: Path, got: list[bytes]) -> threading.Thread:
    thread = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    thread.start()
    return thread


def export_fifo(h: Harness) -> dict[str, Any]:
    session = _base_session(h)
    fifo = h.work / "export.fifo"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    got: list[bytes] = []
    thread = _reader(fifo, got)
    first = h.run("export", str(session), "--format", "env", "-o", str(fifo))
    thread.join(timeout=10)
    still = stat.S_ISFIFO(fifo.lstat().st_mode)
    fed = bool(got and b"tuneup" in got[0])
    if thread.is_alive():  # its reader still waits: let it go
        with open(fifo, "w"):
            pass
    return row(
        "export -o onto a FIFO with a reader",
        first,
        reader_got_export=fed,
        still_fifo=still,
        held=fed and still and first["exit"] == 0,
    )


def export_device(h: Harness) -> dict[str, Any]:
    session = _base_session(h)
    node = h.work / "null-copy"
    node.unlink(missing_ok=True)
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        return {"fault": "export -o onto a mknod copy of /dev/null", "not_run": "no CAP_MKNOD"}
    first = h.run("export", str(session), "--format", "yaml", "-o", str(node))
    still = stat.S_ISCHR(node.lstat().st_mode)
    return row(
        "export -o onto a mknod copy of /dev/null",
        first,
        still_device=still,
        held=still and first["exit"] == 0,
    )


def export_dev_stdout(h: Harness) -> dict[str, Any]:
    session = _base_session(h)
    first = h.run("export", str(session), "--format", "env", "-o", "/dev/stdout")
    got = "# tuneup: environment" in first["stdout"]
    return row(
        "export -o /dev/stdout (stdout a pipe)",
        first,
        stdout_got_export=got,
        held=got and first["exit"] == 0,
    )


# --- the user's compile cache ----------------------------------------------------------


def users_compile_cache(h: Harness) -> dict[str, Any]:
    """cpu-smoke's jit stage with TORCHINDUCTOR_CACHE_DIR a folder of the user's own: a
    linker script, a library being copied in (held open), an object a build still writes
    (held open, in inductor's layout), and one empty build of inductor's (its to mend)."""
    mine = h.work / "my-build"
    shutil.rmtree(mine, ignore_errors=True)
    key = "cnufakekeyofakilledcompile".ljust(52, "z")
    held_key = "cabheldopenbyarunningbuild".ljust(52, "z")
    files = {
        "linker script": mine / "lib" / "libtorch_stub.so",
        "copy coming in": mine / "lib" / "libbig.so",
        "object being written": mine / held_key[1:3] / f"{held_key}.o",
        "inductor's empty build": mine / key[1:3] / f"{key}.main.so",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    files["linker script"].write_text("/* GNU ld script */\nINPUT(libtorch_real.so)\n")
    files["copy coming in"].write_bytes(b"\x7fELF" + b"\0" * 60)
    files["object being written"].write_bytes(b"")
    files["inductor's empty build"].write_bytes(b"")
    holders = [
        subprocess.Popen(
            [sys.executable, "-c", f"f = open({str(p)!r}, 'ab'); import time; time.sleep(600)"]
        )
        for p in (files["copy coming in"], files["object being written"])
    ]
    try:
        time.sleep(1.0)
        env = h.env(TORCHINDUCTOR_CACHE_DIR=str(mine))
        out = h.work / "users-cache"
        first = h.run(
            "probe", "--preset", "cpu-smoke", "--stages", "jit", "--out", str(out), env=env
        )
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
    kept = {name: path.exists() for name, path in files.items()}
    said = "from the compile cache" in first["stderr"]
    return row(
        "cpu-smoke jit stage with the user's own TORCHINDUCTOR_CACHE_DIR",
        first,
        kept=kept,
        mend_said_on_console=said,
        held=kept["linker script"]
        and kept["copy coming in"]
        and kept["object being written"]
        and not kept["inductor's empty build"]
        and said,
    )


# --- journals --------------------------------------------------------------------------


def _resumable(h: Harness, name: str, keep: int) -> Path:
    """A copy of the sim session cut back to its first `keep` probes, as a stop leaves it."""
    out = _copy(h, name)
    lines = (out / "journal.jsonl").read_text().splitlines()
    (out / "journal.jsonl").write_text("\n".join(lines[:keep]) + "\n")
    (out / "summary.json").unlink(missing_ok=True)
    return out


def journal_infinity(h: Harness) -> dict[str, Any]:
    out = _resumable(h, "journal-nonfinite", 6)
    lines = (out / "journal.jsonl").read_text().splitlines()
    probe = json.loads(lines[3])
    phase = next(k for k in ("io_sps", "synthetic_sps", "full_sps") if probe.get(k))
    text = json.dumps({**probe, phase: 1.0}).replace(": 1.0", ": Infinity", 1)
    lines[3] = text
    (out / "journal.jsonl").write_text("\n".join(lines) + "\n")
    first = h.run("probe", "--resume", str(out))
    both = first["stdout"] + first["stderr"]
    # a figure read as infinite: "+inf%", "inf-infx", "inf samples/s"
    decided = re.findall(r"[-+]?\binf\b[%x-]?[^\n]{0,20}", both)
    return row(
        f"a journaled {phase} of Infinity, then --resume",
        first,
        inf_figures=decided,
        said_damaged="damaged" in both,
        held=not decided and "damaged" in both,
    )


def journal_deep(h: Harness) -> dict[str, Any]:
    out = _resumable(h, "journal-deep", 6)
    with (out / "journal.jsonl").open("a") as journal:
        journal.write("[" * 200_000 + "]" * 200_000 + "\n")
    first = h.run("probe", "--resume", str(out))
    return row(
        "a journal line nested 200,000 deep, then --resume",
        first,
        traceback="Traceback" in first["stderr"] or "RecursionError" in first["stderr"],
        held=first["exit"] in (0, 4) and "RecursionError" not in first["stderr"],
    )


def journal_duplicated(h: Harness) -> dict[str, Any]:
    out = _resumable(h, "journal-dup", 6)
    lines = (out / "journal.jsonl").read_text().splitlines()
    (out / "journal.jsonl").write_text("\n".join(lines + lines[1:]) + "\n")
    first = h.run("probe", "--resume", str(out))
    both = (first["stdout"] + first["stderr"]).lower()
    said = "duplicate" in both or "twice" in both or "repeat" in both
    return row(
        "a journal whose probes appear twice, then --resume",
        first,
        said_duplicates=said,
        held=said and first["exit"] in (0, 4),
    )


def summary_wrong_shape(h: Harness) -> dict[str, Any]:
    out = _copy(h, "summary-shape")
    # an object, as a summary is, holding no recommended values
    (out / "summary.json").write_text('{"recommendation": {"headline": "?"}, "stages": []}\n')
    first = h.run("export", str(out), "--format", "yaml")
    return row(
        "summary.json of valid JSON but the wrong shape, then export",
        first,
        held=first["exit"] == 0 and "rebuilt" in first["stderr"],
    )


HOSTILE_ROWS = {
    "sbatch-hints-session": sbatch_hints_from_session,
    "setup-block": setup_block,
    "folder-newline": folder_newline_env,
    "export-fifo": export_fifo,
    "export-device": export_device,
    "export-dev-stdout": export_dev_stdout,
    "users-compile-cache": users_compile_cache,
    "journal-infinity": journal_infinity,
    "journal-deep": journal_deep,
    "journal-duplicated": journal_duplicated,
    "summary-wrong-shape": summary_wrong_shape,
}
