"""summary.json read back as typed values: what a session wrote, and what older folders lack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.summary import Summary

WRITTEN = {
    "search": "staged",
    "preset": "cpu-smoke",
    "trainer": "sim",
    "margin_pct": 2.5,
    "baseline": {"values": {"amp_mode": "none"}, "io_sps": 300.0, "full_sps": 100.0},
    "recommendation": {
        "values": {"amp_mode": "bf16"},
        "changes": {"amp_mode": "bf16"},
        "path": ["bf16"],
        "headline": "recommendation: amp_mode=bf16: 1.50x faster",
        "batch_note": None,
        "full_sps": 150.0,
        "iqr_pct": 1.5,
    },
    "speedup": {"value": 1.5, "low": 1.4, "high": 1.6, "pairs": 3, "method": "interleaved"},
    "confirmation": {"status": "confirmed", "search_path": ["bf16"], "path": ["bf16"]},
    "stability": {"notes": ["the machine was busy"]},
    "bottleneck": {
        "before": {"kind": "compute-bound", "sentence": "compute-bound"},
        "after": {"kind": "data-bound", "sentence": "data-bound"},
    },
    "stages": [{"stage": "amp", "winner": "bf16", "gain_pct": 50.0, "reason": "faster"}],
    "scaling": {"lines": ["1 node: 150"]},
}


def test_a_written_summary_reads_back_as_values(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.write_summary(WRITTEN)

    summary = results.summary()

    assert (summary.preset, summary.trainer, summary.margin_pct) == ("cpu-smoke", "sim", 2.5)
    assert summary.baseline.full_sps == 100.0 and summary.baseline.synthetic_sps is None
    assert summary.recommendation.values == {"amp_mode": "bf16"}
    assert summary.recommendation.headline.endswith("1.50x faster")
    assert summary.recommendation.batch_note is None
    assert (summary.speedup.value, summary.speedup.pairs) == (1.5, 3)
    assert summary.confirmation is not None and summary.confirmation.path == ("bf16",)
    assert summary.notes == ("the machine was busy",)
    assert summary.after is not None and summary.after.kind == "data-bound"
    assert [(s.stage, s.winner, s.gain_pct) for s in summary.stages] == [("amp", "bf16", 50.0)]
    assert summary.scaling is not None and summary.scaling.lines == ("1 node: 150",)
    assert json.loads(json.dumps(dict(summary.document))) == WRITTEN  # --json passes it on


def test_an_older_summary_missing_blocks_reads_with_defaults() -> None:
    old = Summary.from_document({"recommendation": {"values": {"amp_mode": "bf16"}}})

    assert old.recommendation.values == {"amp_mode": "bf16"}
    assert (old.preset, old.trainer, old.search, old.margin_pct) == ("?", "?", "staged", 0.0)
    assert old.recommendation.headline == "" and old.recommendation.changes == {}
    assert old.speedup.value is None and old.confirmation is None
    assert old.notes == () and old.stages == () and old.scaling is None
    assert old.before is None and old.after is None


def test_values_of_the_wrong_type_read_as_missing() -> None:
    odd = Summary.from_document(
        {"margin_pct": None, "speedup": {"value": "fast", "pairs": True}, "stages": [1, {}]}
    )

    assert odd.margin_pct == 0.0
    assert (odd.speedup.value, odd.speedup.pairs) == (None, 0)
    assert [s.stage for s in odd.stages] == ["?"]


def test_the_results_screen_says_what_an_empty_summary_lacks() -> None:
    pytest.importorskip("textual")
    from tuneup.tui.screens.results import (
        changes_text,
        confirmation_text,
        notes_text,
        speedup_text,
        verdict_text,
    )

    empty = Summary.from_document({})

    assert speedup_text(empty) == "speedup: unknown"
    assert confirmation_text(empty) == "confirmation: none ran (nothing was adopted)"
    assert changes_text(empty) == "changes: none (keep the baseline)"
    assert verdict_text(empty) == "no verdict"
    assert notes_text(empty) == ""
