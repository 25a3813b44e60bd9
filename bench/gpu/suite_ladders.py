"""The suite's two ladders: the default one whole (`speed`, the claim a window tests first)
and a short one under --budget (`ladder`, what is left; no longer in the default run).

Pure but for the files each step's command wrote: `parse` reads them and returns an
Outcome; the driver (suite.py) owns the processes, the clock and the monitor beside
the whole ladder.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import suite_repo_root  # noqa: F401  (the checkout's root on sys.path: twin/ is not installed)
import yaml
from suite_common import last_json_line, read_json
from suite_predict import PREDICTED_PROBES, compare, compared_text
from suite_types import Context, Finished, Outcome
from suite_types import ended as _ended

from twin.against import probe_by_probe

# ---- the whole ladder (speed, first) ------------------------------------------------------


def speed_command(ctx: Context) -> list[str]:
    """The default single-GPU ladder (the preset tuneup picks here), timed by
    bench/ladder_speed.py: wall time, probes, where the time went, the estimate's error."""
    command = [
        ctx.python,
        str(ctx.root / "bench" / "ladder_speed.py"),
        "--after",
        str(ctx.root),
        "--rounds",
        "1",
        "--keep",
        str(ctx.out / "speed"),
        "--out",
        str(ctx.out / "speed.json"),
    ]
    if ctx.cpu:  # the dry run checks the step's plumbing on the ladder step's tiny preset
        command += ["--preset", str(ctx.out / "speed-preset.yaml")]
    return command


def speed_prepare(ctx: Context) -> str | None:
    shutil.rmtree(ctx.out / "speed", ignore_errors=True)
    (ctx.out / "speed.json").unlink(missing_ok=True)
    if ctx.cpu:
        preset = ladder_preset(ctx)
        preset["name"] = "gpu-suite-speed-dry-run"
        (ctx.out / "speed-preset.yaml").write_text(yaml.safe_dump(preset, sort_keys=False))
    return None


def trial_share_text(run: dict[str, Any]) -> str:
    """The share of the ladder in timed trials: as journaled, else as rebuilt from rates."""
    share = run.get("trial_share")
    if share is None:
        share = run.get("trial_share_rebuilt")
    return "?%" if share is None else f"{100 * share:.0f}%"


def speed_parse(ctx: Context, done: Finished) -> Outcome:
    """The whole ladder's wall time and probes, whether it beat 10 minutes, and the GPU
    twin's prediction (prediction.json, written before it ran) beside them."""
    document = read_json(ctx.out / "speed.json") or {}
    runs = document.get("runs") or []
    prediction = read_json(ctx.out / "prediction.json")
    if not runs:  # stopped at its limit: what the journal holds so far
        sessions = sorted((ctx.out / "speed").glob("*"))
        probes = [p for d in sessions for p in journal_probes(d / "journal.jsonl")]
        ran = next((s for d in sessions if (s := read_json(d / "session.json"))), None) or {}
        versus = compare(
            done.seconds, len(probes), ran.get("preset"), prediction, ctx.mode, finished=False
        )
        figures = {
            "probes_so_far": len(probes),
            "probe_wall_s": round(sum(p.get("wall_s") or 0 for p in probes), 1),
            "timed_s": round(sum(p.get("timed_s") or 0 for p in probes), 1),
            "beat_10_min": versus["beat_10_min"],
            "versus_prediction": versus,
            "probe_by_probe": against_prediction(ctx.out, probes),
        }
        key = f"{ran.get('preset') or 'the ladder'}: stopped; {compared_text(versus)}"
        return Outcome("fail", f"the ladder did not finish: {_ended(done)}", figures, key)
    run = runs[0]
    versus = compare(run["wall_s"], run["probes"], run.get("preset"), prediction, ctx.mode)
    figures = {**run, "beat_10_min": versus["beat_10_min"], "versus_prediction": versus}
    ran = [
        p
        for d in sorted((ctx.out / "speed").glob("*"))
        for p in journal_probes(d / "journal.jsonl")
    ]
    figures["probe_by_probe"] = against_prediction(ctx.out, ran)
    figures["profile"] = profile_figures(sorted((ctx.out / "speed").glob("*")))
    key = f"{run['preset']}: {compared_text(versus)}; {trial_share_text(run)} in timed trials"
    if done.rc != 0:
        return Outcome("fail", _ended(done), figures, key)
    if not ctx.cpu and versus["beat_10_min"] is False:
        why = f"the whole ladder took {run['wall_s'] / 60:.1f} min: not under 10 minutes"
        return Outcome("fail", why, figures, key)
    return Outcome("pass", str(run.get("headline") or ""), figures, key)


