"""What the twin knows of a machine: an evidence folder, or a journal, read into figures.

An evidence folder (bench/gpu/EVIDENCE.md says field by field what is read)
holds a GPU run's `knobs.json` (SYNTHETIC per knob row, each row's first step
in a fresh process), and any tuneup journals: the run's sessions (`session/`,
the suite's `speed/<run>/` or `ladder/`) and what `bench/gpu_twin.py --gather`
measured without a ladder (`gather/`). A journal alone (`--journal-evidence`)
will do too. From the journals every cost a run records is read:

* a fresh process's start (`one_time_s.spawn`) and first step (`first_steps`);
* a warm worker's set-up (`setup`) and first step, apart for probes whose conv
  key was new to the process (one_time.conv_key) and those whose was not;
* torch.compile: its first steps when the disk cache was cold, and when it held
  the graph (`compile_cache`: "cold", "warm");
* TorchScript's set-up beyond the others', a CUDA graph's capture (`graph_capture`);
* the warm-ups that never settled (`plan.stable`), trials per phase, and the
  pairs each stage's decision took (a ladder's journal);
* every configuration's rates per phase (the `gather` table: each stage's
  candidates on the baseline, every phase, twice, each read beside the baseline
  probe just before it), its trials' spread, and the baseline's probe-to-probe
  spread (a gather's repeats and its baselines spread over it; rates.py).

What no evidence holds is an assumption (costs.py), each with its source,
a low, likely and high value, and the measurement that would settle it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.costs.estimate import ProbeCosts, probe_seconds
from tuneup.costs.one_time import conv_key, conv_row, row_of
from tuneup.errors import UsageError
from tuneup.probe.plan import MeasurementPlan
from tuneup.probe.stats import median
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, PHASES

from .learned import RecordedFailure, recorded_failures
from .rates import Row, probe_noise, read_rates, repeat_steps, with_defaults

SESSION_FOLDERS = ("session", "speed/*", "ladder", "gather")
"""Where an evidence folder holds tuneup journals, in the order read: the first GPU run's
`session/`, the GPU suite's default ladder (`speed/<run>/`) or short ladder, the gather."""

GATHER = "gather"
REPEAT_STAGE = "repeat"  # a gather's baseline, one phase alone (bench/twin_gather.py)


def session_folders(folder: Path) -> list[Path]:
    """The evidence folder's tuneup sessions that have a journal."""
    found = []
    for pattern in SESSION_FOLDERS:
        for path in sorted(folder.glob(pattern)):
            if (path / "journal.jsonl").is_file():
                found.append(path)
    return found


def session_folder(folder: Path) -> Path | None:
    """The first of them, where there is one."""
    sessions = session_folders(folder)
    return sessions[0] if sessions else None


def read_journal(path: Path) -> list[dict[str, Any]]:
    """A journal's lines as mappings; a damaged line is left out."""
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# What names where a run's data lives, or how long it runs, not what it measures: a twin's
# configuration (the sim's) and a gather's (the worker's) differ there and nowhere else.
def _ok(line: Mapping[str, Any]) -> bool:
    return line.get("status") == "ok" and bool(line.get("wall_s"))


@dataclass(frozen=True)
class KeyedFirst:
    """A first step that searched a conv key new to its process: its row (`conv_row`), its
    batch, whether its process was fresh, and its seconds."""

    row: str
    batch: int
    fresh: bool
    seconds: float


@dataclass(frozen=True)
class JournalFigures:
    """What journals measured (the module docstring), before anything is assumed."""

    baseline: Mapping[str, Any]
    rows: tuple[Row, ...]
    spawn: tuple[float, ...]
    first_fresh: tuple[float, ...]
    setup: tuple[float, ...]
    warm_first: tuple[float, ...]
    conv_new: tuple[float, ...]
    compile_cold: tuple[float, ...]
    compile_cached: tuple[float, ...]
    script: tuple[float, ...]
    capture: tuple[float, ...]
    stable: Mapping[str, tuple[bool, ...]]
    trials: Mapping[str, tuple[int, ...]]
    trial_noise: Mapping[str, float]
    probe_noise: Mapping[str, float]
    pairs: Mapping[str, int]
    windows: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    ratios: tuple[float, ...] = ()
    overhead_s: tuple[float, ...] = ()
    start_s: tuple[float, ...] = ()
    full_sps: tuple[float, ...] = ()
    io_sps: tuple[float, ...] = ()
    workers: int = 2
    first_keys: tuple[KeyedFirst, ...] = ()
    repeat_steps: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    failures: tuple[RecordedFailure, ...] = ()


