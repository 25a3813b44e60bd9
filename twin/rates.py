"""The rates a journal's probes measured, and their noise: each configuration's rates per
phase (a gather's read beside the baseline's probe just before it), the trials' spread,
and the probe-to-probe spread of the baseline's repeats and of every configuration a
ladder measured twice. Pure: journal lines in, figures out (evidence.py reads them).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuneup.config import TrainConfig
from tuneup.probe.stats import MAD_TO_SIGMA, median, relative_spread
from tuneup.probe.types import BASELINE_STAGE, PHASES

_TRAIN_DEFAULTS = dataclasses.asdict(TrainConfig())

_NOT_KNOBS = ("expdir", "use_cache", "seed", "log_every", "num_epochs", "max_steps", "max_seconds")


def with_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration with every knob's default filled in, less where its data lives."""
    full = {**_TRAIN_DEFAULTS, **dict(config)}
    return {
        k: v
        for k, v in full.items()
        if k not in _NOT_KNOBS and not k.endswith("_path") and "npy" not in k
    }


def change_of(config: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """What `config` changes from `base`, knob by knob (defaults filled in on both)."""
    mine, theirs = with_defaults(config), with_defaults(base)
    return {k: v for k, v in mine.items() if theirs.get(k) != v}


def config_key(values: Mapping[str, Any]) -> str:
    return json.dumps(dict(values), sort_keys=True, default=str)


@dataclass(frozen=True)
class Row:
    """One configuration's measured rates: its change from the baseline, rates per phase."""

    change: Mapping[str, Any]
    rates: Mapping[str, tuple[float, ...]]

    def rate(self, phase: str) -> float | None:
        found = self.rates.get(phase)
        return median(list(found)) if found else None


def paired_rows(
    lines: Sequence[Mapping[str, Any]],
    changes: Sequence[Mapping[str, Any]],
    base_rates: Mapping[str, Sequence[float]],
) -> dict[str, dict[str, list[float]]]:
    """Each configuration's rates per phase: where the probe just before it measured the
    baseline's, the baseline's median times the ratio to that probe (a shared machine
    drifts 15-30% in a minute, and a candidate measured once, later than the baseline,
    would carry the drift as its effect: a gather's fused Adam at +42%, two ladders after
    it +9% and +28%); else its own rate."""
    typical = {p: median(list(v)) for p, v in base_rates.items() if v}
    paired: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    beside: dict[str, float] = {}  # the baseline's rates in the probe just before
    for line, change in zip(lines, changes, strict=True):
        rates = {
            p: float(line[f"{p}_sps"])
            for p in measured_phases(line)
            if p in PHASES and line.get(f"{p}_sps")
        }
        if change:
            for phase, rate in rates.items():
                if phase in beside and phase in typical:
                    rate = typical[phase] * rate / beside[phase]
                paired[config_key(change)][phase].append(rate)
        beside = {} if change else rates
    return paired


def rates_of(
    line: Mapping[str, Any],
    rates: dict[str, list[float]],
    trials: dict[str, list[int]] | None,
    spreads: dict[str, list[float]] | None,
) -> None:
    """A probe's rate per phase into its row; its trials where its shape is the one read
    for their count (`trials` None: not), and their spread where it is read for noise
    (`spreads` None: not)."""
    measured = measured_phases(line)
    for phase in PHASES:
        rate = line.get(f"{phase}_sps")
        if rate and phase in measured:
            rates[phase].append(float(rate))
        runs = line.get(f"{phase}_sps_trials") or []
        if runs and trials is not None:
            trials[phase].append(len(runs))
        if len(runs) >= 2 and spreads is not None:
            spreads[phase].append(relative_spread(runs))


def probe_noise(*runs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each phase's probe-to-probe spread: the baseline's repeats, as a relative deviation
    of one probe (`deviation_of_steps`), pooled over `runs` (a gather's repeats, three in a
    row, and its warm baselines, one before each candidate: the row alone saw one quiet
    moment, 0.8% where the baselines spread over the gather saw 5.6%)."""
    noise = {}
    for phase in PHASES:
        steps = []
        for run in runs:
            rates = [float(b[f"{phase}_sps"]) for b in run if b.get(f"{phase}_sps")]
            steps += successive_steps(rates)
        if steps:
            noise[phase] = deviation_of_steps(steps)
    return noise


def successive_steps(rates: Sequence[float]) -> list[float]:
    """Successive probes' differences, each over sqrt 2 (a difference of two probes varies
    sqrt 2 times as much as one)."""
    return [abs(math.log(b / a)) / math.sqrt(2) for a, b in itertools.pairwise(rates)]


def deviation_of_steps(steps: Sequence[float]) -> float:
    """One probe's relative deviation from `successive_steps`: their median is a median
    absolute deviation, 0.67 of a normal deviation, so it is scaled as one (MAD_TO_SIGMA).
    Taken bare, it read every gather's probe noise a third low (4.1% for 6.1%), and the
    twin's candidates then resolved in fewer pairs than the real ladders took."""
    return MAD_TO_SIGMA * median(list(steps)) if steps else 0.0


def effect_noise(rows: Sequence[Row], probe: Mapping[str, float]) -> dict[str, float]:
    """Per phase, how far one gathered reading of a candidate's ratio to the baseline strays:
    the candidates' readings a round apart, against each other (`deviation_of_steps`); where
    no candidate was read twice in a phase, a ratio of two probes (sqrt 2 x `probe`)."""
    noise = {}
    for phase in PHASES:
        steps = [
            step
            for row in rows
            if row.change and len(row.rates.get(phase, ())) >= 2
            for step in successive_steps(row.rates[phase])
        ]
        if steps:
            noise[phase] = deviation_of_steps(steps)
        elif phase in probe:
            noise[phase] = math.sqrt(2) * probe[phase]
    return noise


def debiased_ratio(ratio: float, readings: int, noise: float) -> float:
    """A gathered ratio with the noise taken out of its size: a reading x = effect + error
    has E[x^2] = effect^2 + se^2 (se = noise / sqrt(readings)), so |effect| is read as
    sqrt(x^2 - se^2), 0 where the reading is within its own noise, and a large effect is
    barely moved. Taken bare, a gather's ratios were larger than the ladders found (fused
    Adam 1.22-1.35 in three gathers, 0.93-1.16 in their ladders), and the twin's ladders
    took 10 optimizer probes on average where the real ones took 15."""
    if ratio <= 0 or readings < 1:
        return ratio
    x = math.log(ratio)
    se = noise / math.sqrt(readings)
    return math.exp(math.copysign(math.sqrt(max(0.0, x * x - se * se)), x))


def measured_phases(line: Mapping[str, Any]) -> Sequence[str]:
    """The phases a probe measured itself (an IO figure carried from another is not one)."""
    return (line.get("plan") or {}).get("phases") or PHASES


def repeat_steps(lines: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, ...]]:
    """Per phase, every configuration's probe-to-probe steps in a ladder (its incumbent's
    repeats and its candidates' pairs), each a relative deviation of one probe as in
    `probe_noise`: on the second H200 ladder the 2-worker baseline's IO read 70-123
    samples/s over five probes, where its first two agreed within 7%."""
    seen: dict[tuple[str, str], list[float]] = defaultdict(list)
    for line in lines:
        measured = measured_phases(line)
        key = config_key(with_defaults(line.get("config") or {}))
        for phase in measured:
            rate = line.get(f"{phase}_sps")
            if rate:
                seen[(key, phase)].append(float(rate))
    steps: dict[str, list[float]] = defaultdict(list)
    for (_, phase), rates in seen.items():
        steps[phase] += successive_steps(rates)
    return {phase: tuple(values) for phase, values in steps.items()}


