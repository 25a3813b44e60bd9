"""An answer for each run the user will do: where the tutorial's train.py cannot run the
recommendation (the GPU-resident loader), the ladder tunes it the loader it can run and
that loader's workers, and confirms them against the baseline: its own measured factor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneup.commands.export import run_export_command
from tuneup.probe.targets import TUNEUP, TUTORIAL
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.results.summary_document import summary_dict, targets_block
from tuneup.tuning.results.targets import target_answers
from tuneup.tuning.results.verdicts import headline
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.staged import staged_search

ROOT = Path(__file__).resolve().parents[1]
H200_27D = ROOT / "bench" / "results" / "gpu-h200-2026-11-27d" / "speed" / "00"
BASE = {
    "data_loader_config": "lowmem",
    "num_data_workers": 2,
    "amp_mode": "none",
    "cuda_graphs": False,
}
TIGHT = (-0.002, -0.001, 0.0, 0.001, 0.002)


def io_of(values: dict[str, Any]) -> float:
    """A node where the GPU-resident loader delivers 8000 samples/s, inmem 60 a worker and
    lowmem 40 a worker, up to 8 workers."""
    workers = min(int(values["num_data_workers"]), 8)
    rates = {"gpu": 8000.0, "inmem": 60.0 * workers}
    return rates.get(values["data_loader_config"], 40.0 * workers)


def synthetic_of(values: dict[str, Any]) -> float:
    return 1600.0 if values["amp_mode"] == "bf16" else 1000.0


class Node:
    """A measure over that node: FULL follows min(IO, SYNTHETIC), trials as a quiet machine."""

    def __init__(self) -> None:
        self.stages: list[str] = []

    def __call__(self, stage: str, cand: Candidate, values: dict[str, Any]) -> ProbeResult:
        self.stages.append(stage)
        io, syn = io_of(values), synthetic_of(values)
        full = 0.98 * min(io, syn)

        def trials(rate: float) -> list[float]:
            return [rate * (1 + d) for d in TIGHT]

        return ProbeResult(
            stage,
            dict(cand.values),
            dict(values),
            Status.OK,
            io_sps=io,
            synthetic_sps=syn,
            full_sps=full,
            io_sps_trials=trials(io),
            synthetic_sps_trials=trials(syn),
            full_sps_trials=trials(full),
            losses=[0.12, 0.1, 0.09],
        )


def ladder() -> list[StagePlan]:
    data = [
        Candidate("inmem", {"data_loader_config": "inmem"}),
        Candidate("gpu", {"data_loader_config": "gpu"}),
    ]
    workers = [Candidate(f"workers={w}", {"num_data_workers": w}) for w in (4, 8)]
    return [
        StagePlan("data", data, judged="io"),
        StagePlan("workers", workers, judged="io"),
        StagePlan("amp", [Candidate("bf16", {"amp_mode": "bf16"})], judged="synthetic"),
    ]


@pytest.fixture(scope="module")
def tuned() -> tuple[Any, Node]:
    node = Node()
    return staged_search(dict(BASE), ladder(), node, targets=(TUTORIAL,)), node


def test_the_tutorial_cannot_run_the_gpu_loader_or_cuda_graphs_and_retunes_workers_with_it():
    values = {**BASE, "data_loader_config": "gpu", "cuda_graphs": True}
    assert set(TUTORIAL.unrunnable(values)) == {"data_loader_config", "cuda_graphs"}
    assert "no gpu loader" in TUTORIAL.unrunnable(values)["data_loader_config"]
    assert set(TUTORIAL.reset_knobs(values)) == {
        "data_loader_config",
        "cuda_graphs",
        "num_data_workers",
    }
    assert TUTORIAL.unrunnable({**BASE, "data_loader_config": "dali-lowmem"}) == {}
    assert TUNEUP.unrunnable(values) == {}


def test_a_recommendation_the_tutorial_cannot_run_gets_the_tutorial_its_own_tuned_answer(tuned):
    outcome, node = tuned
    assert outcome.best_values["data_loader_config"] == "gpu"
    (answer,) = outcome.targets
    assert answer.target is TUTORIAL and not answer.same
    # the fastest loader it runs on the data stage's own screens, then its workers tuned
    assert answer.values["data_loader_config"] == "inmem"
    assert answer.values["num_data_workers"] == 8
    assert answer.values["amp_mode"] == "bf16"  # what it can run of the recommendation stays
    assert "data_loader_config" in answer.left_out
    # its workers were paired on IO, and its whole answer confirmed against the baseline
    assert "workers@tutorial" in node.stages and "confirm@tutorial" in node.stages
    assert "data@tutorial" not in node.stages  # no loader measured twice
    assert answer.upheld
    factor = answer.attempt.evidence.speedup
    assert factor == pytest.approx(480 / 80, rel=0.02)  # IO 480 (inmem x 8) over 80


def test_the_headline_and_the_summary_give_each_target_its_own_factor(tuned):
    outcome, _node = tuned
    line = headline(outcome)
    assert "recommendation: gpu" in line
    assert "the tutorial's train.py: inmem + workers=8: 6.00x faster" in line
    entries = targets_block(outcome, TUNEUP)
    assert [e["target"] for e in entries] == ["tuneup", "tutorial"]
    assert entries[0]["factor"] == pytest.approx(1568 / 78.4, rel=0.02)
    assert entries[1]["factor"] == pytest.approx(6.0, rel=0.02)
    assert entries[1]["changes"] == {
        "data_loader_config": "inmem",
        "num_data_workers": 8,
        "amp_mode": "bf16",
    }
    summary = Summary.from_document({**summary_dict(outcome), "targets": entries})
    answers = target_answers(summary, TUNEUP, (TUTORIAL,))
    assert [a.target for a in answers] == ["tuneup", "tutorial"] and answers[1].tuned


def test_a_recommendation_the_tutorial_runs_is_its_answer_as_it_is():
    plans = [p for p in ladder() if p.name != "data"]
    outcome = staged_search(dict(BASE), plans, Node(), targets=(TUTORIAL,))
    (answer,) = outcome.targets
    assert answer.same and answer.values == outcome.best_values
    assert "tutorial" not in headline(outcome)


def finished(tmp_path: Path, outcome: Any) -> Path:
    results = ResultsDir(tmp_path / "run")
    results.create({"preset": "mine", "trainer": "unet", "stages": ["data", "workers", "amp"]})
    document = {**summary_dict(outcome), "targets": targets_block(outcome, TUNEUP)}
    document.update(preset="mine", trainer="unet")
    results.write_summary(document)
    return results.path


def test_the_tutorials_exports_carry_its_own_answer_and_say_so(tuned, tmp_path, capsys):
    outcome, _node = tuned
    folder = finished(tmp_path, outcome)
    run_export_command(folder, "yaml", tmp_path / "tuned.yaml")
    block = yaml.safe_load((tmp_path / "tuned.yaml").read_text())["tuned"]
    assert block["data_loader_config"] == "inmem" and block["num_data_workers"] == 8
    said = capsys.readouterr().err
    assert "this is the tutorial's train.py's own answer, measured at 6.00x" in said
    # tuneup train's own export carries the recommendation
    run_export_command(folder, "tuneup", tmp_path / "tuneup.yaml")
    config = yaml.safe_load((tmp_path / "tuneup.yaml").read_text())
    assert config["data_loader_config"] == "gpu"


def test_an_older_session_says_the_tutorials_loader_was_not_tuned_and_its_ceiling(tmp_path, capsys):
    """2026-11-27d: the H200's answer was the GPU-resident loader; the yaml export gives the
    tutorial the baseline's 2-worker lowmem, and now says so with its measured ceiling."""
    target = tmp_path / "tuned.yaml"
    assert run_export_command(H200_27D, "yaml", target) == 0
    said = capsys.readouterr().err
    assert "tuned nothing for the tutorial's train.py" in said
    assert "cannot run data_loader_config=gpu" in said
    assert "IO the baseline measured at 97 samples/s: at most about 1.1x the baseline" in said
    text = target.read_text()
    assert text.startswith("# tuneup: note: this session tuned nothing")
    assert yaml.safe_load(text)["tuned"]["num_data_workers"] == 2
    summary = json.loads((H200_27D / "summary.json").read_text())
    assert "targets" not in summary  # read as recorded: nothing written into the evidence