def journal_figures(lines: Sequence[Mapping[str, Any]], extra: Mapping[str, Any]) -> JournalFigures:
    """Every cost the journal's probes recorded (the module docstring), and the table."""
    ok = [line for line in lines if _ok(line)]
    baselines = [line for line in ok if line.get("stage") == BASELINE_STAGE]
    if not baselines:
        raise UsageError("the journal has no ok baseline probe: nothing to replay")
    repeats = [line for line in ok if line.get("stage") == REPEAT_STAGE]
    # a ladder's probes measure one phase, mostly of a configuration seen before: where a
    # gather measured the baseline in that shape, its noise and warm-ups are read there
    shaped = {id(line) for line in (repeats or ok)}
    base = dict(baselines[0].get("config") or {})
    rates = read_rates(ok, base, shaped, gather=bool(repeats))
    parts: dict[str, list[float]] = defaultdict(list)
    stable: dict[str, list[bool]] = defaultdict(list)
    seen: set[tuple[Any, ...]] = set()
    setups = [line["one_time_s"]["setup"] for line in ok if "setup" in line.get("one_time_s", {})]
    plain_setup = median(setups) if setups else 0.0
    windows: dict[str, list[float]] = defaultdict(list)
    keyed: list[KeyedFirst] = []
    for line in ok:
        config = with_defaults(line.get("config") or {})
        once = dict(line.get("one_time_s") or {})
        fresh = "spawn" in once
        if fresh:
            seen = set()
        conv = conv_key(config)
        new = conv not in seen
        seen.add(conv)
        for part, seconds in _costs_of(line, config, new, id(line) in shaped, plain_setup):
            parts[part].append(seconds)
        if new and _plain(config) and not _first_step_lost(line):
            first = float(once.get("first_steps", 0.0))
            batch = int(config.get("global_batch_size") or 0)
            keyed.append(KeyedFirst(conv_row(config), batch, fresh, first))
        if id(line) in shaped and not fresh:
            for phase, count in _windows(line, float(once.get("first_steps", 0.0))).items():
                windows[phase].append(count)
        for phase, ok_ in dict((line.get("plan") or {}).get("stable") or {}).items():
            if id(line) in shaped:
                stable[phase].append(bool(ok_))
    return JournalFigures(
        baseline=base,
        rows=rates.rows,
        spawn=tuple(parts["spawn"]),
        first_fresh=tuple(parts["first_fresh"]),
        setup=tuple(parts["setup"]),
        warm_first=tuple(parts["warm_first"]),
        conv_new=tuple(parts["conv_new"]),
        compile_cold=tuple(parts["compile_cold"]),
        compile_cached=tuple(parts["compile_cached"]),
        script=tuple(parts["script"]),
        capture=tuple(parts["capture"]),
        stable={p: tuple(v) for p, v in stable.items()},
        trials=rates.trials,
        trial_noise=rates.trial_noise,
        probe_noise=probe_noise(repeats, baselines[1:]) if repeats else probe_noise(baselines),
        windows={p: tuple(v) for p, v in windows.items()},
        ratios=_model_ratios([line for line in ok if id(line) in shaped], windows),
        pairs=_pairs(ok),
        overhead_s=tuple(float(v) for v in extra.get("overhead_s", ())),
        start_s=tuple(float(v) for v in extra.get("start_s", ())),
        full_sps=tuple(float(b["full_sps"]) for b in baselines if b.get("full_sps")),
        io_sps=tuple(float(b["io_sps"]) for b in baselines if b.get("io_sps")),
        workers=int(base.get("num_data_workers", 2) or 0),
        first_keys=tuple(keyed),
        repeat_steps=repeat_steps(ok),
        failures=recorded_failures(lines),
    )


def _plain(config: Mapping[str, Any]) -> bool:
    """Its first step is cuDNN's search alone: no compile, no script."""
    return config.get("jit") in (None, "none")