@dataclass(frozen=True)
class RatesRead:
    """A journal's table (each configuration's rates), its trials per phase where read for
    their count, and the trials' spread per phase."""

    rows: tuple[Row, ...]
    trials: Mapping[str, tuple[int, ...]]
    trial_noise: Mapping[str, float]


def read_rates(
    lines: Sequence[Mapping[str, Any]], base: Mapping[str, Any], shaped: set[int], *, gather: bool
) -> RatesRead:
    """Every configuration's rates per phase, as its change from `base`; the trials of the
    lines in `shaped` (those of a ladder's pairs' shape); the trials' spread there and, in a
    gather, in its warm baselines too, spread over it (its repeats alone saw one burst: 16%
    where the baselines saw 4%). A gather's candidates are read beside the baseline."""
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    changes: dict[str, dict[str, Any]] = {}
    trials: dict[str, list[int]] = defaultdict(list)
    spreads: dict[str, list[float]] = defaultdict(list)
    per_line = [change_of(line.get("config") or {}, base) for line in lines]
    for line, change in zip(lines, per_line, strict=True):
        key = config_key(change)
        changes[key] = change
        warm_baseline = line.get("stage") == BASELINE_STAGE and "setup" in (
            line.get("one_time_s") or {}
        )
        spread = id(line) in shaped or (gather and warm_baseline)
        rates_of(
            line, rows[key], trials if id(line) in shaped else None, spreads if spread else None
        )
    if gather:  # each candidate's rates as measured beside the baseline's
        rows.update(paired_rows(lines, per_line, rows.get(config_key({}), {})))
    return RatesRead(
        rows=tuple(Row(changes[k], {p: tuple(v) for p, v in r.items()}) for k, r in rows.items()),
        trials={p: tuple(v) for p, v in trials.items()},
        trial_noise={p: median(v) for p, v in spreads.items() if v},
    )
