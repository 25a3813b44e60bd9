"""tuneup's GPU validation suite: the most important truths first, in one command.

Steps, in rank order (each in its own process, with a time limit carved
from what is left of --budget; a step that cannot finish in time is
skipped and says so):

  1. doctor     tuneup doctor --json (it times the picked preset's baseline)
  2. honesty    the probe worker's FULL samples/s against an independent bare loop
  3. gpu-tests  pytest -m gpu
  4. knobs      each knob's effect on step time and MFU at batch 64, one warm process
  5. ladder     the default `tuneup probe` ladder under --budget (what is left),
                GPU telemetry joined
  6. speed      the default single-GPU ladder, whole (the preset tuneup picks):
                wall time, probes, where the time went (bench/ladder_speed.py);
                the issue's target is under 10 minutes
  7. orphans    no worker or DataLoader child the suite started is left running
                (always runs last: it is the suite's own clean-up)

Before the first step it prints the plan: each step's GPU time as a recorded
run says (suite_plan.py: the first H200 run's), which fit the budget in rank
order, and the command for a later run with the rest. The dry run prints the
same plan, for the budget given.

Each step's record is appended to journal.jsonl as it finishes, and
results.json and summary.md are rewritten then too, so a killed run keeps
what it measured. Running again into the same folder (the default folder is
per GPU and date) updates the steps it runs and keeps the others, so the
suite can be run in pieces, one short device window each:

    bash bench/gpu/run.sh                                  # 9 minutes: what fits, in rank order
    bash bench/gpu/run.sh --steps ladder,speed --budget 9m # a later window: the rest
    bash bench/gpu/run.sh --cpu --out /tmp/dry             # the CPU dry run (< 2 minutes)

Exit status: 0 when no step of this run failed, 1 when one did, 2 for a bad
argument, 128+N when stopped by signal N (after writing what it has).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from suite_common import last_json_line, read_json, slug, write_json
from suite_plan import EVIDENCE, gpu_estimates, plan, plan_lines, read_figures
from suite_report import render
from suite_steps import HERE, ROOT, STEP_NAMES, STEPS, Context, Finished, Outcome, Step

from tuneup.probe.estimate import parse_duration

MARKER = "TUNEUP_GPU_SUITE"  # set in every step's environment: how our orphans are found
RESERVE_S = 8.0  # kept back for the orphans step and the final writes
ORPHAN_WAIT_S = 5.0  # a finished step's children may take a moment to exit


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: stop the running step, write what we have."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, _frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stopped(signum)


def shown(argv: list[str]) -> str:
    """A command as a user would type it from the repository root (paths in it made relative)."""
    parts = []
    for arg in argv:
        path = Path(arg)
        if path.is_absolute() and path.is_relative_to(ROOT):
            arg = str(path.relative_to(ROOT))
        parts.append(arg)
    return shlex.join(parts)


# ---- processes ---------------------------------------------------------------------------


def marked_processes(run_id: str) -> list[dict[str, Any]]:
    """Live processes whose environment carries this run's marker (the suite excluded)."""
    found = []
    me = os.getpid()
    needle = f"{MARKER}={run_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            tag = next((v for v in environ if v.startswith(needle)), None)
            if tag is None:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z":
            continue  # a zombie holds nothing; its parent will reap it
        tag = tag.decode(errors="replace").partition("=")[2]
        found.append({"pid": int(entry.name), "cmdline": cmdline.strip(), "step": tag})
    return found


def kill_all(processes: list[dict[str, Any]]) -> None:
    for proc in processes:
        with contextlib.suppress(OSError):
            os.kill(proc["pid"], signal.SIGKILL)


