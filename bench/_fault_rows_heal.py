"""The fault matrix's rows for tuneup's own files, exports and standard streams (issue 35).

Each row deals its fault for real, as the tester did: a compile killed while it links,
the cache's synthetic box cut short or corrupted in place, a DALI copy cut short, the
user's data cut short, a cache disk too small, an export onto a full disk, a reader of
stdout or stderr that goes away, closed standard streams, the app without a terminal.
The rows use the harness of _fault_harness.py; fault_matrix.py registers them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from _fault_harness import (
    PROBE,
    ROW_LIMIT_S,
    STAGES,
    Harness,
    bundled_preset,
    fill,
    finish,
    journal_lines,
    last_words,
    row,
    workers_of,
)

BOX = "synth-64-32-seed0"  # cpu-smoke's box in the cache
LINKERS = {"ld", "ld.bfd", "ld.gold", "ld.lld", "collect2", "mold"}
SIM = ["probe", "--trainer", "sim"]


def _tree(root: int) -> list[tuple[int, str]]:
    """The processes below `root` (pid, command name), parents first."""
    parent: dict[int, int] = {}
    name: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            name[int(entry.name)] = stat.split("(", 1)[1].rsplit(")", 1)[0]
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, up in parent.items() if up in frontier]
        found += [(pid, name[pid]) for pid in children]
        frontier = children
    return found


def _damaged_builds(cache: Path) -> list[str]:
    """Built files of the compile cache that are empty or no ELF file (as a kill leaves)."""
    bad = []
    for path in (cache / "compile" / "inductor").rglob("*.so"):
        head = path.read_bytes()[:4]
        if head != b"\x7fELF":
            bad.append(f"{path.name}: {path.stat().st_size} bytes")
    return bad


def _linking(cache: Path) -> bool:
    for path in (cache / "compile" / "inductor").glob("*/*.so"):
        with contextlib.suppress(OSError):  # it may go as we look
            if path.stat().st_size == 0:
                return True
    return False


def _compiles(out: Path) -> list[str]:
    """The jit=compile probes of a ladder: status, and the reason of a failure."""
    try:
        lines = (out / "journal.jsonl").read_text().splitlines()
    except OSError:
        return []
    probes = [json.loads(line) for line in lines if line.strip()]
    return [
        p["status"] + (f": {p['reason'][:160]}" if p["status"] != "ok" else "")
        for p in probes
        if p.get("config", {}).get("jit") == "compile"
    ]


def compile_killed(h: Harness) -> dict[str, Any]:
    """A jit=compile probe killed while its compiler links (a time limit's SIGKILL), then
    the compile probes after it: the retry in the same ladder, and a new ladder."""
    out = h.work / "compile-killed"
    proc = h.start("probe", "--preset", "cpu-smoke", "--stages", "jit", "--out", str(out))
    killed: list[str] = []
    end = time.monotonic() + ROW_LIMIT_S
    while proc.poll() is None and time.monotonic() < end and not killed:
        below = _tree(proc.pid)
        # mid-link: a linker runs, or the library it writes is there and still empty
        if any(name in LINKERS for _, name in below) or _linking(h.cache):
            workers = set(workers_of(proc.pid))
            for pid, name in below:
                if pid in workers or name in LINKERS or name.startswith(("cc1", "gcc", "c++")):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(name)
        time.sleep(0.005)
    time.sleep(0.5)
    left = _damaged_builds(h.cache)
    first = finish(proc)
    logs = " ".join(p.read_text() for p in (out / "probes").glob("*.stderr.log"))
    again = h.run("probe", "--preset", "cpu-smoke", "--stages", "jit", "--out", f"{out}-2")
    return row(
        "a jit=compile probe SIGKILLed while it links, then the compile probes after it",
        first,
        killed=sorted(set(killed)),
        damaged_after_kill=left,
        mended_in_log="from the compile cache" in logs,
        compile_probes=_compiles(out),
        next_ladder_exit=again["exit"],
        next_ladder_said=again["said"],
        next_compile_probes=_compiles(Path(f"{out}-2")),
    )


def _box(h: Harness) -> Path:
    """cpu-smoke's synthetic box in the harness's cache, made if it is not there."""
    folder = h.cache / BOX
    code = (
        "from pathlib import Path; from tuneup.unet.datacache import ensure_synthetic_data; "
        f"ensure_synthetic_data(64, 32, 0, Path({str(h.cache)!r}), npy=False)"
    )
    subprocess.run([sys.executable, "-c", code], env=h.env(), cwd=h.work, check=True, timeout=300)
    return folder


def _synth_row(h: Harness, name: str, fault: str, deal: Any) -> dict[str, Any]:
    box = _box(h)
    deal(box)
    out = h.work / name
    first = h.run(*PROBE, "--out", str(out))
    said = [line for line in first["stderr"].splitlines() if "made it again" in line]
    probes = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    return row(
        fault,
        first,
        mended=said[0] if said else "",
        probes_ok=sum(p["status"] == "ok" for p in probes),
        probes_failed=sum(p["status"] != "ok" for p in probes),
    )


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _corrupt(path: Path) -> None:
    with path.open("r+b") as file:  # NaN bytes in the middle of the data, size unchanged
        file.seek(path.stat().st_size // 2)
        file.write(b"\xff" * 65536)


def synth_truncated(h: Harness) -> dict[str, Any]:
    cut = "the cache's train.h5 cut to half"
    return _synth_row(h, "synth-truncated", cut, lambda b: _truncate(b / "train.h5"))


def synth_corrupted(h: Harness) -> dict[str, Any]:
    return _synth_row(
        h,
        "synth-corrupted",
        "the cache's train.h5 corrupted in place (64 KiB of NaN bytes)",
        lambda b: _corrupt(b / "train.h5"),
    )


def npy_truncated(h: Harness) -> dict[str, Any]:
    box = _box(h)
    if not (box / "train_data.npy").exists():
        return {"fault": "the cache's DALI copy cut short", "not_run": "DALI is not installed"}
    return _synth_row(
        h,
        "npy-truncated",
        "the cache's DALI copy train_data.npy cut to half",
        lambda b: _truncate(b / "train_data.npy"),
    )


def user_data_truncated(h: Harness) -> dict[str, Any]:
    box = _box(h)
    data = h.work / "user" / "train.h5"
    data.parent.mkdir(exist_ok=True)
    data.write_bytes((box / "train.h5").read_bytes()[:100_000])
    preset = yaml.safe_load(bundled_preset().read_text())
    preset.pop("synthetic_data", None)
    preset["train"].update(train_path=str(data), val_path=str(data))
    mine = h.work / "user.yaml"
    mine.write_text(yaml.safe_dump(preset))
    first = h.run("probe", "--preset", str(mine), "--stages", STAGES, "--out", str(h.work / "u"))
    return row("the user's train.h5 cut short (100,000 bytes)", first)


def cache_disk_full(h: Harness) -> dict[str, Any]:
    disk = h.work / "cache-disk"
    disk.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=10m", "none", str(disk)], check=True)
    env = h.env(TUNEUP_CACHE_DIR=str(disk / "cache"))
    first = h.run(*PROBE, "--out", str(h.work / "cache-full"), env=env)
    left = sorted(str(p.relative_to(disk)) for p in disk.rglob("*"))
    return row("a cache disk too small for the box (10 MB tmpfs)", first, left_on_disk=left)


def export_full_disk(h: Harness) -> dict[str, Any]:
    session = h.work / "export-session"
    h.run(*SIM, "--out", str(session))
    disk = h.work / "export-disk"
    disk.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(disk)], check=True)
    old = disk / "job.sbatch"
    h.run("export", str(session), "--format", "sbatch", "-o", str(old))
    before = old.read_bytes()
    fill(disk / "filler")
    first = h.run("export", str(session), "--format", "yaml", "-o", str(old))
    new = h.run("export", str(session), "--format", "yaml", "-o", str(disk / "new.yaml"))
    return row(
        "export -o onto an existing file on a full disk, then onto a new one",
        first,
        old_file_whole=old.read_bytes() == before,
        old_bytes=[len(before), old.stat().st_size],
        new_exit=new["exit"],
        new_said=new["said"],
        new_file_left=(disk / "new.yaml").exists(),
    )


def pipe_stdout(h: Harness) -> dict[str, Any]:
    out = h.work / "pipe-stdout"
    proc = h.start(*SIM, "--out", str(out))
    assert proc.stdout is not None
    proc.stdout.close()  # `| head`: gone before the results come
    err = proc.communicate(timeout=ROW_LIMIT_S)[1]
    first = {"exit": proc.returncode, "said": last_words("", err)}
    return row(
        "tuneup probe --trainer sim | head -0",
        first,
        internal="internal error" in err or "Traceback" in err,
        summary=(out / "summary.json").is_file(),
    )


def pipe_both(h: Harness) -> dict[str, Any]:
    out = h.work / "pipe-both"
    read, write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuneup", *SIM, "--out", str(out)],
        env=h.env(),
        cwd=h.work,
        stdout=write,
        stderr=write,
    )
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        head = [pipe.readline().decode().strip() for _ in range(3)]
    code = proc.wait(timeout=ROW_LIMIT_S)
    probes = journal_lines(out)
    return {
        "fault": "tuneup probe --trainer sim 2>&1 | head -3",
        "exit": code,
        "said": head[-1],
        "summary": (out / "summary.json").is_file(),
        "probes": probes,
    }


def closed_streams(h: Harness) -> dict[str, Any]:
    out = h.work / "closed"
    argv = [sys.executable, "-m", "tuneup", *SIM, "--out", str(out)]
    done = subprocess.run(
        ["bash", "-c", '"$@" 0<&- 2>&-', "bash", *argv],
        env=h.env(),
        cwd=h.work,
        capture_output=True,
        text=True,
        timeout=ROW_LIMIT_S,
    )
    first = {"exit": done.returncode, "said": last_words(done.stdout, "")}
    summary = (out / "summary.json").is_file()
    return row("tuneup probe --trainer sim 0<&- 2>&-", first, summary=summary)


def tui_no_terminal(h: Harness) -> dict[str, Any]:
    screen = h.work / "screen.txt"
    with screen.open("w") as file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuneup", "tui", "--trainer", "sim"],
            env=h.env(),
            cwd=h.work,
            stdin=subprocess.DEVNULL,
            stdout=file,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            err = proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1] + " (still running after 30 s: killed)"
    drawn = err.count("\x1b[") + screen.read_text().count("\x1b[")  # Textual draws on stderr
    first = {"exit": proc.returncode, "said": last_words("", err.replace("\x1b", ""))[-300:]}
    return row("tuneup tui </dev/null >file", first, escape_codes_drawn=drawn)


HEAL_ROWS = {
    "compile-killed": compile_killed,
    "synth-truncated": synth_truncated,
    "synth-corrupted": synth_corrupted,
    "npy-truncated": npy_truncated,
    "user-data-truncated": user_data_truncated,
    "pipe-stdout": pipe_stdout,
    "pipe-both": pipe_both,
    "closed-streams": closed_streams,
    "tui-no-terminal": tui_no_terminal,
}
HEAL_MOUNT_ROWS = {
    "cache-disk-full": cache_disk_full,
    "export-full-disk": export_full_disk,
}
