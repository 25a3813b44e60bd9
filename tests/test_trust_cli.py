"""Verdicts a user can bet on: `tuneup probe` with a `command` trainer that misbehaves on purpose.

The script stands in for a training script. It keeps a count of its runs in a
state file, so it can change its behaviour as a session goes on: a variant that
is fast only while the search looks at it, a machine whose speed jumps
mid-session, a real and steady gain under noise, and a burst of load from a
process outside tuneup during one probe.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneup.cli import main

SCRIPT = """
import argparse, json, math, os, random, sys, time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--scenario", required=True)
parser.add_argument("--state", required=True)
parser.add_argument("--amp_mode", default="none")
args = parser.parse_args()
state = Path(args.state)
counts = json.loads(state.read_text()) if state.exists() else {}
counts["all"] = counts.get("all", 0) + 1
counts[args.amp_mode] = counts.get(args.amp_mode, 0) + 1
state.write_text(json.dumps(counts))
run, mine = counts["all"], counts[args.amp_mode]

def burn_elsewhere():
    # Asks another job's process (started by the test, outside tuneup) to load a CPU.
    state.with_name("burn").touch()

rate = 100.0
if args.scenario == "confirm-loses" and args.amp_mode == "bf16":
    rate = 200.0 if mine <= 2 else 50.0  # fast while the search looks, slow afterwards
elif args.scenario == "step":
    rate = 100.0 if run < 4 else 1000.0  # another job ended: the machine is 10x faster
elif args.scenario == "real":
    rate = (130.0 if args.amp_mode == "bf16" else 100.0) * math.exp(
        0.05 * random.Random(run).gauss(0.0, 1.0)
    )
elif args.scenario == "burst" and args.amp_mode == "bf16" and mine == 1:
    burn_elsewhere()
    time.sleep(1.9)
    rate = 40.0  # what the contention did to this probe

for epoch, wobble in enumerate([0.0, -0.01, 0.0, 0.01]):
    sps = rate / 3 if epoch == 0 else rate * (1 + wobble)
    print(f"Time taken for epoch {epoch + 1} is 1.0 sec, avg {sps:.3f} samples/sec",
          file=sys.stderr)
    print(f"Avg train loss={0.1 / (epoch + 1):.6f}", file=sys.stderr)
"""


# Another job's process: double-forked by a launcher that exits, so it belongs to no
# tuneup process tree (a probe's guardian adopts whatever its probe starts). When the
# trigger file appears it keeps a CPU busy for 1.6 s.
BURNER = """
import os, sys, time
from pathlib import Path
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        trigger, give_up = Path(sys.argv[1]), time.time() + 120
        while not trigger.exists() and time.time() < give_up:
            time.sleep(0.02)
        end = time.time() + 1.6
        while time.time() < end:
            pass
        os._exit(0)
    os._exit(0)
