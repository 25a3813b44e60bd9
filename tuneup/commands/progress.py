"""How `tuneup probe` shows its work: live bars on a terminal, plain lines otherwise.

Progress goes to stderr; the final table and recommendation go to stdout
(with `--json`, stdout holds only the JSON document).
"""

from __future__ import annotations

import sys
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from tuneup.costs.estimate import time_left_text
from tuneup.probe.describe import (
    baseline_reference,
    fair_baseline,
    ranks_tag,
    result_line,
    session_ranks,
    shown_phase,
    sps_text,
    status_text,
    variant_text,
    versus_baseline,
)
from tuneup.probe.events import Event, StartEvent, TrialEvent, WarmupEvent
from tuneup.probe.types import ProbeResult
from tuneup.tuning.results.stage_rows import stage_rows
from tuneup.tuning.search.search_records import SearchOutcome

BAR_WIDTH = 20  # cells of a progress bar


def _count(n: Any, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def launch_line(info: dict[str, Any]) -> str | None:
    """One line on how probes run across GPUs, from session info's `launch` and `job`.

    `launch` is {"nproc", "nodes", "world_size", "launcher"}; `job` is
    JobEnv.to_dict() (a SLURM job has a job_id). None for a single-process
    session outside SLURM, or when the session carries neither.
    """
    launch, job = info.get("launch"), info.get("job")
    parts = []
    if isinstance(launch, dict):
        nproc, nodes = launch.get("nproc"), launch.get("nodes")
        world = launch.get("world_size")
        if world is None and isinstance(nproc, int) and isinstance(nodes, int):
            world = nproc * nodes
        if isinstance(world, int) and world > 1:
            text = f"{world} ranks"
            if launch.get("launcher"):
                text += f" via {launch['launcher']}"
            if nproc is not None and nodes is not None:
                text += f" ({nproc} per node x {_count(nodes, 'node')})"
            parts.append(text)
    if isinstance(job, dict) and job.get("job_id"):
        parts.append(f"SLURM job {job['job_id']}")
    if not parts:
        return None
    return "tuneup probe: " + ", in ".join(parts)


def trial_text(event: TrialEvent) -> str:
    """The current probe's bar during a trial; `index` counts from 1, as the app shows it."""
    index = "?" if event.index is None else event.index
    return f"{event.phase} trial {index}: {sps_text(event.samples_per_s)} samples/s"


class PlainReporter:
    """One line per probe, for logs and pipes (no terminal control codes)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.baseline: ProbeResult | None = None
        self.ranks = 1
        self.done = 0
        self.total = 0
        self.left = ""  # the ladder's expected time left, as the session last said it
        self.unfair_said = False  # said why a contended baseline gives no "vs baseline"

    def session_start(self, info: dict[str, Any], total: int) -> None:
        self.total = total
        self.ranks = session_ranks(info)
        stages = ", ".join(info["stages"])
        print(
            f"tuneup probe: preset {info['preset']}, trainer {info['trainer']}, "
            f"{info['search']} search over {stages}",
            file=self.stream,
            flush=True,
        )
        launched = launch_line(info)
        if launched is not None:
            print(launched, file=self.stream, flush=True)

    def probe_start(self, stage: str, label: str) -> None:
        pass

    def note(self, line: str) -> None:
        """Something the session did on its own that the user must know (data made again,
        failures measured again)."""
        print(f"tuneup: {line}", file=self.stream, flush=True)

    def total_changed(self, total: int) -> None:
        self.total = total

    def event(self, event: Event) -> None:
        """A worker event (from the runner's reader thread): the one a user must read is
        a compile cache the worker mended before its probe."""
        if isinstance(event, StartEvent) and event.mended:
            self.note(event.mended)

    def time_left(self, seconds: float, basis: str) -> None:
        first = not self.left
        self.left = time_left_text(seconds, basis)
        if first:  # the estimate before any probe; later ones end each probe's line
            print(f"tuneup probe: ladder {self.left}", file=self.stream, flush=True)

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        self.done += 1
        unfair = self._take_baseline(result)
        line = result_line(result, self.baseline, reused, ranks=self.ranks)
        left = f" · ladder: {self.left}" if self.left else ""
        print(f"[{self.done}/~{self.total}] {line}{left}", file=self.stream, flush=True)
        if unfair:
            self.note(unfair)

    def close(self) -> None:
        """Plain lines hold nothing to give back."""

    def _take_baseline(self, result: ProbeResult) -> str:
        """Keep the first fair baseline (`fair_baseline`) for the lines' "vs baseline"; the
        first contended one before it gets a note saying why there is none yet."""
        if self.baseline is not None or result.stage != "baseline" or not result.ok:
            return ""
        if fair_baseline(result):
            self.baseline = result
            return ""
        if self.unfair_said:
            return ""
        self.unfair_said = True
        return (
            "no vs-baseline figures while the baseline runs contended (other processes used "
            "the machine): they would credit the knobs with what those processes did"
        )


class RichReporter(PlainReporter):
    """A bar for the ladder and one for the current probe, with the last result line."""

    def __init__(self) -> None:
        super().__init__()

        self.console = Console(stderr=True)
        # The words give way first (cut with an ellipsis), so the bar and the count stay
        # on an 80-column terminal.
        words = Column(ratio=1, no_wrap=True, overflow="ellipsis")
        self.progress = Progress(
            TextColumn("{task.description}", table_column=words),
            BarColumn(bar_width=BAR_WIDTH),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            expand=True,
        )
        self.ladder = self.progress.add_task("ladder", total=1)
        self.current = self.progress.add_task("probe", total=1, visible=False)

    def session_start(self, info: dict[str, Any], total: int) -> None:
        super().session_start(info, total)
        self.progress.update(self.ladder, total=total)
        self.progress.start()

    def total_changed(self, total: int) -> None:
        super().total_changed(total)
        self.progress.update(self.ladder, total=total)

    def time_left(self, seconds: float, basis: str) -> None:
        self.left = time_left_text(seconds, basis)
        self.progress.update(self.ladder, description=f"ladder ({self.left})")

    def note(self, line: str) -> None:
        self.progress.console.print(f"tuneup: {line}", markup=False, highlight=False)

    def probe_start(self, stage: str, label: str) -> None:
        self.progress.update(
            self.current, description=f"{stage}: {label}", completed=0, total=1, visible=True
        )

    def event(self, event: Event) -> None:
        """Worker events move the current probe's bar (called from the reader thread)."""
        super().event(event)
        if isinstance(event, TrialEvent):
            self.progress.update(self.current, description=trial_text(event))
        elif isinstance(event, WarmupEvent):
            self.progress.update(self.current, description="measuring")

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        self.done += 1
        unfair = self._take_baseline(result)
        self.progress.update(self.ladder, advance=1)
        self.progress.update(self.current, visible=False)
        line = result_line(result, self.baseline, reused, ranks=self.ranks)
        self.console.print(line, highlight=False, markup=False)  # "[from journal]" is text
        if unfair:
            self.note(unfair)

    def close(self) -> None:
        self.progress.stop()


def stage_table(
    outcome: SearchOutcome,
    stream: IO[str] | None = None,
    *,
    width: int | None = None,
    needed: str = "",
) -> None:
    """The ladder, one row per decision: stage, what it decided, on which phase, its paired
    change, pairs and probes; as wide as the terminal (`width`: the console's)."""
    title = "probe ladder" + (f": a gain had to clear {needed}" if needed else "")
    title += " (every probe: --probes)"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("stage", no_wrap=True)
    table.add_column("result", ratio=1)
    for column in ("on", "change", "pairs", "probes"):
        table.add_column(column, justify="left" if column == "on" else "right", no_wrap=True)
    for row in stage_rows(outcome):
        table.add_row(
            row.stage, row.result, row.phase, row.change, row.pairs, str(row.probes or "")
        )
    Console(file=stream or sys.stdout, width=width).print(table)


def probe_table(
    probes: list[ProbeResult], stream: IO[str] | None = None, *, width: int | None = None
) -> None:
    """Every probe: its stage and variant, the phase it reports with its samples/s, vs
    baseline and status; as wide as the terminal. "vs baseline" only against a baseline that ran
    uncontended (`fair_baseline`)."""
    baseline = baseline_reference(probes)
    ranks = next((p.ranks for p in probes if p.stage == "baseline"), 1)
    table = Table(title="probes", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("stage: variant", ratio=3, overflow="fold")
    table.add_column("phase", no_wrap=True)
    table.add_column("samples/s", justify="right", no_wrap=True)
    table.add_column("vs baseline", justify="right", no_wrap=True)
    table.add_column("status", ratio=2, overflow="fold")
    for p in probes:
        phase = shown_phase(p)
        table.add_row(
            f"{p.stage}: {variant_text(p)}{ranks_tag(p.ranks, ranks)}",
            phase.upper(),
            sps_text(p.rate(phase)),
            versus_baseline(p, baseline),
            status_text(p, brief=True),
        )
    console = Console(file=stream or sys.stdout, width=width)
    console.print(table)
    crowded = sum(1 for p in probes if p.ok and p.contended)
    if baseline is None and any(p.stage == "baseline" and p.ok for p in probes):
        console.print(
            "vs baseline: none, every baseline probe ran contended (other processes used "
            "the machine): a percentage against it would mislead",
            highlight=False,
        )
    if crowded:
        console.print(
            f"{crowded} probe(s) ran contended and were left out of comparisons; what else "
            "used the machine is in each one's journal line (and --json)",
            highlight=False,
        )
