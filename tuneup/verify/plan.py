"""How a verify's runs are shaped and ordered: pure figures in, a plan out.

Each run is a short real training: a first epoch (its warm-up, never counted), then
STEADY_EPOCHS epochs whose samples/s count, each with its validation in the real run's
proportion. An epoch's samples follow from the rate the probes measured, so each lasts
about its share of the measured time whatever the machine; the run's limit allows for a
slower larger box. Runs alternate A B B A, so a machine that speeds up or slows down
credits neither configuration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.durations import duration_text
from tuneup.tuning.results.verified import BASELINE, RECOMMENDATION

STEADY_EPOCHS = 3  # counted epochs after the first: a median and its quartiles
MIN_STEPS = 4  # an epoch shorter than this many steps times nothing but its overhead
SLOW_FACTOR = 3.0  # a run may take this many times its planned time before it is killed
VAL_SHARE_GUESS = 0.15  # a validation's part of an epoch, for the budget's estimate
MIN_SECONDS = 1.0  # measured seconds per run, below which nothing steady is left


@dataclass(frozen=True)
class RunShape:
    """What one run of a configuration trains: an epoch's samples, its validation's, the
    epochs, and the time it was planned to take (its start, then each epoch)."""

    samples: int
    val_samples: int
    epochs: int
    epoch_s: float
    startup_s: float

    def limit_s(self, first: tuple[float, float] | None = None) -> float:
        """When the run is ended (the epochs it finished count): SLOW_FACTOR times its
        plan; once its first epoch has ended (`first`: when, after the start, and its
        seconds), SLOW_FACTOR times the rest at the pace that epoch showed, if slower: a
        machine slower than the probes' gets its epochs, a run that hangs is ended."""
        per_epoch = self.epoch_s * (1 + VAL_SHARE_GUESS)
        planned = SLOW_FACTOR * (self.startup_s + self.epochs * per_epoch)
        if first is None:
            return planned
        ended_at, seconds = first
        pace = max(per_epoch, seconds * (1 + VAL_SHARE_GUESS))
        return max(planned, ended_at + SLOW_FACTOR * (self.epochs - 1) * pace)


def run_order(rounds: int) -> tuple[tuple[str, int], ...]:
    """(configuration, round) in the order they run: A B, B A, A B, ... (rounds >= 1)."""
    order: list[tuple[str, int]] = []
    for index in range(max(1, rounds)):
        pair = (BASELINE, RECOMMENDATION) if index % 2 == 0 else (RECOMMENDATION, BASELINE)
        order += [(config, index) for config in pair]
    return tuple(order)


def shape_run(
    *,
    batch: int,
    rate: float,
    seconds: float,
    real_samples: int,
    real_val_samples: int,
    startup_s: float,
) -> RunShape:
    """One run measured for `seconds` after its first epoch.

    Args:
        batch: the global batch (an epoch holds whole batches).
        rate: the samples/s the probes measured for this configuration.
        seconds: the measured time of this run (its STEADY_EPOCHS epochs).
        real_samples, real_val_samples: an epoch of the real run, whose proportion of
            validation the run keeps (at least one batch where the real run validates).
        startup_s: what starting the program may take before its first step.
    """
    steps = max(MIN_STEPS, int(rate * seconds / STEADY_EPOCHS / batch))
    samples = steps * batch
    val_samples = 0
    if real_val_samples > 0 and real_samples > 0:
        wanted = samples * real_val_samples / real_samples
        val_samples = max(1, round(wanted / batch)) * batch
    return RunShape(
        samples=samples,
        val_samples=val_samples,
        epochs=1 + STEADY_EPOCHS,
        epoch_s=samples / max(rate, 1e-9),
        startup_s=startup_s,
    )


def run_estimate_s(seconds: float, startup_s: float) -> float:
    """What one run is expected to take: its start, a first epoch, the counted epochs and
    their validations."""
    epochs = seconds * (1 + STEADY_EPOCHS) / STEADY_EPOCHS
    return startup_s + epochs * (1 + VAL_SHARE_GUESS)


def fit_seconds(
    seconds: float,
    runs: int,
    startup_s: float,
    budget_s: float | None,
    *,
    spent_s: float = 0.0,
) -> float:
    """The measured seconds per run that let `runs` runs end within `budget_s` (None: no
    budget), `spent_s` of it gone already (making the data): `seconds`, or less where the
    budget needs it.

    Raises:
        UsageError: the budget is too short for even MIN_SECONDS a run.
    """
    if budget_s is None or runs <= 0:
        return seconds
    left = budget_s - spent_s
    if runs * run_estimate_s(seconds, startup_s) <= left:
        return seconds
    per_run = left / runs - startup_s
    fitted = per_run / ((1 + VAL_SHARE_GUESS) * (1 + STEADY_EPOCHS) / STEADY_EPOCHS)
    if fitted < MIN_SECONDS:
        least = spent_s + runs * run_estimate_s(MIN_SECONDS, startup_s)
        making = (
            f" (making the data takes about {duration_text(spent_s)} of it)" if spent_s >= 1 else ""
        )
        raise UsageError(
            f"--budget {duration_text(budget_s)}{making} is too short for {runs} runs (each "
            f"starts in about {duration_text(startup_s)}): give at least "
            f"{duration_text(math.ceil(least))}, or fewer --rounds"
        )
    return fitted


def run_values(
    values: Mapping[str, Any], shape: RunShape, data: Mapping[str, Any]
) -> dict[str, Any]:
    """The configuration's values as this run trains them: its epochs, on `data` (the
    train and validation paths and box sides), with no step or time cap of the probes'."""
    return {
        **values,
        **data,
        "Nsamples": shape.samples,
        "Nsamples_val": shape.val_samples,
        "num_epochs": shape.epochs,
        "max_steps": None,
        "max_seconds": None,
    }