def against_prediction(out: Path, ran: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The probes the ladder ran beside the twin's of the same stage and values, as its
    prediction priced them before (finished or not: which probes, which part missed);
    None where the twin kept no probes."""
    predicted = journal_probes(out / PREDICTED_PROBES)
    if not predicted or not ran:
        return None
    return probe_by_probe(predicted, ran)


PROFILE_KEYS = ("step_s", "parts_s", "gpu", "tflops", "mfu", "trace")


def profile_figures(sessions: list[Path]) -> dict[str, Any] | None:
    """Where the baseline's and the recommendation's steps went (summary.json's `profile`,
    issue 33's H200 evidence): their parts, GPU busy and idle split, TFLOP/s and MFU, the
    findings and what is left; None where the ladder took no profile."""
    for folder in sessions:
        block = (read_json(folder / "summary.json") or {}).get("profile")
        if not isinstance(block, dict):
            continue
        sides = {
            side: {k: v for k, v in (block.get(side) or {}).items() if k in PROFILE_KEYS}
            for side in ("baseline", "recommendation")
        }
        said = [f.get("text") for f in block.get("findings") or [] if isinstance(f, dict)]
        return {**sides, "findings": said, "left": block.get("left")}
    return None


# ---- the short ladder (only with --steps ladder) ------------------------------------------

LADDER_STAGES = "tf32"  # the CPU dry run's ladder


def ladder_preset(ctx: Context) -> dict[str, Any]:
    """The CPU dry run's ladder: cpu-smoke with a tiny model and a short budget."""
    preset = yaml.safe_load((ctx.root / "presets" / "cpu-smoke.yaml").read_text())
    preset["name"] = "gpu-suite-cpu-smoke"
    preset["description"] = "cpu-smoke with a short budget, written by bench/gpu/suite.py"
    preset["synthetic_data"] = {"box": 32, "val_box": 16, "seed": 0}
    preset["train"].update(
        {
            "levels": 2,
            "width": 4,
            "data_size": 8,
            "box_size": [32, 16],
            "global_batch_size": 4,
            "base_batch_size": 4,
            "Nsamples": 4096,
            "Nsamples_val": 0,
            "num_epochs": 1,
            "num_data_workers": 1,  # a DataLoader child, for the orphans step to look for
        }
    )
    budget = {"trial_s": 0.02, "min_trials": 2, "max_trials": 3, "warmup_cap_s": 0.3}
    preset["probe"]["budget"] = {**budget, "loss_steps": 3, "limit_s": 60}
    preset["probe"]["stages"] = LADDER_STAGES.split(",")
    return preset


def ladder_prepare(ctx: Context) -> str | None:
    shutil.rmtree(ctx.out / "ladder", ignore_errors=True)
    if ctx.cpu:
        preset = yaml.safe_dump(ladder_preset(ctx), sort_keys=False)
        (ctx.out / "ladder-preset.yaml").write_text(preset)
    return None


LADDER_MARGIN_S = 30.0  # the ladder's start, its summary and the step's own end


def ladder_command(ctx: Context) -> list[str]:
    """On a GPU the default ladder (the preset tuneup picks) under `--budget`, the time this
    run has left; on the CPU a tiny preset's short ladder."""
    budget = []
    if ctx.limit_s is not None:
        budget = ["--budget", f"{max(30.0, ctx.limit_s - LADDER_MARGIN_S):.0f}s"]
    chosen = (
        ["--preset", str(ctx.out / "ladder-preset.yaml"), "--stages", LADDER_STAGES]
        if ctx.cpu
        else []
    )
    return ctx.tuneup("probe", *chosen, *budget, "--out", str(ctx.out / "ladder"), "--json")


TELEMETRY = ("gpu_util_mean", "power_mean_w", "energy_j_per_sample", "gpu_mem_used_mb")


def journal_probes(path: Path) -> list[dict[str, Any]]:
    """The probe results in a session's journal.jsonl (lines with a stage and a status)."""
    import json

    probes = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "stage" in entry and "status" in entry:
            probes.append(entry)
    return probes


def ladder_parse(ctx: Context, done: Finished) -> Outcome:
    probes = journal_probes(ctx.out / "ladder" / "journal.jsonl")
    ok = [p for p in probes if p.get("status") == "ok"]
    with_telemetry = [p for p in ok if any(p.get(k) is not None for k in TELEMETRY)]
    statuses: dict[str, int] = {}
    for probe in probes:
        statuses[probe["status"]] = statuses.get(probe["status"], 0) + 1
    result = last_json_line(done.stdout) or {}
    summary = result.get("summary") or {}
    recommendation = summary.get("recommendation") or {}
    telemetry = {
        k: [p.get(k) for p in ok if p.get(k) is not None]
        for k in ("gpu_util_mean", "power_mean_w", "throttled")
    }
    budget = summary.get("time_budget") or {}
    wall = round(sum(float(p.get("wall_s") or 0.0) for p in probes), 1)
    figures = {
        "probes": len(probes),
        "probe_wall_s": wall,
        "time_budget": budget,
        "statuses": statuses,
        "headline": recommendation.get("headline"),
        "changes": recommendation.get("changes"),
        "speedup": summary.get("speedup"),
        "probes_with_telemetry": len(with_telemetry),
        "telemetry": telemetry,
        "stages": summary.get("stages"),
        "results_dir": result.get("results_dir") or str(ctx.out / "ladder"),
    }
    key = f"{len(probes)} probes ({len(ok)} ok) in {wall:.0f}s"
    if budget.get("limit_s"):
        key += f" of a {budget['limit_s']:.0f}s budget"
    key += f", telemetry on {len(with_telemetry)}"
    if recommendation.get("changes"):
        key += "; " + ", ".join(f"{k}={v}" for k, v in recommendation["changes"].items())
    elif recommendation:
        key += "; keep the baseline"
    if done.rc != 0 or done.timed_out:
        return Outcome("fail", _ended(done), figures, key)
    if not ok:
        return Outcome("fail", "no probe ran ok", figures, key)
    if not recommendation:
        return Outcome("fail", "no recommendation in the --json output", figures, key)
    if ctx.cpu:
        return Outcome("pass", "CPU dry run: no GPU telemetry expected", figures, key)
    if not with_telemetry:
        return Outcome("fail", "no probe result carries GPU telemetry (util/power)", figures, key)
    return Outcome("pass", str(recommendation.get("headline") or ""), figures, key)