def _first_step_lost(line: Mapping[str, Any]) -> bool:
    """A worker before 2026-11-27 ended a warm-up on its first step where that step passed
    the cap, and booked the step as warm-up (first_steps 0): such a line has no first step
    to read (the second H200 ladder's fp32 probe in a resumed worker: 33.8 s of warm-up)."""
    plan = dict(line.get("plan") or {})
    cap = float(plan.get("warmup_cap_s") or 0.0)
    first = float(dict(line.get("one_time_s") or {}).get("first_steps", 0.0))
    warm = dict(plan.get("warmup_s") or {}).values()
    return first < 0.05 and cap > 0 and any(float(w) > 2 * cap for w in warm)


def _costs_of(
    line: Mapping[str, Any], config: Mapping[str, Any], new: bool, shaped: bool, plain_setup: float
) -> list[tuple[str, float]]:
    """The one-time costs a probe's line records, each under the part the cost model prices
    (`new`: its conv key was new to its process)."""
    once = dict(line.get("one_time_s") or {})
    fresh = "spawn" in once
    first = float(once.get("first_steps", 0.0))
    found: list[tuple[str, float]] = []
    if fresh:
        found.append(("spawn", float(once["spawn"])))
        if row_of(config) == "baseline" and config.get("jit") in (None, "none"):
            found.append(("first_fresh", first))
    elif "setup" in once:
        found.append(("setup", float(once["setup"])))
    cache = line.get("compile_cache")
    if config.get("jit") == "compile" and cache in ("cold", "warm"):
        found.append(("compile_cold" if cache == "cold" else "compile_cached", first))
    elif config.get("jit") == "script" and "setup" in once:
        found.append(("script", max(0.0, float(once["setup"]) - plain_setup)))
    elif not fresh and config.get("jit") in (None, "none") and (new or shaped):
        found.append(("conv_new" if new else "warm_first", first))
    if "graph_capture" in once:
        found.append(("capture", float(once["graph_capture"])))
    return found


def _windows(line: Mapping[str, Any], first_s: float) -> dict[str, float]:
    """The windows each phase's settled warm-up took after its first step, where a probe
    measured that phase alone and recorded no loss steps (the estimate's warm-up model)."""
    plan = dict(line.get("plan") or {})
    phases = list(plan.get("phases") or [])
    if len(phases) != 1 or plan.get("loss_steps") or "loss_s" in plan:
        return {}
    phase = phases[0]
    warm = dict(plan.get("warmup_s") or {}).get(phase)
    rate = line.get(f"{phase}_sps")
    stable = dict(plan.get("stable") or {}).get(phase, True)
    batch = with_defaults(line.get("config") or {}).get("global_batch_size")
    if not (warm and rate and batch and stable and plan.get("trial_s")):
        return {}
    step = float(batch) / float(rate)
    window = MeasurementPlan.from_dict(plan).window_seconds(step, phase)
    return {phase: max(0.0, (float(warm) - first_s - step) / window)}


def _model_ratios(
    lines: Sequence[Mapping[str, Any]], windows: Mapping[str, Sequence[float]]
) -> tuple[float, ...]:
    """Each warm probe's running wall over what the estimate's model says of it (both less
    the probe's start and first steps, which the model does not scale), given its own start,
    first steps, step times, the warm-ups' windows and the seconds its trials took: what the
    model cannot see (the release of the probe before, the runner's reading of events) is
    the ratio. The trials are taken as they ran, not as the model sizes them: a worker that
    sized them wrong (the first whole H200 ladder's: 44 steps for 0.5 s) is not a cost the
    next worker pays."""
    typical = {p: median(list(v)) for p, v in windows.items() if v}
    ratios = []
    for line in lines:
        once = dict(line.get("one_time_s") or {})
        if "setup" not in once or not line.get("plan"):
            continue
        try:
            plan = MeasurementPlan.from_dict(line["plan"])
        except (TypeError, ValueError):
            continue
        batch = float(with_defaults(line.get("config") or {}).get("global_batch_size") or 1)
        steps = {p: batch / float(line[f"{p}_sps"]) for p in PHASES if line.get(f"{p}_sps")}
        stable = dict(line["plan"].get("stable") or {})
        costs = ProbeCosts(
            spawn_s=0.0,
            setup_s=float(once["setup"]),
            first_s=sum(float(v) for k, v in once.items() if k != "setup"),
            step_s=steps,
            trials={p: 0.0 for p in PHASES},
            unsettled={p: 0.0 if ok else 1.0 for p, ok in stable.items()},
            warm_windows=typical,
        )
        modeled = probe_seconds(plan, costs, fresh=False, new=True)
        modeled += float(line.get("timed_s") or 0.0) - costs.setup_s - costs.first_s
        if modeled > 0:  # the running parts: the one-time parts are not scaled
            ratios.append((float(line["wall_s"]) - costs.setup_s - costs.first_s) / modeled)
    return tuple(ratios)


