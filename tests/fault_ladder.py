"""A `command`-trainer ladder that deals itself a fault, for tests/test_faults.py.

`preset(root)` writes a preset whose probes run `train.py`: fused Adam runs twice as fast
as the default, and the probe numbered `at` in plan.json deals the fault the plan names,
for real, from inside the ladder: `fill` a file until the disk is full, `readonly` a
folder (a read-only bind of it over itself: every new open meets EROFS; run it in a user
namespace, `unshare -rm`). `fail: true` makes every fused-Adam probe exit 1.

Run as a script (`python tests/fault_ladder.py SCENARIO ROOT`, under `unshare -rm`) it
plays one storage scenario on a small tmpfs and prints what tuneup did, as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

SCRIPT = """
import argparse, json, subprocess, sys
from pathlib import Path
parser = argparse.ArgumentParser()
parser.add_argument("--optimizer_impl", default="foreach")
parser.add_argument("--plan", required=True)
args = parser.parse_args()
plan_file = Path(args.plan)
plan = json.loads(plan_file.read_text()) if plan_file.exists() else {}
count = plan_file.with_suffix(".count")
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
if n == plan.get("at"):
    if "fill" in plan:
        with open(plan["fill"], "wb") as out:
            try:
                while True:
                    out.write(b"\\0" * 65536)
                    out.flush()
            except OSError:
                pass
    if "readonly" in plan:
        folder = plan["readonly"]
        subprocess.run(["mount", "--bind", folder, folder], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
if plan.get("fail") and args.optimizer_impl == "fused":
    print("fused Adam is broken here", file=sys.stderr)
    sys.exit(1)
"""

# The end of a test train.py: four epochs logged as the tutorial logs them (what the
# command trainer reads), fused Adam twice as fast as the default.
TUTORIAL_EPOCH_LOG = """
speed = 200.0 if args.optimizer_impl == "fused" else 100.0
for epoch in range(4):
    sps = 30.0 if epoch == 0 else speed
    print(f"Time taken for epoch {epoch + 1} is 0.1 sec, avg {sps:.3f} samples/sec",
          file=sys.stderr)
    print(f"Avg train loss={0.1 / (epoch + 1):.6f}", file=sys.stderr)
"""
SCRIPT += TUTORIAL_EPOCH_LOG


def preset(root: Path, plan: dict[str, Any] | None = None) -> Path:
    """The preset (root/faults.yaml) and its script; plan.json holds `plan`."""
    script = root / "train.py"
    script.write_text(textwrap.dedent(SCRIPT).lstrip(), encoding="utf-8")
    (root / "plan.json").write_text(json.dumps(plan or {}), encoding="utf-8")
    (root / "plan.count").unlink(missing_ok=True)
    path = root / "faults.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "faults",
                "train": {"optimizer_impl": "foreach"},
                "probe": {"stages": ["optimizer"], "budget": {"limit_s": 60}},
                "command": {
                    "run": [sys.executable, str(script), "--plan", str(root / "plan.json")],
                    "cwd": str(root),
                    "flags": {"optimizer_impl": "--optimizer_impl {value}"},
                },
            }
        ),
        encoding="utf-8",
    )
    return path


def tuneup(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", *args], capture_output=True, text=True, timeout=180
    )
    return {"code": done.returncode, "stderr": done.stderr, "stdout": done.stdout}


def journal_lines(folder: Path) -> int:
    try:
        return sum(1 for line in (folder / "journal.jsonl").read_text().splitlines() if line)
    except OSError:
        return 0


def _mount_small_disk(disk: Path, size: str) -> None:
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "none", str(disk)], check=True)


def disk_fills(root: Path) -> dict[str, Any]:
    disk = root / "disk"
    _mount_small_disk(disk, "2m")
    out = disk / "run"
    path = preset(root, {"at": 4, "fill": str(disk / "filler")})
    first = tuneup("probe", "--trainer", "command", "--preset", str(path), "--out", str(out))
    kept = journal_lines(out)
    (disk / "filler").unlink()
    again = tuneup("probe", "--resume", str(out))
    return {"first": first, "kept": kept, "again": again}


def turns_readonly(root: Path) -> dict[str, Any]:
    out = root / "run"
    path = preset(root, {"at": 4, "readonly": str(out)})
    first = tuneup("probe", "--trainer", "command", "--preset", str(path), "--out", str(out))
    kept = journal_lines(out)
    still = tuneup("probe", "--resume", str(out))
    subprocess.run(["umount", str(out)], check=True)
    again = tuneup("probe", "--resume", str(out))
    return {"first": first, "kept": kept, "still": still, "again": again}


def full_from_start(root: Path) -> dict[str, Any]:
    disk = root / "disk"
    _mount_small_disk(disk, "1m")
    with (disk / "filler").open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    path = preset(root)
    run = disk / "run"
    first = tuneup("probe", "--trainer", "command", "--preset", str(path), "--out", str(run))
    left = sorted(p.name for p in run.iterdir()) if run.exists() else None
    return {"first": first, "left": left}


def readonly_home(root: Path) -> dict[str, Any]:
    home = root / "home"
    home.mkdir()
    subprocess.run(["mount", "--bind", str(home), str(home)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(home)], check=True)
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("TUNEUP_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneup",
            "probe",
            "--preset",
            "cpu-smoke",
            "--out",
            str(root / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    return {"first": {"code": done.returncode, "stderr": done.stderr, "stdout": done.stdout}}


def _fill(path: Path) -> None:
    with path.open("wb", buffering=0) as out:  # unbuffered: its close has nothing left
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass


def _train(root: Path, metrics: Path, *settings: str) -> dict[str, Any]:
    import os

    env = {**os.environ, "TUNEUP_CACHE_DIR": str(root / "cache"), "PYTHONUNBUFFERED": "1"}
    args = ["train", "--metrics", str(metrics), "--set", "log_every=1", *settings]
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    return {"code": done.returncode, "stderr": done.stderr, "stdout": done.stdout}


def metrics_disk_full(root: Path) -> dict[str, Any]:
    """`tuneup train --metrics` onto a full disk: refused before training, and mid-run
    (a page left free: the first lines fit, then the disk is full) stopped at once."""
    disk = root / "disk"
    _mount_small_disk(disk, "1m")
    _fill(disk / "filler")
    first = _train(root, disk / "full" / "m.jsonl", "--set", "max_steps=2")
    spare = disk / "spare"
    (disk / "filler").unlink()
    _fill(spare)  # the whole disk in one file, then all but its last page given back
    size = spare.stat().st_size
    with spare.open("r+b") as out:
        out.truncate(max(0, size - 4096))
    mid = disk / "m.jsonl"
    steps = 400
    second = _train(root, mid, "--set", f"max_steps={steps}", "--set", "num_epochs=100")
    lines = mid.read_text().splitlines() if mid.exists() else []
    return {"first": first, "mid": second, "kept": len(lines), "steps": steps, "disk": str(disk)}


SCENARIOS = {
    "disk-fills": disk_fills,
    "turns-readonly": turns_readonly,
    "full-from-start": full_from_start,
    "readonly-home": readonly_home,
    "metrics-disk-full": metrics_disk_full,
}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]](Path(sys.argv[2]))))
