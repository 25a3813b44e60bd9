"""A verify of a finished session: its targets' real runs, journaled, judged and kept.

For each target it can run (tuneup train always; the tutorial's train.py when given its
path), the baseline and the recommendation run in A B B A order on the real run's data
(verify/data.py), each shaped by verify/plan.py and started by verify/runs.py. Each run
is journaled in `verify.jsonl` as it ends (one line, flushed and synced, as the probe
journal's); at the end, or at a stop, each target's verdict (verify/verdict.py) goes
into summary.json's `verify` block, which the CLI, `export --format md` and the app read
back through the Summary parser. The folder is held (its lock) for the whole verify.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuneup.export.tutorial import SHORT_VAL_SAMPLES
from tuneup.paths import writing
from tuneup.probe.durations import duration_text
from tuneup.probe.stats import median
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.results.verified import (
    BASELINE,
    VERIFY_FOLDER,
    VERIFY_JOURNAL,
    TargetCheck,
    Verified,
    VerifyRun,
)
from tuneup.tuning.session.lock import ResultsLock
from tuneup.verify.data import RunData, run_data
from tuneup.verify.lines import read_figures
from tuneup.verify.plan import (
    fit_seconds,
    run_estimate_s,
    run_order,
    run_values,
    shape_run,
)
from tuneup.verify.request import VerifyRequest
from tuneup.verify.runs import (
    TUTORIAL,
    Ended,
    Launch,
    run_launch,
    tuneup_launch,
    tutorial_launch,
)
from tuneup.verify.targets import VerifyTarget, chosen_targets
from tuneup.verify.verdict import RealRun, check_target, steady_rates

STARTUP_S = {"cpu": 5.0, "cuda": 60.0}  # a run's start to its first step, for the plan
# Making a synthetic box, bytes a second: 40.5 GiB took about 120 s on the H200 node
# (bench/results/gpu-h200-2026-11-28), 0.6 GiB 1.5 s on a 2-core CPU; the slower, rounded.
SYNTH_BYTES_PER_S = 300e6

# Runs one launch: (launch, log, its limit given its first epoch, stop) -> how it ended.
RunLaunch = Callable[
    [Launch, Path, Callable[[tuple[float, float] | None], float], Callable[[], bool]], Ended
]


def verify_session(
    request: VerifyRequest,
    *,
    say: Callable[[str], None] = lambda _line: None,
    stop: Callable[[], str | None] = lambda: None,
    run: RunLaunch = run_launch,
    clock: Callable[[], float] = time.monotonic,
) -> Verified:
    """Run the session's targets for real and keep what they showed (the module docstring).

    Args:
        say: hears a line as each run starts and ends.
        stop: why to stop now (a Ctrl-C, the app's screen closing); None: go on.
        run: starts and bounds one run (verify/runs.run_launch).

    Raises:
        UsageError: not a finished session, a sim session, another tuneup holds the
            folder, no train.py where --train-py says, or data that cannot be had.
    """
    results = ResultsDir(Path(request.folder))
    session = results.session()
    summary = results.summary()
    targets, skipped = chosen_targets(request, session, summary)
    lock = ResultsLock(results.path)
    lock.acquire()
    try:
        return _verify(request, results, session, summary, targets, skipped, say, stop, run, clock)
    finally:
        lock.release()


def verify_folder(
    folder: Path, say: Callable[[str], None], stop: Callable[[], str | None]
) -> Verified:
    """The app's verify of `folder`: `tuneup verify DIR` with its defaults."""
    request = VerifyRequest(folder=Path(folder))
    request = replace(request, command=request.reproduce())
    return verify_session(request, say=say, stop=stop)


@dataclass
class _Runs:
    """The runs of one verify, as they go: what every run shares, and the stop."""

    request: VerifyRequest
    summary: Summary
    data: RunData
    seconds: float  # each run's measured seconds
    startup: float
    folder: Path
    run: RunLaunch
    stop: Callable[[], str | None]
    say: Callable[[str], None]
    total: int = 0
    number: int = 0

    def one(self, target: VerifyTarget, config: str, round_: int) -> VerifyRun:
        """Run one configuration of one target; what it showed, as its journal line."""
        self.number += 1
        answer = target.answer
        values = dict(self.summary.baseline.values if config == BASELINE else answer.values)
        rate = (target.claim.base_sps if config == BASELINE else target.claim.rec_sps) or (
            self.summary.baseline.full_sps or 1.0
        )
        shape = shape_run(
            batch=int(values.get("global_batch_size") or 1),
            rate=rate,
            seconds=self.seconds,
            real_samples=int(values.get("Nsamples") or 0),
            real_val_samples=_real_val(values),
            startup_s=self.startup,
        )
        name = f"{self.number:02d}-{answer.target}-{config}"
        launch = _launch(
            answer.target,
            run_values(values, shape, self.data.values),
            self.folder,
            name,
            self.request.train_py,
        )
        where = f"[{self.number}/{self.total}] {answer.label or answer.target}, {config}"
        self.say(f"{where} (round {round_ + 1}): {launch.command}")
        log = self.folder / f"{name}.log"
        ended = self.run(launch, log, shape.limit_s, lambda: self.stop() is not None)
        figures = read_figures(_lines(log))
        done = VerifyRun(
            run=self.number,
            target=answer.target,
            config=config,
            round=round_,
            status=ended.status,
            reason=ended.reason,
            epochs=figures.epochs,
            val_s=figures.val_s,
            samples=shape.samples,
            val_samples=shape.val_samples,
            box=self.data.box,
            wall_s=ended.wall_s,
            command=launch.command,
            log=str(log),
        )
        self.say(f"{where}: {_run_words(done)}")
        return done


def _verify(
    request: VerifyRequest,
    results: ResultsDir,
    session: Mapping[str, Any],
    summary: Summary,
    targets: list[VerifyTarget],
    skipped: list[tuple[str, str]],
    say: Callable[[str], None],
    stop: Callable[[], str | None],
    run: RunLaunch,
    clock: Callable[[], float],
) -> Verified:
    began, when = clock(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
    values = dict(summary.recommendation.values)
    startup = STARTUP_S["cpu" if str(values.get("device") or "cuda") == "cpu" else "cuda"]
    order = _pair_major(targets, run_order(request.rounds))
    rounds = max(1, request.rounds)
    total = len(order)
    per_run = request.seconds / rounds

    def before_making(need: int) -> None:
        # refused before minutes of making, where even the runs' least would not fit after
        fit_seconds(per_run, total, startup, request.budget_s, spent_s=need / SYNTH_BYTES_PER_S)

    data = run_data(session, values, request.box, say, before_making=before_making)
    making_s = clock() - began
    seconds = fit_seconds(per_run, total, startup, request.budget_s, spent_s=making_s)
    runs = _Runs(
        request,
        summary,
        data,
        seconds,
        startup,
        results.path / VERIFY_FOLDER,
        run,
        stop,
        say,
        total=total,
    )
    journal = results.path / VERIFY_JOURNAL
    with writing(journal, "the verify journal"):
        runs.folder.mkdir(exist_ok=True)
        journal.write_text("", encoding="utf-8")
    made = f" (the data took {duration_text(making_s)})" if making_s >= 1 else ""
    say(f"verify: {total} runs on {data.words}{made}, {seconds:.3g} s each after warm-up")
    stopped: str | None = None
    for target, config, round_ in order:
        stopped = stop() or _out_of_budget(request.budget_s, clock() - began, seconds, startup)
        if stopped is not None:
            break
        done = runs.one(target, config, round_)
        _append(journal, done)
        target.runs.append(done)
        if done.config != BASELINE:
            target.command = done.command
        if done.status == "stopped":
            stopped = stop() or "stopped"
            break
    verified = Verified(
        targets=tuple(_check(target, values, data, stopped) for target in targets),
        skipped=tuple(skipped),
        box=data.box,
        probe_box=data.probe_box,
        data=data.words,
        seconds=seconds * rounds,
        rounds=rounds,
        command=request.command,
        stopped=stopped,
        when=when,
    )
    _keep(results, verified)
    return verified


def _out_of_budget(
    budget_s: float | None, spent: float, seconds: float, startup: float
) -> str | None:
    """Why the next run may not start: it would end past the --budget; None where it fits."""
    if budget_s is None or spent + run_estimate_s(seconds, startup) <= budget_s:
        return None
    return f"the --budget of {duration_text(budget_s)} ran out"


def _launch(
    target: str,
    values: dict[str, Any],
    folder: Path,
    name: str,
    train_py: Path | None,
) -> Launch:
    if target == TUTORIAL and train_py is not None:
        values["expdir"] = str(folder / "tutorial-logs")  # its out.log and TensorBoard
        return tutorial_launch(values, folder / f"{name}.yaml", train_py.resolve(), name)
    return tuneup_launch(values, folder / f"{name}.yaml")


def _real_val(values: Mapping[str, Any]) -> int:
    """A real run's validation samples: the values', or the tutorial's `short` block's
    where the probes validated nothing (export/tutorial.for_a_real_run)."""
    val = int(values.get("Nsamples_val") or 0)
    return val if val > 0 else SHORT_VAL_SAMPLES


def _run_words(done: VerifyRun) -> str:
    rates = steady_rates(done)
    figure = (
        f"{median(rates):,.1f} samples/s over {len(rates)} steady epoch(s)"
        if rates
        else "no steady epoch"
    )
    ended = f", {done.status}: {done.reason}" if done.status != "ok" else ""
    return f"{figure} in {done.wall_s:.1f} s{ended}"


def _pair_major(
    targets: list[VerifyTarget], order: tuple[tuple[str, int], ...]
) -> list[tuple[VerifyTarget, str, int]]:
    """Each round's pair for every target before the next round's: a verify ended early
    (a budget, a stop) leaves each target a pair, not one target every run."""
    pairs = [order[i : i + 2] for i in range(0, len(order), 2)]
    return [(t, config, round_) for pair in pairs for t in targets for config, round_ in pair]


def _check(
    target: VerifyTarget, values: Mapping[str, Any], data: RunData, stopped: str | None
) -> TargetCheck:
    real = RealRun(
        epochs=int(values.get("num_epochs") or 1),
        samples=int(values.get("Nsamples") or 0),
        val_samples=_real_val(values),
        box=data.box,
        probe_box=data.probe_box,
    )
    answer = target.answer
    checked = check_target(
        answer.target, answer.label, target.claim, target.runs, real, target.command
    )
    if not target.runs and stopped:
        return replace(checked, reason=f"not run: {stopped} before its runs")
    return checked


def _lines(log: Path) -> list[str]:
    try:
        return log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _append(journal: Path, done: VerifyRun) -> None:
    """One line for a finished run, flushed and synced before the next starts."""
    line = json.dumps(_finite(done.to_dict()), allow_nan=False) + "\n"
    with writing(journal, "the verify journal"), journal.open("a", encoding="utf-8") as out:
        out.write(line)
        out.flush()
        os.fsync(out.fileno())


def _keep(results: ResultsDir, verified: Verified) -> None:
    """The summary with its `verify` block (replacing an earlier verify's), written whole."""
    document = dict(results.summary().document)
    document["verify"] = verified.to_dict()
    results.write_summary(document)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
