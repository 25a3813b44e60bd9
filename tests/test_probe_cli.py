"""`tuneup probe` and `tuneup export` end to end on the `sim` trainer, and the journal."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuneup.config import load_config
from tuneup.probe.types import ProbeResult, Status
from tuneup.tuning.results.journal import ResultsDir

JOURNAL_FIELDS = (
    "stage",
    "variant",
    "config",
    "status",
    "reason",
    "io_sps",
    "synthetic_sps",
    "full_sps",
    "full_sps_trials",
    "iqr_pct",
    "warmup_s",
    "loss_start",
    "loss_end",
    "gpu_util_mean",
    "power_mean_w",
    "energy_j_per_sample",
    "mem_peak_mb",
    "throttled",
    "wall_s",
)


def tuneup(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneup", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def sim_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("sim") / "run"
    done = tuneup("probe", "--trainer", "sim", "--seed", "3", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    return out, json.loads(done.stdout)


def test_json_mode_prints_one_document_and_writes_the_results_dir(sim_session) -> None:
    out, document = sim_session
    assert document["results_dir"] == str(out)
    for name in ("session.json", "journal.jsonl", "summary.json"):
        assert (out / name).is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary == document["summary"]
    assert summary["recommendation"]["values"]
    assert summary["bottleneck"]["before"]["kind"] in ("data-bound", "compute-bound", "balanced")
    session = json.loads((out / "session.json").read_text())
    assert session["preset"] == "cpu-smoke" and session["trainer"] == "sim"


def test_every_journal_line_carries_the_design_fields(sim_session) -> None:
    out, document = sim_session
    lines = (out / "journal.jsonl").read_text().splitlines()
    measured = [p for p in document["probes"] if p["status"] != "skipped"]
    assert len(lines) == len(measured)
    for line in lines:
        record = json.loads(line)
        missing = [f for f in JOURNAL_FIELDS if f not in record]
        assert not missing, missing


def test_same_seed_same_recommendation(sim_session, tmp_path: Path) -> None:
    _, first = sim_session
    again = tuneup(
        "probe", "--trainer", "sim", "--seed", "3", "--out", str(tmp_path / "b"), "--json"
    )
    assert (
        json.loads(again.stdout)["summary"]["recommendation"]["values"]
        == (first["summary"]["recommendation"]["values"])
    )


def test_plain_lines_when_not_a_terminal(tmp_path: Path) -> None:
    done = tuneup("probe", "--trainer", "sim", "--out", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stderr  # no live bars or colours in a pipe
    assert "baseline" in done.stderr and "samples/s" in done.stderr
    assert "probe ladder" in done.stdout and "results:" in done.stdout


def test_resume_skips_journaled_probes_and_tolerates_a_torn_line(sim_session, tmp_path) -> None:
    out, document = sim_session
    copy = tmp_path / "resumed"
    copy.mkdir()
    (copy / "session.json").write_text((out / "session.json").read_text())
    lines = (out / "journal.jsonl").read_text().splitlines()
    kept = lines[:5]
    torn = lines[5][: len(lines[5]) // 2]  # power lost mid-write
    (copy / "journal.jsonl").write_text("\n".join(kept) + "\n" + torn)
    done = tuneup("probe", "--resume", str(copy), "--json")
    assert done.returncode == 0, done.stderr
    resumed = json.loads(done.stdout)
    assert (
        resumed["summary"]["recommendation"]["values"]
        == (document["summary"]["recommendation"]["values"])
    )
    after = [json.loads(x) for x in (copy / "journal.jsonl").read_text().splitlines()]
    assert len(after) == len(lines), "resume repeated or lost probes"
    assert after[:5] == [json.loads(x) for x in kept]


def test_resume_with_another_trainer_is_a_clear_error(sim_session) -> None:
    out, _ = sim_session
    done = tuneup("probe", "--resume", str(out), "--trainer", "unet")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot resume" in done.stderr


def test_unknown_stage_and_preset_are_one_line_errors(tmp_path: Path) -> None:
    for args in (["--stages", "workers,warp"], ["--preset", "no-such-machine"]):
        done = tuneup("probe", "--trainer", "sim", "--out", str(tmp_path / "x"), *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


def test_exports_load_back(sim_session, tmp_path: Path) -> None:
    out, document = sim_session
    wanted = document["summary"]["recommendation"]["values"]
    yaml_file = tmp_path / "tuned.yaml"
    assert tuneup("export", str(out), "--format", "yaml", "-o", str(yaml_file)).returncode == 0
    block = next(iter(yaml.safe_load(yaml_file.read_text())))
    cfg = load_config(yaml_file, block)
    for key, value in wanted.items():
        # data_size: cpu-smoke's 4-level model on 16^3 crops is not one the tutorial can
        # build; the block gives it the tutorial's 64^3 (and tuneup's levels: 4).
        assert getattr(cfg, key) == value or key in ("lr_schedule", "data_size"), key
    assert cfg.unet_levels == 4 and cfg.data_size == 64
    own = tmp_path / "tuneup.yaml"
    assert tuneup("export", str(out), "--format", "tuneup", "-o", str(own)).returncode == 0
    assert load_config(own).amp_mode == wanted.get("amp_mode", "none")
    flags = tuneup("export", str(out), "--format", "flags")
    assert flags.returncode == 0 and "--data_loader_config inmem" in flags.stdout
    script = tuneup("export", str(out), "--format", "sbatch")
    assert script.stdout.startswith("#!") and "#SBATCH" in script.stdout


def test_export_of_an_unfinished_session_says_how_to_resume(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "half")
    results.create({"preset": "cpu-smoke", "trainer": "sim"})
    done = tuneup("export", str(results.path), "--format", "yaml")
    assert done.returncode == 2 and "--resume" in done.stderr


def test_journal_turns_nan_into_null_and_reads_it_back(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path)
    results.create({"preset": "p", "trainer": "t"})
    bad = ProbeResult(
        "amp",
        {"amp_mode": "fp16"},
        {},
        Status.DIVERGED,
        "loss is NaN",
        losses=[1.0, float("nan")],
        loss_end=float("nan"),
    )
    results.append(bad)
    text = (tmp_path / "journal.jsonl").read_text()
    assert "NaN," not in text and "NaN]" not in text
    (back,) = results.results()
    assert back.status is Status.DIVERGED and back.loss_end is None
    assert back.losses[0] == 1.0 and math.isnan(back.losses[1])  # a NaN again, as it was


def test_grid_search_measures_the_cross_product_and_agrees(tmp_path: Path) -> None:
    # six of the sim's stages: 120 grid points (the whole default grid, 720, took 20 s of
    # bookkeeping alone), against the staged search's pairs on the same stages
    stages = ["--stages", "workers,data,amp,optimizer,jit,channels_last"]
    ladders = {}
    for search in ("staged", "grid"):
        done = tuneup(
            "probe", "--trainer", "sim", "--seed", "3", "--search", search, *stages,
            "--out", str(tmp_path / search), "--json",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        ladders[search] = json.loads(done.stdout)
    grid, staged = ladders["grid"], ladders["staged"]
    grid_probes = [p for p in grid["probes"] if p["status"] != "skipped"]
    staged_probes = [p for p in staged["probes"] if p["status"] != "skipped"]
    assert len(grid_probes) > 2 * len(staged_probes)
    # every point of the cross product once
    points = {json.dumps(p["variant"], sort_keys=True) for p in grid_probes}
    assert len(points) == len(grid_probes)
    assert grid["summary"]["search"] == "grid"
    best = max(p["full_sps"] for p in grid_probes if p["status"] == "ok")
    assert grid["summary"]["recommendation"]["full_sps"] == pytest.approx(best)


def test_a_stage_re_proposes_on_what_earlier_stages_adopted() -> None:
    """CUDA graphs after fp16 won must try graphs with bf16, not a config that cannot run."""
    from tuneup.hardware.types import MachineInfo
    from tuneup.probe.types import Candidate
    from tuneup.tuning.search.staged import staged_search
    from tuneup.tuning.session.stage_plans import stage_plans

    machine = MachineInfo(cuda=True, gpu_count=1, cpus_usable=16)
    plans = stage_plans(("amp", "cuda_graphs"), machine, {"device": "cuda"})
    seen: list[dict] = []

    def measure(stage: str, candidate: Candidate, values: dict) -> ProbeResult:
        seen.append(dict(values))
        fast = 2.0 if values.get("amp_mode") == "fp16" else 1.0
        return ProbeResult(
            stage,
            candidate.values,
            values,
            Status.OK,
            io_sps=1000.0,
            synthetic_sps=100 * fast,
            full_sps=100 * fast,
            full_sps_trials=[100 * fast] * 5,
            synthetic_sps_trials=[100 * fast] * 5,
            io_sps_trials=[1000.0] * 5,
            losses=[1.0, 0.5],
        )

    staged_search({"device": "cuda"}, plans, measure, confirm_pairs=0)
    graphs = [v for v in seen if v.get("cuda_graphs")]
    assert graphs and all(v["amp_mode"] == "bf16" for v in graphs)


def test_the_answer_does_not_depend_on_the_noise_seed(tmp_path: Path, capsys) -> None:
    from tuneup.cli import main

    answers = []
    for seed in range(1, 6):  # five sessions, five draws of the sim's noise
        out = tmp_path / f"seed{seed}"
        assert main(["probe", "--trainer", "sim", "--seed", str(seed), "--out", str(out)]) == 0
        capsys.readouterr()
        summary = json.loads((out / "summary.json").read_text())
        answers.append(json.dumps(summary["recommendation"]["changes"], sort_keys=True))
    assert len(set(answers)) == 1, answers


def test_probe_help_names_the_auto_pick_and_only_presets_that_exist(capsys) -> None:
    import re

    from tuneup.cli import main
    from tuneup.preset.autopick import auto_pick

    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "picked by the GPUs found" in text
    said = text[text.index("preset name or YAML path") :][:400]
    named = set(re.findall(r"\b([a-z0-9]+(?:-[a-z0-9]+)+)\b", said))
    bundled = {p.stem for p in (Path(__file__).parent.parent / "presets").glob("*.yaml")}
    assert named & bundled and named <= bundled | {"jean-zay"}
    assert auto_pick([], 2, cuda=False).name == "cpu-smoke"  # what "none" says


def _walls(out: Path) -> float:
    lines = (out / "journal.jsonl").read_text().splitlines()
    return sum(json.loads(line)["wall_s"] for line in lines if line.strip())


def test_a_time_budget_is_kept_and_says_what_it_left_out(tmp_path: Path, capsys) -> None:
    from tuneup.cli import main

    # the sim's probes take simulated GPU seconds: a budget is kept on that clock
    whole = tmp_path / "whole"
    assert main(["probe", "--trainer", "sim", "--out", str(whole)]) == 0
    budget = 0.45 * _walls(whole)
    out = tmp_path / "budgeted"
    assert main(["probe", "--trainer", "sim", "--budget", f"{budget:.0f}s", "--out", str(out)]) == 0
    said = capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    kept = summary["time_budget"]
    assert kept["limit_s"] == pytest.approx(round(budget), abs=1)
    assert _walls(out) <= budget  # no probe started that the budget could not hold
    assert kept["left_out"], "half the time cannot hold the whole ladder"
    reasons = {s["stage"]: s["reason"] for s in summary["stages"]}
    assert all("your" in reasons[name] for name in kept["left_out"]), reasons
    assert "left out for your budget: " + ", ".join(kept["left_out"]) in " ".join(said.out.split())
    assert "(a longer --budget runs them)" in said.out and "allocation" not in said.out
    assert summary["partial"] is None  # it ended with an answer, not a stopped ladder


def test_the_sim_plans_a_budget_in_its_own_seconds_and_spends_what_it_said(
    tmp_path: Path, capsys
) -> None:
    from tuneup.cli import main

    out = tmp_path / "ten"
    assert main(["probe", "--trainer", "sim", "--budget", "10m", "--out", str(out)]) == 0
    said = capsys.readouterr().err
    kept = json.loads((out / "summary.json").read_text())["time_budget"]
    spent = _walls(out)
    assert spent <= 600  # simulated seconds: the budget is kept on the sim's own clock
    assert abs(kept["estimate_s"] - spent) <= 0.25 * spent, (kept, spent)
    assert "time budget 10 min:" in said


def test_a_budget_not_even_the_baseline_fits_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "short"
    done = tuneup("probe", "--trainer", "sim", "--budget", "30s", "--out", str(out))
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.count("\n") == 0 and "--budget 30 s is shorter than the baseline" in line
    assert "give --budget" in line and "allocation" not in line
    assert not (out / "journal.jsonl").exists()


def test_a_budget_that_is_not_a_duration_is_a_one_line_error(tmp_path: Path) -> None:
    done = tuneup("probe", "--trainer", "sim", "--budget", "3x", "--out", str(tmp_path / "b"))
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "'3x' is not a duration" in done.stderr and not (tmp_path / "b").exists()


def test_a_misspelt_stage_preset_or_trainer_gets_a_did_you_mean(tmp_path: Path) -> None:
    for args, hint in (
        (["--stages", "wrokers"], "did you mean 'workers'?"),
        (["--preset", "h20"], "did you mean 'h200'?"),
        (["--trainer", "smi"], "did you mean 'sim'?"),
    ):
        done = tuneup("probe", "--out", str(tmp_path / "x"), *["--trainer", "sim"], *args)
        assert done.returncode == 2 and hint in done.stderr, (args, done.stderr)


def test_a_simulated_session_is_named_as_one(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", "probe", "--trainer", "sim"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    (folder,) = (tmp_path / "tuneup-results").iterdir()
    assert folder.name.startswith("sim-cpu-smoke-")  # not a real cpu-smoke run's name


def test_on_a_terminal_a_replayed_probe_still_says_it_came_from_the_journal() -> None:
    import io

    from rich.console import Console

    from tuneup.commands.progress import RichReporter

    reporter = RichReporter()
    reporter.progress.stop()
    reporter.console = Console(file=io.StringIO(), force_terminal=True, width=200)
    probe = ProbeResult("baseline", {}, {}, Status.OK, full_sps=10.0, ranks=1)
    reporter.probe_done(probe, reused=True)
    reporter.close()
    assert "[from journal]" in reporter.console.file.getvalue()


def test_a_resume_under_a_budget_never_shortens_trials_past_a_quarter(tmp_path: Path) -> None:
    from tuneup.cli import main
    from tuneup.preset.load import load_preset

    out = tmp_path / "short"
    argv = ["probe", "--trainer", "sim", "--budget", "5m"]
    assert main([*argv, "--out", str(out)]) == 0
    full = load_preset("cpu-smoke").budget.trial_s
    first = json.loads((out / "summary.json").read_text())["time_budget"]["trial_s"]
    assert full / 4 - 1e-9 <= first <= full
    assert main([*argv, "--resume", str(out)]) == 0
    again = json.loads((out / "summary.json").read_text())["time_budget"]["trial_s"]
    # not a quarter of what it recorded, nor longer than it ran (the planner's floor on a
    # shortened budget: test_estimate.py)
    assert full / 4 - 1e-9 <= again <= first + 1e-9
