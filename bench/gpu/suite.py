"""tuneup's GPU validation suite: the claim a window exists to test first, in one command.

Before anything runs, the GPU twin (bench/gpu_twin.py, the recorded GPU replayed
on a CPU) predicts the whole default ladder of the preset tuneup picks here
(h200 on an H200): its answer is kept in prediction.json, with the command, the
time and the commit (suite_predict.py). Then the steps, in rank order (each in
its own process, with a time limit carved from what is left of --budget; a step
that cannot start in time is skipped and says so):

  1. speed      the default single-GPU ladder, whole (`tuneup probe` with no --budget,
                timed by bench/ladder_speed.py), with `tuneup monitor --json` beside it
                for exactly its duration (monitor.jsonl.gz); its record sets the wall
                time and the probes beside the prediction, and says whether it beat
                the issue's 10 minutes. It may take all the time the run has left.
  2. doctor     tuneup doctor --json (it times the picked preset's baseline)
  3. gpu-tests  pytest -m gpu
  4. knobs      each knob's effect on step time and MFU at batch 64, one warm process
  5. honesty    the probe worker's FULL samples/s against an independent bare loop
  6. ladder     a short `tuneup probe --budget` ladder on what is left, GPU telemetry
                joined: only with --steps ladder (after a whole ladder it adds little)
  7. orphans    no worker or DataLoader child the suite started is left running
                (always runs last: it is the suite's own clean-up)

Before the first step it prints the plan: each step's GPU time (the whole ladder's
from the prediction, the others' from the recorded run, suite_plan.py), which fit
the budget in rank order, and the command for a later run with the rest. The dry
run prints the same plan, for the budget given.

Each step's record is appended to journal.jsonl as it finishes, and
results.json and summary.md are rewritten then too, so a killed run keeps
what it measured. Running again into the same folder (the default folder is
per GPU and date) updates the steps it runs and keeps the others, so the
suite can be run in pieces, one short device window each. The folder is an
evidence folder the GPU twin reads (bench/gpu/EVIDENCE.md: knobs.json, and the
whole ladder's tuneup session in speed/<run>/):

    bash bench/gpu/run.sh                                  # 9 min: the whole ladder, then more
    bash bench/gpu/run.sh --steps gpu-tests,knobs,honesty  # a later window: the rest
    bash bench/gpu/run.sh --cpu --out /tmp/dry             # the CPU dry run (a few minutes)

Exit status: 0 when no step of this run failed, 1 when one did, 2 for a bad
argument, 128+N when stopped by signal N (after writing what it has).
"""

from __future__ import annotations

import argparse
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

from suite_common import git_info, last_json_line, read_json, slug, write_json
from suite_monitor import TRACE, Monitor, monitor_command
from suite_plan import EVIDENCE, LADDER_JOURNALS, gpu_estimates, plan, plan_lines, read_figures
from suite_predict import (
    PREDICTED_PROBES,
    brief,
    evidence_gpu,
    picked_preset,
    predict,
    predicted,
    twin_command,
)
from suite_procs import (
    MARKER,
    Stopped,
    kill_all,
    marked_processes,
    on_signal,
    other_workers,
    run_command,
)
from suite_report import render
from suite_steps import DEFAULT_STEPS, NOT_BY_DEFAULT, STEP_NAMES, STEPS
from suite_types import HERE, ROOT, Context, Outcome, Step

from tuneup.preset.autopick import gpu_inventory
from tuneup.probe.durations import parse_duration

RESERVE_S = 8.0  # kept back for the orphans step and the final writes
ORPHAN_WAIT_S = 5.0  # a finished step's children may take a moment to exit


def shown(argv: list[str]) -> str:
    """A command as a user would type it from the repository root (paths in it made relative)."""
    parts = []
    for arg in argv:
        path = Path(arg)
        if path.is_absolute() and path.is_relative_to(ROOT):
            arg = str(path.relative_to(ROOT))
        parts.append(arg)
    return shlex.join(parts)


# ---- the run -----------------------------------------------------------------------------


