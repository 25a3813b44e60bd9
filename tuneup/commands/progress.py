"""How `tuneup probe` shows its work: live bars on a terminal, plain lines otherwise.

Progress goes to stderr; the final table and recommendation go to stdout
(with `--json`, stdout holds only the JSON document).
"""

from __future__ import annotations

import sys
from typing import IO, Any

from tuneup.probe.types import ProbeResult, Status


def _sps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _stragglers(result: ProbeResult) -> str:
    if not result.stragglers:
        return ""
    ranks = ", ".join(str(r) for r in result.stragglers)
    many = len(result.stragglers) > 1
    return f" (straggler{'s' if many else ''}: rank{'s' if many else ''} {ranks})"


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


def _ranks_tag(ranks: int, session_ranks: int) -> str:
    """The probe's ranks when it had several, or one in a session of several."""
    if ranks > 1:
        return f" [{ranks} ranks]"
    return " [1 rank]" if session_ranks > 1 else ""


def session_ranks(info: dict[str, Any]) -> int:
    """The ranks a session's probes run with, from its info (launch, else machine)."""
    for holder in (info.get("launch"), info.get("machine")):
        if isinstance(holder, dict) and isinstance(holder.get("world_size"), int):
            return int(holder["world_size"])
    return 1


def _unchanged(stage: str) -> str:
    """What a probe that changes nothing measured: the baseline, or a stage's incumbent."""
    return "baseline" if stage in ("baseline", "confirm") else "incumbent"


def result_line(
    result: ProbeResult,
    baseline_sps: float | None,
    reused: bool = False,
    *,
    ranks: int = 1,
) -> str:
    """One line per finished probe: stage, variant (and ranks), FULL rate, change, status.

    `ranks` is the session's world size: a probe on fewer ranks (a 1-rank
    reference) says so even when it ran on one.
    """
    label = ", ".join(f"{k}={v}" for k, v in result.variant.items()) or _unchanged(result.stage)
    label += _ranks_tag(result.ranks, ranks)
    if result.ok and result.full_sps and baseline_sps:
        change = f" ({100 * (result.full_sps / baseline_sps - 1):+.1f}% vs baseline)"
    else:
        change = ""
    status = result.status.value if result.ok else f"{result.status.value}: {result.reason}"
    if result.ok and result.throttled:
        status += " (throttled: noisy)"
    if result.ok and result.contention is not None and result.contention.contended:
        status += f" (contended: {result.contention.note})"
    status += _stragglers(result)
    again = " [from journal]" if reused else ""
    return (
        f"{result.stage:<13} {label:<32} FULL {_sps(result.full_sps):>10} samples/s"
        f"{change}  {status}{again}"
    )


class PlainReporter:
    """One line per probe, for logs and pipes (no terminal control codes)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.baseline_sps: float | None = None
        self.ranks = 1
        self.done = 0
        self.total = 0

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

    def total_changed(self, total: int) -> None:
        self.total = total

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        self.done += 1
        if result.stage == "baseline" and result.ok and self.baseline_sps is None:
            self.baseline_sps = result.full_sps
        line = result_line(result, self.baseline_sps, reused, ranks=self.ranks)
        print(f"[{self.done}/~{self.total}] {line}", file=self.stream, flush=True)


class RichReporter(PlainReporter):
    """A bar for the ladder and one for the current probe, with the last result line."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

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

    def probe_start(self, stage: str, label: str) -> None:
        self.progress.update(
            self.current, description=f"{stage}: {label}", completed=0, total=1, visible=True
        )

    def event(self, event: dict[str, Any]) -> None:
        """Worker events move the current probe's bar (called from the reader thread)."""
        kind = event.get("event")
        if kind == "trial":
            self.progress.update(
                self.current,
                description=f"{event.get('phase', '')} trial {event.get('index', 0) + 1}: "
                f"{_sps(event.get('samples_per_s'))} samples/s",
            )
        elif kind == "warmup":
            self.progress.update(self.current, description="measuring")

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        self.done += 1
        if result.stage == "baseline" and result.ok and self.baseline_sps is None:
            self.baseline_sps = result.full_sps
        self.progress.update(self.ladder, advance=1)
        self.progress.update(self.current, visible=False)
        line = result_line(result, self.baseline_sps, reused, ranks=self.ranks)
        self.console.print(line, highlight=False)

    def close(self) -> None:
        self.progress.stop()


def final_table(probes: list[ProbeResult], stream: IO[str] | None = None) -> None:
    """The ladder as a table: stage, variant, IO, SYNTHETIC, FULL, vs baseline, status."""
    from rich.console import Console
    from rich.table import Table

    baseline = next((p.full_sps for p in probes if p.stage == "baseline" and p.ok), None)
    ranks = next((p.ranks for p in probes if p.stage == "baseline"), 1)
    table = Table(title="probe ladder", title_justify="left")
    for column in ("stage", "variant", "IO", "SYNTHETIC", "FULL", "vs baseline", "status"):
        table.add_column(
            column, justify="right" if column in ("IO", "SYNTHETIC", "FULL") else "left"
        )
    for p in probes:
        variant = ", ".join(f"{k}={v}" for k, v in p.variant.items()) or "-"
        variant += _ranks_tag(p.ranks, ranks)
        versus = (
            f"{100 * (p.full_sps / baseline - 1):+.1f}%" if p.ok and p.full_sps and baseline else ""
        )
        status = p.status.value if p.status is Status.OK else f"{p.status.value}: {p.reason}"
        if p.ok and p.throttled:
            status += " (throttled: noisy)"
        status += _stragglers(p)
        table.add_row(
            p.stage,
            variant,
            _sps(p.io_sps),
            _sps(p.synthetic_sps),
            _sps(p.full_sps),
            versus,
            status,
        )
    Console(file=stream or sys.stdout, width=140).print(table)
