"""The suite's steps: what each runs, how long it may need, and how its output is judged,
in rank order (STEPS).

Pure where it can be: each step's `parse` takes the finished command's exit
status and output (and the files it wrote) and returns an Outcome; the
driver (suite.py) owns processes, the clock and the deadline. The two ladders
(the whole one first, the short one last) are in suite_ladders.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from suite_common import last_json_line, read_json
from suite_ladders import (
    ladder_command,
    ladder_parse,
    ladder_prepare,
    speed_command,
    speed_parse,
    speed_prepare,
)
from suite_types import HERE, ROOT, Context, Finished, Outcome, Step, last_line
from suite_types import ended as _ended

__all__ = ["HERE", "ROOT", "STEPS", "STEP_NAMES", "Context", "Finished", "Outcome", "Step"]


# ---- doctor ------------------------------------------------------------------------------


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


# ---- honesty -----------------------------------------------------------------------------


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


# ---- gpu-tests ---------------------------------------------------------------------------

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def gpu_test_files(root: Path) -> list[str]:
    """The test files (relative to `root`) that mark a test `gpu`: collecting every file
    took 10 s on the CPU, device time where a GPU runs it."""
    return [
        str(path.relative_to(root))
        for path in sorted((root / "tests").glob("test_*.py"))
        if "mark.gpu" in path.read_text(encoding="utf-8")
    ]


def gpu_tests_command(ctx: Context) -> list[str]:
    # -v names each test as it starts, so a run stopped at its limit says which test it was
    # in (on the H200, 2026-11-27d, all it said was seven dots); --durations=0 leaves each
    # test's time for the next plan
    marked = gpu_test_files(ctx.root)
    return [
        ctx.python, "-m", "pytest", "-v", "--durations=0", "-m", "gpu", "-p", "no:cacheprovider",
        *marked,
    ]  # fmt: skip


_VERBOSE_RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", re.MULTILINE)
_VERBOSE_STARTED = re.compile(r"^(\S+::\S+)[ \t]*$", re.MULTILINE)


def stopped_in(text: str) -> tuple[dict[str, int], str]:
    """What pytest -v had done when it was stopped: its results so far by word, and the
    test it was in ("" where the output ends on a result)."""
    done: dict[str, int] = {}
    for _, word in _VERBOSE_RESULT.findall(text):
        word = word.lower()
        done[word] = done.get(word, 0) + 1
    started = _VERBOSE_STARTED.findall(text)
    running = started[-1] if started and text.rstrip().endswith(started[-1]) else ""
    return done, running


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
    figures: dict[str, Any] = {"counts": counts, "failed_tests": failed_tests}
    if done.timed_out:
        so_far, running = stopped_in(done.stdout)
        figures.update(so_far=so_far, running=running)
        before = ", ".join(f"{v} {k}" for k, v in so_far.items()) or "none"
        why = _ended(done) + (f", in {running}" if running else "")
        return Outcome("fail", why, figures, f"{before} before its limit")
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


# ---- knobs -------------------------------------------------------------------------------


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


# ---- the table ---------------------------------------------------------------------------

STEPS: tuple[Step, ...] = (
    Step(
        "speed",
        "the default single-GPU ladder, whole, first: wall time and probes against the GPU "
        "twin's prediction, with tuneup monitor beside it",
        {"gpu": 420, "cpu": 60},
        # A ladder past 10 minutes is measured to its end (detached.sh spans two device
        # calls): the 10-minute target is judged from its record, not by cutting it there.
        {"gpu": 1200, "cpu": 240},
        speed_command,
        speed_parse,
        speed_prepare,
        greedy=True,
        monitor=True,
    ),
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
        "honesty",
        "probe worker FULL samples/s vs an independent bare loop, interleaved",
        {"gpu": 240, "cpu": 15},
        {"gpu": 420, "cpu": 60},
        honesty_command,
        honesty_parse,
    ),
    Step(
        "ladder",
        "a short real tuneup probe ladder under --budget, GPU telemetry joined",
        {"gpu": 300, "cpu": 25},
        {"gpu": 540, "cpu": 90},
        ladder_command,
        ladder_parse,
        ladder_prepare,
    ),
)
STEP_NAMES = (*(s.name for s in STEPS), "orphans")
# The short ladder adds little after a whole one: only `--steps ladder` runs it.
NOT_BY_DEFAULT = ("ladder",)
DEFAULT_STEPS = tuple(n for n in STEP_NAMES[:-1] if n not in NOT_BY_DEFAULT)