def run_command(
    argv: list[str], env: dict[str, str], limit_s: float, log_base: Path
) -> tuple[Finished, Stopped | None]:
    """Run `argv` in its own session with a time limit; stop the whole group past it."""
    began = time.monotonic()
    out_path, err_path = log_base.with_suffix(".out"), log_base.with_suffix(".err")
    stopped = None
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, env=env, cwd=ROOT, start_new_session=True
        )
        timed_out = False
        try:
            try:
                proc.wait(timeout=max(1.0, limit_s))
            except subprocess.TimeoutExpired:
                timed_out = True
        except Stopped as exc:
            stopped = exc
        if proc.poll() is None:
            _stop_group(proc)
    finished = Finished(
        rc=None if timed_out or stopped else proc.returncode,
        stdout=out_path.read_text(errors="replace"),
        stderr=err_path.read_text(errors="replace"),
        seconds=time.monotonic() - began,
        timed_out=timed_out,
    )
    return finished, stopped


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ---- the run -----------------------------------------------------------------------------


class Suite:
    """One invocation: runs the chosen steps and keeps results.json current."""

    def __init__(self, args: argparse.Namespace, env_info: dict[str, Any], out: Path) -> None:
        self.args = args
        self.mode = "cpu" if args.cpu else "gpu"
        self.out = out
        self.env_info = env_info
        self.began = time.monotonic()
        self.run_id = uuid.uuid4().hex[:12]
        self.ctx = Context(mode=self.mode, out=out)
        figures = read_figures(args.evidence)
        self.gpu_estimates = gpu_estimates(figures)
        ranked = [name for name in STEP_NAMES if name in args.steps]
        self.plan = plan(ranked, args.deadline_s, self.gpu_estimates, RESERVE_S)
        self.plan_lines = plan_lines(self.plan, args.deadline_s, str(args.evidence), RESERVE_S)
        previous = read_json(out / "results.json") or {}
        if previous.get("mode") not in (None, self.mode):
            previous = {}  # a GPU folder is not merged with a dry run's, nor the other way
        self.records: dict[str, dict[str, Any]] = {
            s["name"]: s for s in previous.get("steps", []) if s.get("name") in STEP_NAMES
        }
        self.runs: list[dict[str, Any]] = previous.get("runs", [])
        self.run: dict[str, Any] = {
            "command": os.environ.get("GPU_SUITE_COMMAND") or shown([sys.executable, *sys.argv]),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "deadline_s": args.deadline_s,
            "steps": args.steps,
            "plan": [
                {"step": p.name, "gpu_s": round(p.seconds), "fits": p.fits, "from": p.source}
                for p in self.plan
            ],
            "seconds": 0.0,
            "run_id": self.run_id,
        }
        self.runs.append(self.run)
        self.failed = False

    def left(self) -> float:
        return self.args.deadline_s - (time.monotonic() - self.began)

    def record(self, name: str, command: str, outcome: Outcome, **extra: Any) -> None:
        rec = {
            "name": name,
            "rank": STEP_NAMES.index(name) + 1,
            "command": command,
            "status": outcome.status,
            "why": outcome.why,
            "key": outcome.key,
            "figures": outcome.figures,
            "run": len(self.runs),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **extra,
        }
        self.records[name] = rec
        if outcome.status == "fail":
            self.failed = True
        with (self.out / "journal.jsonl").open("a") as journal:
            journal.write(json.dumps(rec, default=str) + "\n")
        self.write()
        extra_s = f" ({rec.get('seconds', 0):.1f}s)" if rec.get("seconds") is not None else ""
        print(
            f"[{rec['rank']}/{len(STEP_NAMES)}] {name}: {outcome.status}{extra_s} "
            f"{outcome.key} {('- ' + outcome.why) if outcome.why else ''}",
            file=sys.stderr,
            flush=True,
        )

    def write(self) -> None:
        self.run["seconds"] = time.monotonic() - self.began
        steps = []
        for name in STEP_NAMES:
            steps.append(
                self.records.get(name)
                or {
                    "name": name,
                    "rank": STEP_NAMES.index(name) + 1,
                    "command": "",
                    "status": "skipped",
                    "why": "not selected (--steps)",
                    "key": "",
                    "figures": {},
                    "rc": None,
                    "seconds": None,
                }
            )
        results = {
            "suite": "tuneup GPU validation",
            "mode": self.mode,
            "out": str(self.out),
            "env": self.env_info,
            "git": git_info(),
            "runs": self.runs,
            "seconds_total": sum(r.get("seconds", 0.0) for r in self.runs),
            "steps": steps,
        }
        write_json(self.out / "results.json", results)
        text = render(results)
        tmp = self.out / ".summary.md.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.out / "summary.md")

    def need(self, step: Step) -> float:
        """What the step needs to start: on a GPU what the recorded run says it takes; the
        dry run keeps its own figures."""
        if self.mode == "gpu" and step.name in self.gpu_estimates:
            return self.gpu_estimates[step.name][0]
        return step.estimate_s[self.mode]

    def kept_for_later(self, step: Step) -> float:
        """What the steps after `step` that the plan fits need: a step whose limit is the
        time left (the ladder's --budget) leaves them theirs."""
        fits = {p.name for p in self.plan if p.fits}
        after = STEPS[[s.name for s in STEPS].index(step.name) + 1 :]
        chosen = [s for s in after if s.name in self.args.steps]
        if self.mode == "gpu":
            chosen = [s for s in chosen if s.name in fits]
        return sum(self.need(s) for s in chosen)

    def run_step(self, step: Step) -> None:
        need = self.need(step)
        left = self.left() - RESERVE_S
        self.ctx.limit_s = None
        argv = step.command(self.ctx)
        if left < need:
            why = f"skipped: deadline (needs ~{need:.0f}s, {max(0.0, left):.0f}s left)"
            self.record(step.name, shown(argv), Outcome("skipped", why), rc=None, seconds=None)
            return
        limit = min(step.max_s[self.mode], max(need, left - self.kept_for_later(step)))
        self.ctx.limit_s = limit
        argv = step.command(self.ctx)
        command = shown(argv)
        print(f"-- {step.name}: {command} (limit {limit:.0f}s)", file=sys.stderr, flush=True)
        began = time.monotonic()
        if step.prepare is not None:
            reason = step.prepare(self.ctx)
            if reason:
                seconds = time.monotonic() - began
                self.record(step.name, command, Outcome("fail", reason), rc=None, seconds=seconds)
                return
        env = dict(os.environ)
        env[MARKER] = f"{self.run_id}:{step.name}"
        env["PYTHONUNBUFFERED"] = "1"
        logs = self.out / "logs"
        logs.mkdir(exist_ok=True)
        done, stopped = run_command(argv, env, limit, logs / step.name)
        # What the step left behind after being stopped is ours to end, and is said so.
        leftovers = marked_processes(self.run_id) if (done.timed_out or stopped) else []
        kill_all(leftovers)
        try:
            outcome = step.parse(self.ctx, done)
        except Exception as exc:  # a parser bug must not lose the step's record
            outcome = Outcome("fail", f"could not read the step's output: {exc!r}")
        if stopped:
            outcome = Outcome("fail", f"stopped by {stopped}", outcome.figures, outcome.key)
        extra: dict[str, Any] = {"rc": done.rc, "seconds": done.seconds}
        extra["logs"] = [str(logs / f"{step.name}.out"), str(logs / f"{step.name}.err")]
        if leftovers:
            extra["killed_after_stop"] = leftovers
        self.record(step.name, command, outcome, **extra)
        if stopped:
            raise stopped

    def orphans(self) -> None:
        """Nothing the suite started may outlive it: find, report and kill what did."""
        began = time.monotonic()
        deadline = began + ORPHAN_WAIT_S
        found = marked_processes(self.run_id)
        while found and time.monotonic() < deadline:
            time.sleep(0.25)
            found = marked_processes(self.run_id)
        kill_all(found)
        command = f"(in the driver) scan /proc/*/environ for {MARKER}={self.run_id}"
        others = other_workers(self.run_id)
        figures = {"orphans": found, "unmarked_tuneup_workers": others}
        if found:
            listed = "; ".join(f"{p['pid']} {p['cmdline'][:80]} [{p['step']}]" for p in found)
            outcome = Outcome(
                "fail", f"left running, now killed: {listed}", figures, f"{len(found)} found"
            )
        else:
            why = "no worker or DataLoader child of the suite left running"
            if others:
                why += f" ({len(others)} tuneup worker(s) of other programs seen, left alone)"
            outcome = Outcome("pass", why, figures, "none")
        self.record("orphans", command, outcome, rc=None, seconds=time.monotonic() - began)


