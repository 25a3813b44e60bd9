"""The suite's steps: what each runs, how long it may need, and how its output is judged.

Pure where it can be: each step's `parse` takes the finished command's exit
status and output (and the files it wrote) and returns an Outcome; the
driver (suite.py) owns processes, the clock and the deadline.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from suite_common import last_json_line, read_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


@dataclass
class Context:
    """What a step needs to know about this run."""

    mode: str  # "gpu" or "cpu"
    out: Path
    python: str = sys.executable
    root: Path = ROOT
    limit_s: float | None = None  # the time limit of the step about to run

    @property
    def cpu(self) -> bool:
        return self.mode == "cpu"

    def tuneup(self, *args: str) -> list[str]:
        return [self.python, "-m", "tuneup", *args]


@dataclass
class Finished:
    """A step's command after it ended (rc None: it was stopped at its time limit)."""

    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


@dataclass
class Outcome:
    """A step's verdict: pass, fail or skipped, why, its figures and a few words for the table."""

    status: str
    why: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    key: str = ""


@dataclass(frozen=True)
class Step:
    """One ranked step of the suite."""

    name: str
    what: str
    estimate_s: dict[str, float]  # what the driver must have left to start it, per mode
    max_s: dict[str, float]  # its time limit, per mode (cut to what is left)
    command: Callable[[Context], list[str]]
    parse: Callable[[Context, Finished], Outcome]
    prepare: Callable[[Context], str | None] | None = None  # a reason to fail without running


def last_line(text: str, prefer: str = "") -> str:
    """The last non-empty line of `text` (the last one containing `prefer`, if any does)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if prefer:
        for line in reversed(lines):
            if prefer in line:
                return line[:300]
    return lines[-1][:300] if lines else ""


def _ended(done: Finished) -> str:
    if done.timed_out:
        return f"stopped at its time limit after {done.seconds:.0f}s"
    return f"exited {done.rc}: {last_line(done.stderr, 'rror') or last_line(done.stdout)}"


# ---- 1. doctor ---------------------------------------------------------------------------


def doctor_command(ctx: Context) -> list[str]:
    return ctx.tuneup("doctor", "--json", *(["--cpu"] if ctx.cpu else []))


def doctor_prepare(ctx: Context) -> str | None:
    """Fail honestly, without faking a result, when this tuneup has no `doctor` command."""
    import subprocess

    try:
        done = subprocess.run(
            ctx.tuneup("doctor", "--help"),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ctx.root,
        )
    except subprocess.TimeoutExpired:
        return "`tuneup doctor --help` did not answer within 120s"
    if done.returncode != 0:
        why = last_line(done.stderr) or last_line(done.stdout)
        return (
            f"tuneup doctor is not available "
            f"(`tuneup doctor --help` exited {done.returncode}: {why})"
        )
    return None


def doctor_parse(ctx: Context, done: Finished) -> Outcome:
    report = last_json_line(done.stdout)
    if report is None:
        text = done.stdout.strip()
        try:
            import json

            report = json.loads(text) if text.startswith("{") else None
        except ValueError:
            report = None
    if report is None:
        return Outcome("fail", f"no JSON on stdout; {_ended(done)}")
    checks = report.get("checks") if isinstance(report.get("checks"), list) else []
    levels: dict[str, int] = {}
    failed = []
    for check in checks:
        level = str(check.get("level", "?")).upper()
        levels[level] = levels.get(level, 0) + 1
        if level == "FAIL":
            failed.append(str(check.get("name") or check.get("check") or check.get("title") or "?"))
    key = ", ".join(f"{levels[k]} {k}" for k in ("OK", "WARN", "FAIL") if k in levels)
    figures = {"report": report, "levels": levels}
    if done.timed_out:
        return Outcome("fail", _ended(done), figures, key)
    if done.rc == 0 and not failed:
        return Outcome("pass", "nothing failed", figures, key or "no checks")
    why = f"failed checks: {', '.join(failed)}" if failed else _ended(done)
    return Outcome("fail", why, figures, key)


# ---- 2. honesty --------------------------------------------------------------------------


def honesty_command(ctx: Context) -> list[str]:
    out = ctx.out / "honesty.json"
    # On a GPU, bf16 + channels_last + fused Adam (a 13 s first step, not fp32's 34 s) in two
    # repeats: what fits a short window beside the other steps (suite_plan.py).
    sized = [] if ctx.cpu else ["--configs", "tuned-eager", "--repeats", "2"]
    return [
        ctx.python,
        str(HERE / "honesty.py"),
        *(["--cpu"] if ctx.cpu else []),
        *sized,
        "--out",
        str(out),
    ]


def honesty_parse(ctx: Context, done: Finished) -> Outcome:
    document = read_json(ctx.out / "honesty.json")
    if not document or not document.get("summary"):
        return Outcome("fail", f"no comparison finished; {_ended(done)}")
    summary = document["summary"]
    parts: list[str] = []
    failed: list[str] = []
    info: dict[str, list[str]] = {}  # reason -> the configs it applies to
    for name, fig in summary.items():
        verdict = fig.get("verdict")
        ratio = fig.get("ratio")
        shown = f"{ratio:.3f}" if isinstance(ratio, (int, float)) else "-"
        parts.append(f"{name} {shown} ({verdict})")
        if verdict == "fail":
            failed.append(f"{name}: {fig.get('why')}")
        elif verdict == "info":
            info.setdefault(str(fig.get("why")), []).append(name)
    figures = {
        "summary": summary,
        "rows": document.get("rows", []),
        "configs": document.get("configs"),
        "complete": bool(document.get("done")),
    }
    key = ", ".join(parts)
    if failed:
        return Outcome("fail", "; ".join(failed), figures, key)
    if not document.get("done"):
        return Outcome("fail", f"not all repeats finished; {_ended(done)}", figures, key)
    notes = [f"{', '.join(names)}: {reason}" for reason, names in info.items()]
    if sum(len(names) for names in info.values()) < len(summary):
        notes.insert(0, "worker FULL within 3% of the bare loop")
    why = "; ".join(notes)
    return Outcome("pass", why, figures, key)


# ---- 3. gpu-tests ------------------------------------------------------------------------

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def gpu_tests_command(ctx: Context) -> list[str]:
    return [ctx.python, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"]


def pytest_counts(text: str) -> dict[str, int]:
    """The counts of pytest's closing line ("2 failed, 15 passed, 831 deselected in 9.1s")."""
    counts: dict[str, int] = {}
    for line in reversed(text.splitlines()):
        found = _COUNT.findall(line)
        if found and (" in " in line or line.startswith("=")):
            for number, word in found:
                word = "errors" if word.startswith("error") else word
                counts[word] = counts.get(word, 0) + int(number)
            break
    return counts