class Suite:
    """One invocation: runs the chosen steps and keeps results.json current.

    `began`: when the run started (its budget counts from there); `prediction`: the GPU
    twin's prediction.json made for this run, which prices the whole ladder in the plan.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        env_info: dict[str, Any],
        out: Path,
        began: float,
        prediction: dict[str, Any] | None = None,
    ) -> None:
        self.args = args
        self.mode = "cpu" if args.cpu else "gpu"
        self.out = out
        self.env_info = env_info
        self.began = began
        self.run_id = uuid.uuid4().hex[:12]
        self.ctx = Context(mode=self.mode, out=out)
        figures = read_figures(args.evidence)
        self.gpu_estimates = gpu_estimates(figures, predicted(prediction))
        ranked = [name for name in STEP_NAMES if name in args.steps]
        floors = {s.name: s.estimate_s["gpu"] for s in STEPS if s.greedy}
        self.plan = plan(ranked, args.deadline_s, self.gpu_estimates, RESERVE_S, floors)
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
                {
                    "step": p.name,
                    "gpu_s": round(p.seconds),
                    "fits": p.fits,
                    "cut_to_s": round(p.taken) if p.cut else None,
                    "from": p.source,
                }
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
                    "why": "not selected (--steps)"
                    + (
                        "; not a default step: --steps ladder runs it"
                        if name in NOT_BY_DEFAULT
                        else ""
                    ),
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
            "git": git_info(ROOT),
            "prediction": brief(read_json(self.out / "prediction.json")),
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
        """What the step needs to start: on a GPU what the recorded run says it takes (a greedy
        step: no more than its floor, estimate_s); the dry run keeps its own figures."""
        if self.mode == "gpu" and step.name in self.gpu_estimates:
            seconds = self.gpu_estimates[step.name][0]
            return min(seconds, step.estimate_s["gpu"]) if step.greedy else seconds
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
        room = left if step.greedy else max(need, left - self.kept_for_later(step))
        limit = min(step.max_s[self.mode], room)
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
        monitor = None
        if step.monitor:  # beside the step's command for exactly its duration
            watch_env = {**env, MARKER: f"{self.run_id}:{step.name}-monitor"}
            monitor = Monitor(monitor_command(self.ctx), watch_env, ROOT, logs)
        try:
            done, stopped = run_command(argv, env, limit, logs / step.name)
        finally:
            watched = monitor.stop(self.out / TRACE) if monitor is not None else None
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
        if monitor is not None and watched is not None:
            extra["monitor"] = {"command": shown(monitor.command), **watched}
            print(f"   monitor: {watched['status']}: {watched['why']}", file=sys.stderr)
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
        default=",".join(DEFAULT_STEPS),
        help=f"comma-separated, from: {', '.join(STEP_NAMES)}; they run in that order "
        f"(default: {','.join(DEFAULT_STEPS)}; orphans always runs)",
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
        help="the recorded GPU run the twin replays and the plan's estimates come from "
        "(default: the first H200's)",
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


def make_prediction(
    args: argparse.Namespace, env_info: dict[str, Any], out: Path
) -> dict[str, Any]:
    """The GPU twin's prediction of the whole ladder the speed step is about to run, written
    to prediction.json before anything runs (its failure is written down instead)."""
    mode = "cpu" if args.cpu else "gpu"
    inventory = gpu_inventory() if mode == "gpu" else []  # as `tuneup probe` picks its preset
    pick = picked_preset(mode, env_info, inventory, evidence_gpu(args.evidence))
    journals = LADDER_JOURNALS if args.evidence == EVIDENCE else ()
    argv = twin_command(
        sys.executable, args.evidence, pick.name, journals, keep=out / PREDICTED_PROBES
    )
    print(f"suite: first the GPU twin's prediction: {shown(argv)}", file=sys.stderr, flush=True)
    document = predict(argv, shown(argv), pick, git_info(ROOT))
    write_json(out / "prediction.json", document)
    figures = predicted(document)
    if document["error"] or "wall_s" not in figures:
        said = f"no prediction ({document['error'] or 'no wall_s in it'})"
    else:
        low, high = figures.get("wall_s_low"), figures.get("wall_s_high")
        between = f" ({low:.0f}-{high:.0f}s)" if low is not None and high is not None else ""
        probes = f", {figures['probes']:.0f} probes" if "probes" in figures else ""
        said = f"the whole {pick.name} ladder in ~{figures['wall_s']:.0f}s{between}{probes}"
    print(f"suite: prediction.json: {said}", file=sys.stderr, flush=True)
    return document


def main(argv: list[str] | None = None) -> int:
    began = time.monotonic()
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
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
    print(f"suite: results in {out}", file=sys.stderr, flush=True)
    prediction = None
    if "speed" in args.steps:  # written down before the ladder it predicts runs
        try:
            prediction = make_prediction(args, env_info, out)
        except Stopped as exc:
            return 128 + exc.signum
    suite = Suite(args, env_info, out, began, prediction)
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