def other_workers(run_id: str) -> list[dict[str, Any]]:
    """tuneup workers on this machine that the suite did not start (reported, never killed)."""
    ours = {p["pid"] for p in marked_processes(run_id)}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "tuneup.worker" in cmdline:
            found.append({"pid": int(entry.name), "cmdline": cmdline.strip()})
    return found


_GIT: dict[str, Any] = {}


def git_info() -> dict[str, Any]:
    if not _GIT:
        try:
            head = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            dirty = subprocess.run(
                ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            _GIT.update(commit=head or None, dirty=bool(dirty))
            _GIT["describe"] = f"{head}{' (with uncommitted changes)' if dirty else ''}" or "-"
        except (OSError, subprocess.SubprocessError):
            _GIT.update(commit=None, dirty=None, describe="not a git checkout")
    return _GIT


def environment(cpu: bool) -> dict[str, Any]:
    """Host, GPU, driver, CUDA and torch versions, from a child process (CUDA stays out of here)."""
    env = dict(os.environ)
    if cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        done = subprocess.run(
            [sys.executable, str(HERE / "envinfo.py")],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"error": "envinfo.py did not answer within 120s"}
    info = last_json_line(done.stdout)
    if info is None:
        return {"error": f"envinfo.py exited {done.returncode}: {done.stderr.strip()[-300:]}"}
    return info


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU with a tiny model")
    parser.add_argument(
        "--steps",
        default=",".join(STEP_NAMES[:-1]),
        help=f"comma-separated, from: {', '.join(STEP_NAMES)} (default: all; orphans always runs)",
    )
    parser.add_argument(
        "--budget",
        default="9m",
        help="the run's time (9m, 540s, 1h): steps in rank order while they fit, the rest "
        "named for a later run (default 9m: one device window)",
    )
    parser.add_argument("--deadline-s", type=float, help="the budget in seconds (overrides it)")
    parser.add_argument(
        "--evidence",
        type=Path,
        default=EVIDENCE,
        help="the recorded GPU run the plan's estimates come from (default: the first H200's)",
    )
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/gpu-...)")
    args = parser.parse_args(argv)
    if args.deadline_s is None:
        try:
            args.deadline_s = parse_duration(args.budget)
        except ValueError as exc:
            parser.error(f"--budget: {exc}")
    chosen = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in STEP_NAMES]
    if unknown:
        parser.error(f"unknown step {unknown[0]!r}: choose from {', '.join(STEP_NAMES)}")
    if args.deadline_s <= 0:
        parser.error("--deadline-s must be positive")
    args.steps = chosen
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the dry run stays off any GPU there is
    try:
        env_info = environment(args.cpu)
    except Stopped as exc:
        return 128 + exc.signum
    if not args.cpu and not env_info.get("cuda_available"):
        print(
            "suite: no CUDA device visible to torch; every GPU step will fail "
            "(use --cpu for the dry run)",
            file=sys.stderr,
        )
    name = "cpu" if args.cpu else slug(env_info.get("gpu") or "no-gpu")
    out = args.out or ROOT / "bench" / "results" / f"gpu-{name}-{time.strftime('%Y-%m-%d')}"
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    suite = Suite(args, env_info, out)
    print(f"suite: results in {out}", file=sys.stderr, flush=True)
    for line in suite.plan_lines:
        print(f"suite: {line}", file=sys.stderr, flush=True)
    stopped: Stopped | None = None
    try:
        for step in STEPS:
            if step.name in args.steps:
                suite.run_step(step)
    except Stopped as exc:
        stopped = exc
        for step in STEPS:
            if step.name in args.steps and suite.records.get(step.name, {}).get("run") != len(
                suite.runs
            ):
                suite.record(
                    step.name,
                    "",
                    Outcome("skipped", f"skipped: the suite was stopped by {exc}"),
                    rc=None,
                    seconds=None,
                )
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    suite.orphans()
    suite.write()
    print(out / "summary.md")
    if stopped is not None:
        return 128 + stopped.signum
    return 1 if suite.failed else 0


if __name__ == "__main__":
    sys.exit(main())