def _pairs(lines: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The probes each stage took in a ladder's journal (a gather's: two per candidate)."""
    counts: dict[str, int] = defaultdict(int)
    for line in lines:
        stage = str(line.get("stage"))
        if stage not in (BASELINE_STAGE, CONFIRM_STAGE, REPEAT_STAGE):
            counts[stage] += 1
    return dict(counts)


@dataclass(frozen=True)
class Measured:
    """What an evidence folder holds, read: knobs.json's rows and every journal's figures."""

    folder: Path
    knob_rows: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    journals: Mapping[str, JournalFigures] = field(default_factory=dict)
    machine: Mapping[str, Any] = field(default_factory=dict)
    date: str = ""

    @property
    def gathered(self) -> JournalFigures | None:
        return self.journals.get(GATHER)

    def first_keys(self) -> list[KeyedFirst]:
        """Every journal's first steps of new conv keys."""
        return [first for j in self.journals.values() for first in j.first_keys]

    def failures(self) -> list[RecordedFailure]:
        """Every journal's crashed probes."""
        return [failure for j in self.journals.values() for failure in j.failures]

    def ladders(self) -> list[tuple[Mapping[str, Any], tuple[Row, ...]]]:
        """Every journal's baseline and its configurations' rates (changes from it)."""
        return [(j.baseline, j.rows) for j in self.journals.values()]

    def all_of(self, name: str) -> list[float]:
        """A cost's every measurement over the folder's journals."""
        values: list[float] = []
        for figures in self.journals.values():
            values += list(getattr(figures, name))
        return values


def read_measured(folder: Path, journals: Sequence[Path] = ()) -> Measured:
    """An evidence folder's measurements; `journals` are read too (--journal-evidence).

    Raises:
        UsageError: nothing to replay: neither knobs.json nor a journal with a baseline.
    """
    folder = Path(folder)
    knobs = read_json(folder / "knobs.json") if (folder / "knobs.json").is_file() else {}
    rows = {r["knob"]: r for r in (knobs or {}).get("rows", []) if r.get("status") == "pass"}
    sessions = session_folders(folder) + [Path(j).parent for j in journals]
    if not sessions or (
        knobs and "baseline" not in rows and not any(s.name == GATHER for s in sessions)
    ):
        missing = "knobs.json" if not knobs else "a tuneup session (session/ or gather/)"
        if knobs and not sessions:
            missing = "a tuneup session (session/ or gather/)"
        raise UsageError(
            f"{folder} is not an evidence folder: {missing} is missing "
            "(bench/gpu/run.sh or bench/gpu_twin.py --gather writes one; bench/gpu/EVIDENCE.md "
            "says what it holds)"
        )
    figures: dict[str, JournalFigures] = {}
    machine: dict[str, Any] = {}
    for session in sessions:
        lines = read_journal(session / "journal.jsonl")
        extra = read_json(session / "gather.json") if session.name == GATHER else {}
        # Ladders' sessions are all named 00 in their suite folders: one must not hide another.
        key = session.name if session.name not in figures else str(session)
        try:
            figures[key] = journal_figures(lines, extra or {})
        except UsageError as exc:
            raise UsageError(f"{session / 'journal.jsonl'}: {exc}") from None
        recorded = read_json(session / "session.json")
        if isinstance(recorded, dict) and not machine:
            machine = dict(recorded.get("machine") or {})
    return Measured(folder, rows, figures, machine, str((knobs or {}).get("date", "")))


# --- the price list: measured where a journal or knobs.json has it, else assumed ----------
