"""The fault matrix's rows for hostile input (issue 49) from outside tuneup's files:
garbage in the SLURM variables, presets that bomb, are binary or climb out of the
results root, a damaged ladder-costs.json, broken plugins, OMP_NUM_THREADS=1.

As in _fault_rows_hostile.py, each row records what a user would see and `held`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from _fault_harness import ROW_LIMIT_S, Harness, bundled_preset, last_words, row

SIM = ["probe", "--trainer", "sim"]
MEMORY_CAP = 3 * 2**30  # the tester's cap for the alias bomb
PLUGIN_LIMIT_S = 120


def _measured(h: Harness, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A run under the tester's memory cap, with its seconds and its peak memory."""
    report = h.work / f"rusage-{time.monotonic_ns()}.json"
    wrapper = (
        "import json, resource, subprocess, sys\n"
        f"cap = {MEMORY_CAP}\n"
        "limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
        "done = subprocess.run(sys.argv[2:], preexec_fn=limit, capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "json.dump({'exit': done.returncode, 'stdout': done.stdout, 'stderr': done.stderr,\n"
        "           'peak_mb': round(peak / 1024)}, open(sys.argv[1], 'w'))\n"
    )
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", wrapper, str(report), sys.executable, "-m", "tuneup", *args],
        env=env or h.env(),
        cwd=h.work,
        timeout=ROW_LIMIT_S,
    )
    seconds = round(time.monotonic() - began, 2)
    found = json.loads(report.read_text())
    return {
        "exit": found["exit"],
        "said": last_words(found["stdout"], found["stderr"]),
        "stdout": found["stdout"],
        "stderr": found["stderr"],
        "seconds": seconds,
        "peak_mb": found["peak_mb"],
    }


def _one_line_exit_2(result: dict[str, Any]) -> bool:
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    return result["exit"] == 2 and len(lines) == 1 and "Traceback" not in result["stderr"]


def _slurm_env(h: Harness, **extra: str) -> dict[str, str]:
    return h.env(SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="1", **extra)


def _slurm_row(h: Harness, name: str, fault: str, **extra: str) -> dict[str, Any]:
    """A sim ladder in a SLURM job with one variable garbled, no --budget: the time left is
    what the ladder is fitted to."""
    first = _measured(h, *SIM, "--out", str(h.work / name), env=_slurm_env(h, **extra))
    both = first["stdout"] + first["stderr"]
    variable = next(iter(extra))
    about = [line for line in first["stderr"].splitlines() if variable in line]
    absurd = "-1795" in both or "Traceback" in both or "internal error" in both
    return row(
        fault,
        first,
        seconds=first["seconds"],
        peak_mb=first["peak_mb"],
        said_of_it=about[0] if about else "",
        held=not absurd and first["exit"] in (0, 2, 4) and first["seconds"] < 30 and bool(about),
    )


def slurm_end_nan(h: Harness) -> dict[str, Any]:
    return _slurm_row(h, "slurm-nan", "SLURM_JOB_END_TIME=nan", SLURM_JOB_END_TIME="nan")


def slurm_end_huge(h: Harness) -> dict[str, Any]:
    return _slurm_row(h, "slurm-huge", "SLURM_JOB_END_TIME=1e400", SLURM_JOB_END_TIME="1e400")


def slurm_end_negative(h: Harness) -> dict[str, Any]:
    return _slurm_row(h, "slurm-neg", "SLURM_JOB_END_TIME=-1", SLURM_JOB_END_TIME="-1")


def slurm_end_text(h: Harness) -> dict[str, Any]:
    return _slurm_row(h, "slurm-abc", "SLURM_JOB_END_TIME=abc", SLURM_JOB_END_TIME="abc")


def slurm_nodelist(h: Harness) -> dict[str, Any]:
    return _slurm_row(
        h,
        "slurm-nodes",
        "SLURM_JOB_NODELIST='n[0-99999999]'",
        SLURM_JOB_NODELIST="n[0-99999999]",
    )


# Under a key the schema reads (probe.hints.setup): its error message would repr it whole.
ALIAS_BOMB = "name: bomb\nprobe:\n  hints:\n    setup:\n      x:\n" + "".join(
    f"        {name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


def _preset_row(h: Harness, name: str, fault: str, content: bytes) -> dict[str, Any]:
    path = h.work / f"{name}.yaml"
    path.write_bytes(content)
    first = _measured(h, *SIM, "--preset", str(path), "--out", str(h.work / name))
    folder = h.work / f"{name}-config"
    (folder / "presets").mkdir(parents=True, exist_ok=True)
    shutil.copy(path, folder / "presets" / f"{name}.yaml")
    listed = h.run("presets", "list", env=h.env(TUNEUP_CONFIG_DIR=str(folder)))
    return row(
        fault,
        first,
        seconds=first["seconds"],
        peak_mb=first["peak_mb"],
        one_line_exit_2=_one_line_exit_2(first),
        presets_list_exit=listed["exit"],
        held=_one_line_exit_2(first)
        and first["seconds"] < 5
        and first["peak_mb"] < 200
        and listed["exit"] == 0,
    )


def preset_alias_bomb(h: Harness) -> dict[str, Any]:
    return _preset_row(
        h, "bomb", "a YAML alias bomb as --preset, and in the preset folder", ALIAS_BOMB.encode()
    )


def preset_binary(h: Harness) -> dict[str, Any]:
    return _preset_row(h, "binary", "a binary preset file", bytes(range(256)) * 8)


def preset_climbs(h: Harness) -> dict[str, Any]:
    path = h.work / "climb.yaml"
    preset = yaml.safe_load((bundled_preset()).read_text())
    path.write_text(yaml.safe_dump({**preset, "name": "../../../climbed"}))
    here = h.work / "deep" / "er" / "still"
    here.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "tuneup", *SIM, "--preset", str(path)],
        env=h.env(),
        cwd=here,
        capture_output=True,
        text=True,
        timeout=ROW_LIMIT_S,
    )
    first = {"exit": proc.returncode, "said": last_words(proc.stdout, proc.stderr)}
    made = (str(p.relative_to(h.work)) for p in h.work.rglob("climbed*"))
    outside = sorted(p for p in made if "tuneup-results" not in p)
    return row(
        "a preset named ../../../climbed, results in the default folder",
        first,
        written_outside=outside,
        held=not outside,
    )