def gpu_tests_parse(ctx: Context, done: Finished) -> Outcome:
    counts = pytest_counts(done.stdout)
    key = ", ".join(f"{v} {k}" for k, v in counts.items() if k != "deselected") or "no count"
    failed_tests = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.MULTILINE)
    figures = {"counts": counts, "failed_tests": failed_tests}
    if done.timed_out:
        return Outcome("fail", _ended(done), figures, key)
    ran = counts.get("passed", 0) + counts.get("failed", 0) + counts.get("errors", 0)
    if done.rc == 0 and ran == 0 and counts.get("skipped"):
        if ctx.cpu:
            return Outcome("pass", "skipped: no CUDA", figures, key)
        return Outcome(
            "fail", "every gpu test skipped on a GPU run (is CUDA visible?)", figures, key
        )
    if done.rc == 0:
        return Outcome("pass", f"{counts.get('passed', 0)} passed", figures, key)
    if failed_tests:
        return Outcome("fail", "failed: " + ", ".join(failed_tests[:5]), figures, key)
    return Outcome("fail", _ended(done), figures, key)


# ---- 4. knobs ----------------------------------------------------------------------------


def knobs_command(ctx: Context) -> list[str]:
    command = [ctx.python, str(HERE / "knobs.py"), *(["--cpu"] if ctx.cpu else [])]
    command += ["--out", str(ctx.out / "knobs.json")]
    if ctx.limit_s is not None:  # stop starting knobs in time to write what it has
        command += ["--deadline-s", f"{max(1.0, ctx.limit_s - 10):.0f}"]
    return command


def knobs_parse(ctx: Context, done: Finished) -> Outcome:
    document = read_json(ctx.out / "knobs.json")
    rows = (document or {}).get("rows") or []
    if not rows:
        return Outcome("fail", f"no knob measured; {_ended(done)}")
    figures = {"rows": rows, "complete": bool(document.get("done")), "loop": document.get("loop")}
    measured = {r["knob"]: r for r in rows if r.get("status") == "pass"}
    failed = [f"{r['knob']}: {r.get('why')}" for r in rows if r.get("status") == "fail"]
    base = measured.get("baseline")
    best = max(
        (r for r in measured.values() if r["knob"] != "baseline"),
        key=lambda r: r.get("ratio_to_baseline") or 0.0,
        default=None,
    )
    parts = []
    if base:
        parts.append(f"baseline {base['ms_per_step']:.1f} ms/step")
    if best and best.get("ratio_to_baseline"):
        parts.append(f"best {best['knob']} x{best['ratio_to_baseline']:.2f}")
    parts.append(f"{len(measured)} measured, {len(failed)} failed")
    key = "; ".join(parts)
    if base is None:
        return Outcome("fail", "the baseline did not run: " + "; ".join(failed), figures, key)
    if failed:
        return Outcome("fail", "; ".join(failed), figures, key)
    if not document.get("done"):
        return Outcome("fail", f"not every knob ran; {_ended(done)}", figures, key)
    return Outcome("pass", "every knob that applies here ran", figures, key)


