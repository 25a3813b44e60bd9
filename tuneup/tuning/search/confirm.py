"""The confirmation: baseline and the search's pick in interleaved FULL pairs, then shorter paths.

The confirmation decides what is recommended (search.py's module docstring):
when the pick is not upheld, the adopted changes are dropped from the last one
backwards and each shorter path is confirmed in turn, `attempts` at most. When
the time budget runs short mid-confirmation (a StageCut) it ends with the pairs
it has: unresolved, the baseline kept, and no shorter path tried. Its
probes measure FULL alone; the recommendation's IO and SYNTHETIC figures come
from its configuration's whole probe (the check its stage ran on adopting it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tuneup.probe.hostload import under_load_text
from tuneup.probe.types import Candidate, ProbeResult
from tuneup.tuning.search.search_records import BASELINE, CONFIRM, Confirmation, ConfirmAttempt
from tuneup.tuning.search.search_runner import SearchRunner, Series

_NOTHING = object()


def confirm(
    runner: SearchRunner,
    base_values: dict[str, Any],
    steps: list[tuple[str, dict[str, Any]]],
    pairs: int,
    attempts: int,
) -> tuple[Confirmation, dict[str, Any], ProbeResult]:
    """Confirm the search's path, then shorter ones; the upheld values and their probe."""
    tried: list[ConfirmAttempt] = []
    upheld_series: Series | None = None
    for drop in range(min(len(steps), max(attempts, 1))):
        kept = steps[: len(steps) - drop]
        labels = tuple(label for label, _ in kept)
        values = kept[-1][1]
        attempt, series, cut = confirm_one(runner, base_values, labels, values, pairs)
        tried.append(attempt)
        if attempt.upheld:
            upheld_series = series
            break
        if cut:  # the time budget ran out: no time for a shorter path
            break
    search_path = [label for label, _ in steps]
    shown = next((a for a in tried if a.upheld), tried[0])
    ratios = list(shown.evidence.ratios)
    confirmation = Confirmation(
        baseline_sps=list(shown.baseline_sps),
        best_sps=list(shown.best_sps),
        ratios=ratios,
        speedup=shown.evidence.speedup,
        low=min(ratios) if ratios else None,
        high=max(ratios) if ratios else None,
        failed=shown.failed,
        attempts=tried,
        search_path=search_path,
        path=list(shown.path) if shown.upheld else [],
    )
    if upheld_series is None:
        return confirmation, dict(base_values), runner.reference  # type: ignore[return-value]
    best = upheld_series.summary()
    whole = runner.latest_whole(dict(shown.values))
    if whole is not None:
        best = dataclasses.replace(
            best,
            io_sps=best.io_sps or whole.io_sps,
            synthetic_sps=best.synthetic_sps or whole.synthetic_sps,
        )
    lossed = runner.losses_of(dict(shown.values))
    if lossed is not None and not best.losses:
        best = dataclasses.replace(
            best, losses=lossed.losses, loss_start=lossed.loss_start, loss_end=lossed.loss_end
        )
    return confirmation, dict(shown.values), best


def confirm_one(
    runner: SearchRunner,
    base_values: dict[str, Any],
    labels: tuple[str, ...],
    values: dict[str, Any],
    pairs: int,
    stage: str = CONFIRM,
) -> tuple[ConfirmAttempt, Series, bool]:
    """`values` against the baseline in interleaved FULL pairs (journaled as `stage`): the
    attempt, the series of its values' probes, and whether the time budget cut it."""
    variant = {k: v for k, v in values.items() if base_values.get(k, _NOTHING) != v}
    at_least = max(2, pairs)
    best = Series([])
    first = len(runner.probes)
    found = runner.compare(
        stage,
        Candidate(BASELINE, {}, whole=False),
        base_values,
        Candidate("recommended", variant, whole=False),
        values,
        base_series=Series([]),
        cand_series=best,
        # The confirmation decides: a close call on a noisy machine gets three times the
        # fewest pairs before it is left unresolved.
        rule={
            "min_pairs": at_least,
            "max_pairs": 3 * at_least,
            "min_reject": at_least,
            "decisive": False,
        },
        max_failed=pairs,
        resume=False,
        cut_decides=True,
    )
    evidence = found.evidence
    load = under_load_text(runner.probes[first:])
    if load:  # its pairs ran under a steady load: the verdict says so
        evidence = dataclasses.replace(evidence, why=f"{evidence.why}; {load}")
    attempt = ConfirmAttempt(
        path=labels,
        values=dict(values),
        evidence=evidence,
        baseline_sps=tuple(a for a, _ in found.pairs),
        best_sps=tuple(b for _, b in found.pairs),
        failed=found.failed,
    )
    return attempt, best, bool(found.cut)
