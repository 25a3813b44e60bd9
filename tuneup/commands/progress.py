"""How `tuneup probe` shows its work: live bars on a terminal, plain lines otherwise.

Progress goes to stderr; the final table and recommendation go to stdout
(with `--json`, stdout holds only the JSON document).
"""

from __future__ import annotations

import sys
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tuneup.probe.describe import (
    ranks_tag,
    result_line,
    session_ranks,
    sps_text,
    status_text,
    variant_text,
    versus_baseline,
)
from tuneup.probe.estimate import time_left_text
from tuneup.probe.events import Event, TrialEvent, WarmupEvent
from tuneup.probe.types import ProbeResult


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

    def time_left(self, seconds: float, basis: str) -> None:
        first = not self.left
        self.left = time_left_text(seconds, basis)
        if first:  # the estimate before any probe; later ones end each probe's line
            print(f"tuneup probe: ladder {self.left}", file=self.stream, flush=True)

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        self.done += 1
        if result.stage == "baseline" and result.ok and self.baseline is None:
            self.baseline = result
        line = result_line(result, self.baseline, reused, ranks=self.ranks)
        left = f" · ladder: {self.left}" if self.left else ""
        print(f"[{self.done}/~{self.total}] {line}{left}", file=self.stream, flush=True)


class RichReporter(PlainReporter):
    """A bar for the ladder and one for the current probe, with the last result line."""

    def __init__(self) -> None:
        super().__init__()

        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
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
        if isinstance(event, TrialEvent):
            self.progress.update(self.current, description=trial_text(event))
        elif isinstance(event, WarmupEvent):
            self.progress.update(self.current, description="measuring")

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        self.done += 1
        if result.stage == "baseline" and result.ok and self.baseline is None:
            self.baseline = result
        self.progress.update(self.ladder, advance=1)
        self.progress.update(self.current, visible=False)
        line = result_line(result, self.baseline, reused, ranks=self.ranks)
        self.console.print(line, highlight=False, markup=False)  # "[from journal]" is text

    def close(self) -> None:
        self.progress.stop()


def final_table(probes: list[ProbeResult], stream: IO[str] | None = None) -> None:
    """The ladder as a table: stage, variant, IO, SYNTHETIC, FULL, vs baseline, status."""

    baseline = next((p for p in probes if p.stage == "baseline" and p.ok), None)
    ranks = next((p.ranks for p in probes if p.stage == "baseline"), 1)
    table = Table(title="probe ladder", title_justify="left")
    for column in ("stage", "variant", "IO", "SYNTHETIC", "FULL", "vs baseline", "status"):
        table.add_column(
            column, justify="right" if column in ("IO", "SYNTHETIC", "FULL") else "left"
        )
    for p in probes:
        table.add_row(
            p.stage,
            variant_text(p) + ranks_tag(p.ranks, ranks),
            sps_text(p.io_sps),
            sps_text(p.synthetic_sps),
            sps_text(p.full_sps),
            versus_baseline(p, baseline),
            status_text(p),
        )
    Console(file=stream or sys.stdout, width=140).print(table)