# ---- 5. ladder ---------------------------------------------------------------------------

LADDER_STAGES = "tf32"  # the CPU dry run's ladder


def ladder_preset(ctx: Context) -> dict[str, Any]:
    """The CPU dry run's ladder: cpu-smoke with a tiny model and a short budget."""
    preset = yaml.safe_load((ctx.root / "presets" / "cpu-smoke.yaml").read_text())
    preset["name"] = "gpu-suite-cpu-smoke"
    preset["description"] = "cpu-smoke with a short budget, written by bench/gpu/suite.py"
    preset["synthetic_data"] = {"box": 32, "val_box": 16, "seed": 0}
    preset["train"].update(
        {
            "levels": 2,
            "width": 4,
            "data_size": 8,
            "box_size": [32, 16],
            "global_batch_size": 4,
            "base_batch_size": 4,
            "Nsamples": 4096,
            "Nsamples_val": 0,
            "num_epochs": 1,
            "num_data_workers": 1,  # a DataLoader child, for the orphans step to look for
        }
    )
    budget = {"trial_s": 0.02, "min_trials": 2, "max_trials": 3, "warmup_cap_s": 0.3}
    preset["probe"]["budget"] = {**budget, "loss_steps": 3, "limit_s": 60}
    preset["probe"]["stages"] = LADDER_STAGES.split(",")
    return preset


def ladder_prepare(ctx: Context) -> str | None:
    shutil.rmtree(ctx.out / "ladder", ignore_errors=True)
    if ctx.cpu:
        preset = yaml.safe_dump(ladder_preset(ctx), sort_keys=False)
        (ctx.out / "ladder-preset.yaml").write_text(preset)
    return None


LADDER_MARGIN_S = 30.0  # the ladder's start, its summary and the step's own end


def ladder_command(ctx: Context) -> list[str]:
    """On a GPU the default ladder (the preset tuneup picks) under `--budget`, the time this
    run has left; on the CPU a tiny preset's short ladder."""
    budget = []
    if ctx.limit_s is not None:
        budget = ["--budget", f"{max(30.0, ctx.limit_s - LADDER_MARGIN_S):.0f}s"]
    chosen = (
        ["--preset", str(ctx.out / "ladder-preset.yaml"), "--stages", LADDER_STAGES]
        if ctx.cpu
        else []
    )
    return ctx.tuneup("probe", *chosen, *budget, "--out", str(ctx.out / "ladder"), "--json")


TELEMETRY = ("gpu_util_mean", "power_mean_w", "energy_j_per_sample", "gpu_mem_used_mb")


def journal_probes(path: Path) -> list[dict[str, Any]]:
    """The probe results in a session's journal.jsonl (lines with a stage and a status)."""
    import json

    probes = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "stage" in entry and "status" in entry:
            probes.append(entry)
    return probes


def ladder_parse(ctx: Context, done: Finished) -> Outcome:
    probes = journal_probes(ctx.out / "ladder" / "journal.jsonl")
    ok = [p for p in probes if p.get("status") == "ok"]
    with_telemetry = [p for p in ok if any(p.get(k) is not None for k in TELEMETRY)]
    statuses: dict[str, int] = {}
    for probe in probes:
        statuses[probe["status"]] = statuses.get(probe["status"], 0) + 1
    result = last_json_line(done.stdout) or {}
    summary = result.get("summary") or {}
    recommendation = summary.get("recommendation") or {}
    telemetry = {
        k: [p.get(k) for p in ok if p.get(k) is not None]
        for k in ("gpu_util_mean", "power_mean_w", "throttled")
    }
    budget = summary.get("time_budget") or {}
    wall = round(sum(float(p.get("wall_s") or 0.0) for p in probes), 1)
    figures = {
        "probes": len(probes),
        "probe_wall_s": wall,
        "time_budget": budget,
        "statuses": statuses,
        "headline": recommendation.get("headline"),
        "changes": recommendation.get("changes"),
        "speedup": summary.get("speedup"),
        "probes_with_telemetry": len(with_telemetry),
        "telemetry": telemetry,
        "stages": summary.get("stages"),
        "results_dir": result.get("results_dir") or str(ctx.out / "ladder"),
    }
    key = f"{len(probes)} probes ({len(ok)} ok) in {wall:.0f}s"
    if budget.get("limit_s"):
        key += f" of a {budget['limit_s']:.0f}s budget"
    key += f", telemetry on {len(with_telemetry)}"
    if recommendation.get("changes"):
        key += "; " + ", ".join(f"{k}={v}" for k, v in recommendation["changes"].items())
    elif recommendation:
        key += "; keep the baseline"
    if done.rc != 0 or done.timed_out:
        return Outcome("fail", _ended(done), figures, key)
    if not ok:
        return Outcome("fail", "no probe ran ok", figures, key)
    if not recommendation:
        return Outcome("fail", "no recommendation in the --json output", figures, key)
    if ctx.cpu:
        return Outcome("pass", "CPU dry run: no GPU telemetry expected", figures, key)
    if not with_telemetry:
        return Outcome("fail", "no probe result carries GPU telemetry (util/power)", figures, key)
    return Outcome("pass", str(recommendation.get("headline") or ""), figures, key)