def ladder_costs_damaged(h: Harness) -> dict[str, Any]:
    cache = h.work / "costs-cache"
    env = h.env(TUNEUP_CACHE_DIR=str(cache))
    real = ["probe", "--preset", "cpu-smoke", "--stages", "amp"]  # a sim ladder keeps none
    h.run(*real, "--out", str(h.work / "costs-first"), env=env)
    record = next(cache.rglob("ladder-costs.json"), None)
    if record is None:
        return {"fault": "a damaged ladder-costs.json", "not_run": "no record was written"}
    text = record.read_text()
    damaged = json.loads(text)

    def negate(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: negate(v) for k, v in value.items()}
        if isinstance(value, list):
            return [negate(v) for v in value]
        if isinstance(value, float):
            return -abs(value) * 1000
        return value

    record.write_text(json.dumps(negate(damaged)))
    first = h.run(*real, "--out", str(h.work / "costs-second"), env=env)
    both = first["stdout"] + first["stderr"]
    negative = re.search(r"(estimated|about|~) ?-\d", both) is not None
    estimate = [line for line in first["stderr"].splitlines() if "ladder" in line and " s" in line]
    return row(
        "ladder-costs.json with negative costs",
        first,
        estimate_line=estimate[0] if estimate else "",
        negative_estimate=negative,
        said_damaged="ladder-costs.json" in first["stderr"],
        held=not negative and first["exit"] in (0, 4),
    )


def _plugin(h: Harness, name: str, body: str) -> Path:
    """A third-party stage plugin package on its own folder (module and dist-info)."""
    root = h.work / f"plugin-{name}"
    shutil.rmtree(root, ignore_errors=True)
    (root / f"{name}_stage.py").parent.mkdir(parents=True)
    (root / f"{name}_stage.py").write_text(body)
    info = root / f"{name}_stage-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-stage\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tuneup.stages]\n{name} = {name}_stage:STAGE\n")
    return root


def _plugin_row(h: Harness, name: str, fault: str, body: str) -> dict[str, Any]:
    root = _plugin(h, name, body)
    env = h.env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(root)) if p)
    began = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tuneup", *SIM, "--out", str(h.work / f"plugin-{name}-run")],
            env=env,
            cwd=h.work,
            capture_output=True,
            text=True,
            timeout=PLUGIN_LIMIT_S,
        )
        first = {"exit": done.returncode, "said": last_words(done.stdout, done.stderr)}
        named = name in done.stderr
        answered = "recommendation" in done.stdout
    except subprocess.TimeoutExpired:
        first = {"exit": "hung", "said": f"still running after {PLUGIN_LIMIT_S} s"}
        named = answered = False
    return row(
        fault,
        first,
        seconds=round(time.monotonic() - began, 1),
        plugin_named=named,
        ladder_answered=answered,
        held=named and answered,
    )


def plugin_exits(h: Harness) -> dict[str, Any]:
    body = (
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--lr', required=True)\n"
        "parser.parse_args()\n"
    )
    return _plugin_row(h, "argy", "a stage plugin that parses arguments at import", body)


def plugin_hangs(h: Harness) -> dict[str, Any]:
    body = "import time\ntime.sleep(10**6)\n"
    return _plugin_row(h, "sleepy", "a stage plugin whose import hangs", body)


def threads_one(h: Harness) -> dict[str, Any]:
    out = h.work / "threads-one"
    first = h.run(
        "probe",
        "--preset",
        "cpu-smoke",
        "--stages",
        "threads",
        "--out",
        str(out),
        env=h.env(OMP_NUM_THREADS="1"),
    )
    try:
        lines = [json.loads(x) for x in (out / "journal.jsonl").read_text().splitlines() if x]
    except (OSError, ValueError):
        lines = []
    threads = [
        line.get("config", {}).get("intra_op_threads")
        for line in lines
        if line.get("stage") == "threads"
    ]
    return row(
        "OMP_NUM_THREADS=1, the threads stage",
        first,
        threads_tried=threads,
        held=1 not in threads,
    )


INPUT_ROWS = {
    "slurm-end-nan": slurm_end_nan,
    "slurm-end-huge": slurm_end_huge,
    "slurm-end-negative": slurm_end_negative,
    "slurm-end-text": slurm_end_text,
    "slurm-nodelist": slurm_nodelist,
    "preset-alias-bomb": preset_alias_bomb,
    "preset-binary": preset_binary,
    "preset-climbs": preset_climbs,
    "ladder-costs-damaged": ladder_costs_damaged,
    "plugin-exits": plugin_exits,
    "plugin-hangs": plugin_hangs,
    "threads-omp-1": threads_one,
}