os.wait()
"""


def run_session(tmp_path: Path, scenario: str, capsys: Any) -> tuple[dict[str, Any], str, Path]:
    """`tuneup probe` on the script's amp stage (bf16 against none); (summary, stderr, folder)."""
    if scenario == "burst":
        subprocess.run([sys.executable, "-c", BURNER, str(tmp_path / "burn")], check=True)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT).lstrip(), encoding="utf-8")
    preset = {
        "name": f"trust-{scenario}",
        "train": {"amp_mode": "none"},
        "probe": {"stages": [{"amp": {"amp_mode": ["bf16"]}}], "budget": {"limit_s": 60}},
        "command": {
            "run": [
                sys.executable,
                str(script),
                "--scenario",
                scenario,
                "--state",
                str(tmp_path / "state.json"),
            ],
            "cwd": str(tmp_path),
            "flags": {"amp_mode": "--amp_mode {value}"},
        },
    }
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(preset), encoding="utf-8")
    out = tmp_path / "run"
    argv = ["probe", "--trainer", "command", "--preset", str(path), "--out", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    return summary, captured.out + captured.err, out


def export_flags(folder: Path, capsys: Any) -> str:
    """The script's own flags for the recommendation (a command session exports those)."""
    assert main(["export", str(folder), "--format", "flags"]) == 0
    return capsys.readouterr().out


def test_a_variant_that_loses_the_confirmation_is_neither_recommended_nor_exported(
    tmp_path: Path, capsys: Any
) -> None:
    summary, printed, out = run_session(tmp_path, "confirm-loses", capsys)
    conf = summary["confirmation"]
    assert conf["search_path"] == ["amp_mode=bf16"]  # the search was fooled: bf16 ran at 200 there
    assert conf["status"] == "not confirmed" and conf["path"] == []
    assert conf["attempts"][0]["speedup"] < 1.0  # 50 against 100 in the interleaved pairs
    assert summary["recommendation"]["values"]["amp_mode"] == "none"
    assert summary["recommendation"]["changes"] == {}
    assert summary["speedup"]["value"] == 1.0
    headline = summary["recommendation"]["headline"]
    assert headline.startswith(
        "recommendation: keep the baseline: the search's pick (amp_mode=bf16"
    )
    assert "did not hold up in the interleaved confirmation" in headline
    assert headline in printed
    # the "after" verdict is the baseline's, not the search's 200 samples/s
    assert summary["bottleneck"]["after"] == summary["bottleneck"]["before"]
    assert "bf16" not in export_flags(out, capsys)


def test_a_step_change_of_machine_speed_with_knobs_that_do_nothing_keeps_the_baseline(
    tmp_path: Path, capsys: Any
) -> None:
    summary, printed, _ = run_session(tmp_path, "step", capsys)
    assert summary["recommendation"]["changes"] == {}
    assert "keep the baseline" in summary["recommendation"]["headline"]
    (amp,) = summary["stages"]
    assert amp["winner"] is None
    # The jump is reported, not credited to a knob.
    notes = summary["stability"]["notes"]
    assert any("drifted" in n and "+900%" in n for n in notes), notes
    assert "note: the machine's speed drifted" in printed


def test_a_real_steady_gain_under_noise_is_adopted_and_confirmed(
    tmp_path: Path, capsys: Any
) -> None:
    summary, _printed, out = run_session(tmp_path, "real", capsys)
    assert summary["recommendation"]["changes"] == {"amp_mode": "bf16"}
    conf = summary["confirmation"]
    assert conf["status"] == "confirmed" and conf["path"] == ["amp_mode=bf16"]
    gain = summary["speedup"]
    assert gain["pairs"] >= 2 and 1.15 < gain["value"] < 1.45
    assert gain["low"] > 1.02  # the whole likely range clears the floor
    assert summary["recommendation"]["headline"].startswith("recommendation: amp_mode=bf16: ")
    assert "--amp_mode bf16" in export_flags(out, capsys)


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads the host's load from /proc")
def test_a_contention_burst_during_one_probe_is_measured_again_and_noted(
    tmp_path: Path, capsys: Any
) -> None:
    summary, printed, out = run_session(tmp_path, "burst", capsys)
    journal = [json.loads(x) for x in (out / "journal.jsonl").read_text().splitlines()]
    bf16 = [p for p in journal if p["variant"] == {"amp_mode": "bf16"}]
    hit = bf16[0]
    assert hit["contention"]["note"].startswith("other processes used")
    assert hit["contention"]["other_cpus"] >= 0.5
    again = journal[journal.index(hit) + 1]
    assert again["variant"] == {"amp_mode": "bf16"}  # measured again at once
    assert not (again["contention"] or {}).get("note")
    assert again["full_sps"] == pytest.approx(100.0, rel=0.02)
    assert "(contended, left out: other processes used" in printed
    # bf16 does nothing in this script: with the burst left out, nothing is adopted.
    assert summary["recommendation"]["changes"] == {}