# ---- 6. speed -----------------------------------------------------------------------------


def speed_command(ctx: Context) -> list[str]:
    """The default single-GPU ladder (the preset tuneup picks here), timed by
    bench/ladder_speed.py: wall time, probes, where the time went, the estimate's error."""
    command = [
        ctx.python,
        str(ctx.root / "bench" / "ladder_speed.py"),
        "--after",
        str(ctx.root),
        "--rounds",
        "1",
        "--keep",
        str(ctx.out / "speed"),
        "--out",
        str(ctx.out / "speed.json"),
    ]
    if ctx.cpu:  # the dry run checks the step's plumbing on the ladder step's tiny preset
        command += ["--preset", str(ctx.out / "speed-preset.yaml")]
    return command


def speed_prepare(ctx: Context) -> str | None:
    shutil.rmtree(ctx.out / "speed", ignore_errors=True)
    (ctx.out / "speed.json").unlink(missing_ok=True)
    if ctx.cpu:
        preset = ladder_preset(ctx)
        preset["name"] = "gpu-suite-speed-dry-run"
        (ctx.out / "speed-preset.yaml").write_text(yaml.safe_dump(preset, sort_keys=False))
    return None


def speed_parse(ctx: Context, done: Finished) -> Outcome:
    document = read_json(ctx.out / "speed.json") or {}
    runs = document.get("runs") or []
    if not runs:  # stopped at its limit: what the journal holds so far
        probes = [p for d in sorted((ctx.out / "speed").glob("*")) for p in journal_probes(
            d / "journal.jsonl"
        )]  # fmt: skip
        figures = {
            "probes_so_far": len(probes),
            "probe_wall_s": round(sum(p.get("wall_s") or 0 for p in probes), 1),
            "timed_s": round(sum(p.get("timed_s") or 0 for p in probes), 1),
        }
        return Outcome("fail", f"the ladder did not finish: {_ended(done)}", figures)
    run = runs[0]
    key = (
        f"{run['preset']}: {run['wall_s'] / 60:.1f} min, {run['probes']} probes, "
        f"{100 * (run.get('trial_share') or 0):.0f}% in timed trials"
    )
    if done.rc != 0:
        return Outcome("fail", _ended(done), run, key)
    return Outcome("pass", str(run.get("headline") or ""), run, key)


# ---- the table ---------------------------------------------------------------------------

STEPS: tuple[Step, ...] = (
    Step(
        "doctor",
        "tuneup doctor --json: the installation's own checks",
        {"gpu": 60, "cpu": 20},
        {"gpu": 300, "cpu": 60},
        doctor_command,
        doctor_parse,
        doctor_prepare,
    ),
    Step(
        "honesty",
        "probe worker FULL samples/s vs an independent bare loop, interleaved",
        {"gpu": 240, "cpu": 15},
        {"gpu": 420, "cpu": 60},
        honesty_command,
        honesty_parse,
    ),
    Step(
        "gpu-tests",
        "pytest -m gpu",
        {"gpu": 150, "cpu": 10},
        {"gpu": 420, "cpu": 60},
        gpu_tests_command,
        gpu_tests_parse,
    ),
    Step(
        "knobs",
        "each knob alone: ms/step, samples/s, TFLOP/s, MFU against the fp32 baseline",
        {"gpu": 300, "cpu": 20},
        {"gpu": 540, "cpu": 60},
        knobs_command,
        knobs_parse,
    ),
    Step(
        "ladder",
        "a short real tuneup probe ladder with GPU telemetry joined",
        {"gpu": 300, "cpu": 25},
        {"gpu": 540, "cpu": 90},
        ladder_command,
        ladder_parse,
        ladder_prepare,
    ),
    Step(
        "speed",
        "the default single-GPU ladder end to end: wall time, probes, timed-trial share",
        {"gpu": 420, "cpu": 60},
        {"gpu": 600, "cpu": 240},
        speed_command,
        speed_parse,
        speed_prepare,
    ),
)
STEP_NAMES = (*(s.name for s in STEPS), "orphans")
