"""Kept twin checks: packed small, and replayed against a later twin."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
KEPT = BENCH / "results" / "twin_checks"


def test_a_check_keeps_only_what_the_twin_and_the_comparison_read(tmp_path: Path):
    sys.path.insert(0, str(BENCH))
    try:
        from _twin_archive import ladder_journals, pack, unpack
    finally:
        sys.path.pop(0)
    folder = tmp_path / "check"
    gather = folder / "evidence" / "gather"
    (gather / "probes").mkdir(parents=True)
    for name in ("journal.jsonl", "gather.json", "session.json"):
        (gather / name).write_text("{}\n")
    (gather / "probes" / "0001-baseline.stderr.log").write_text("x" * 10_000)
    (folder / "compile" / "inductor").mkdir(parents=True)
    (folder / "compile" / "inductor" / "graph.bin").write_bytes(b"\0" * 10_000)
    (folder / "ladder-1" / "probes").mkdir(parents=True)
    (folder / "ladder-1" / "journal.jsonl").write_text('{"stage": "baseline"}\n')
    (folder / "ladder-1" / "probes" / "0001.json").write_text("{}")
    ladders = [{"wall_s": 101.5, "probes": 91, "exit": 0, "lines": []}]
    archive = pack(folder, tmp_path / "kept.tar.gz", ladders, preset="cpu-smoke", commit="abc")
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
    # no probe logs, no compile caches: what is committed stays small
    assert names == [
        "check.json",
        "evidence/gather/gather.json",
        "evidence/gather/journal.jsonl",
        "evidence/gather/session.json",
        "ladder-1/journal.jsonl",
    ]
    back = tmp_path / "back"
    check = unpack(archive, back)
    assert check["ladders"] == [{"wall_s": 101.5, "probes": 91, "exit": 0}]
    assert check["preset"] == "cpu-smoke"
    assert ladder_journals(back, 1)[0].read_text() == '{"stage": "baseline"}\n'


def test_a_kept_check_is_replayed_against_its_own_ladders(tmp_path: Path):
    kept = KEPT / "twin_check_cpu_2026-11-27d.tar.gz"
    out = tmp_path / "replay.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "twin_replay.py"), str(kept), "--seeds", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=BENCH,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # the ladders that check ran, timed from outside then, and today's prediction beside them
    assert "ladders 107 s/91, 106 s/96" in done.stdout
    assert "over 1 checks (2 ladders)" in done.stdout
    recorded = json.loads(out.read_text())
    (check,) = recorded["checks"]
    assert check["ladders"] == [{"wall_s": 106.6, "probes": 91}, {"wall_s": 105.7, "probes": 96}]
    assert check["then"]["probes"] == 78  # what the twin of that day had said, kept with it
    assert set(check["parts"]) >= {"setup", "first_steps", "warmup_and_loss", "trials"}
