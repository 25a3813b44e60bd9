"""The GPU twin's prediction of the whole ladder, written down before the ladder runs,
and the measured ladder set beside it.

A device window exists to test a claim: the default ladder, whole, finishes in
under 10 minutes, about as long as the GPU twin (bench/gpu_twin.py, a recorded
GPU replayed on a CPU) says. A prediction made after the measurement proves
nothing, so the suite asks the twin first and keeps its answer in
prediction.json, with the command, the time and the commit; the speed step's
record then sets the measured wall time and probe count beside it.

`predict` runs the twin (a subprocess); everything else takes values and
returns values.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import suite_repo_root  # noqa: F401  (the checkout's root on sys.path: twin/ is not installed)
from suite_common import last_json_line, read_json
from suite_types import ROOT, last_line

from tuneup.preset.autopick import GpuModel, Pick, auto_pick
from twin.evidence import session_folders

TWIN_SCRIPT = ROOT / "bench" / "gpu_twin.py"
PREDICT_TIMEOUT_S = 120.0
FIGURES = ("wall_s", "wall_s_low", "wall_s_high", "probes")  # what the twin's --json gives
CLAIM_S = 600.0  # issue 32's target: the default ladder, whole, in under 10 minutes
PREDICTED_PROBES = "prediction-probes.jsonl"  # the twin's probes, kept beside prediction.json


def evidence_gpu(folder: Path) -> str | None:
    """The GPU an evidence folder's tuneup session ran on (its session.json's machine)."""
    for found in session_folders(folder):  # where the twin reads them
        machine = (read_json(found / "session.json") or {}).get("machine") or {}
        names = machine.get("gpu_names") or []
        if names:
            return str(names[0])
    return None


def picked_preset(
    mode: str,
    env_info: Mapping[str, Any],
    inventory: list[GpuModel],
    recorded_gpu: str | None,
) -> Pick:
    """The preset of the ladder the speed step runs, as `tuneup probe` picks it.

    On a GPU, tuneup's own rule on the GPUs NVML shows (`inventory`). The dry run
    rehearses the GPU window, so it asks for the ladder tuneup would pick on the
    evidence's GPU (`recorded_gpu`): its tiny CPU ladder is not what the twin replays.
    """
    cpus = int(env_info.get("cpus_usable") or env_info.get("cpus") or 1)
    if mode == "gpu":
        return auto_pick(inventory, cpus, cuda=bool(env_info.get("cuda_available")))
    gpus = [GpuModel(recorded_gpu)] if recorded_gpu else []
    pick = auto_pick(gpus, cpus, cuda=True)
    return Pick(pick.name, f"the dry run asks for the GPU window's ladder: {pick.reason}")


def twin_command(
    python: str,
    evidence: Path,
    preset: str,
    journals: Sequence[Path] = (),
    keep: Path | None = None,
) -> list[str]:
    """The twin's prediction of `preset`'s default ladder, as one JSON object (from the
    evidence folder and the ladder `journals` that exist), its probes kept in `keep` (the
    speed step sets the real ladder's beside them, probe by probe)."""
    found = [arg for j in journals if j.is_file() for arg in ("--journal-evidence", str(j))]
    kept = ["--journal", str(keep)] if keep is not None else []
    return [
        python,
        str(TWIN_SCRIPT),
        "--evidence",
        str(evidence),
        *found,
        "--preset",
        preset,
        *kept,
        "--json",
    ]


def prediction_document(
    command: str,
    pick: Pick,
    when: str,
    git: Mapping[str, Any],
    seconds: float,
    rc: int | None = None,
    stdout: str = "",
    stderr: str = "",
    error: str | None = None,
) -> dict[str, Any]:
    """prediction.json: the twin's JSON object as it printed it, or why there is none, with
    what ran it, when and at which commit."""
    prediction = None if error else last_json_line(stdout)
    if error is None and rc != 0:
        error = f"exited {rc}: {last_line(stderr, 'rror') or last_line(stderr) or '-'}"
    elif error is None and prediction is None:
        error = f"printed no JSON object: {last_line(stdout) or last_line(stderr) or '-'}"
    return {
        "what": "the GPU twin's prediction of the whole default ladder, made before it ran",
        "command": command,
        "preset": pick.name,
        "preset_why": pick.reason,
        "time": when,
        "git": dict(git),
        "seconds": round(seconds, 2),
        "rc": rc,
        "error": error,
        "prediction": prediction if error is None else None,
    }


def predict(argv: list[str], command: str, pick: Pick, git: Mapping[str, Any]) -> dict[str, Any]:
    """Ask the twin (tolerating its absence, failure or silence); the prediction.json document."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    began = time.monotonic()
    if not TWIN_SCRIPT.is_file():
        error = f"{TWIN_SCRIPT.relative_to(ROOT)} is missing: no prediction"
        return prediction_document(command, pick, when, git, 0.0, error=error)
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PREDICT_TIMEOUT_S, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        error = f"the twin did not answer within {PREDICT_TIMEOUT_S:.0f}s"
        return prediction_document(command, pick, when, git, time.monotonic() - began, error=error)
    except OSError as exc:
        error = f"the twin could not start: {exc}"
        return prediction_document(command, pick, when, git, time.monotonic() - began, error=error)
    seconds = time.monotonic() - began
    return prediction_document(
        command, pick, when, git, seconds, done.returncode, done.stdout, done.stderr
    )


def predicted(document: Mapping[str, Any] | None) -> dict[str, float]:
    """The figures a prediction gives (wall_s, wall_s_low, wall_s_high, probes), where it
    gives them."""
    prediction = (document or {}).get("prediction") or {}
    return {
        k: float(prediction[k])
        for k in FIGURES
        if isinstance(prediction.get(k), (int, float)) and not isinstance(prediction[k], bool)
    }


def brief(document: Mapping[str, Any] | None) -> dict[str, Any]:
    """What results.json keeps of prediction.json (the twin's object stays in the file)."""
    if not document:
        return {}
    kept = ("command", "preset", "time", "git", "seconds", "error")
    return {**{k: document.get(k) for k in kept}, "figures": predicted(document)}


def _error(guess: float | None, truth: float | None) -> float | None:
    """How far a prediction was off, relative to what was measured (negative: too low)."""
    if guess is None or not truth:
        return None
    return round((guess - truth) / truth, 3)


def compare(
    measured_wall_s: float | None,
    measured_probes: int | None,
    ran_preset: str | None,
    document: Mapping[str, Any] | None,
    mode: str,
    finished: bool = True,
) -> dict[str, Any]:
    """The measured ladder beside the prediction made before it.

    A ladder stopped before its end gives its time so far: a lower bound, so only a
    time past 10 minutes decides the claim then.
    """
    guess = predicted(document)
    low, high = guess.get("wall_s_low"), guess.get("wall_s_high")
    wall = measured_wall_s
    beat: bool | None = None
    if wall is not None and (finished or wall >= CLAIM_S):
        beat = wall < CLAIM_S
    same = None
    if document and document.get("preset") and ran_preset:
        same = document["preset"] == ran_preset
    notes = []
    comparable = bool(guess.get("wall_s")) and finished and mode == "gpu" and same is not False
    if not document:
        notes.append("no prediction.json: the twin was not asked")
    elif document.get("error"):
        notes.append(f"no prediction: {document['error']}")
    if not finished:
        notes.append("the ladder did not finish: its time so far is a lower bound")
    if mode == "cpu":
        notes.append("dry run: a tiny CPU ladder beside the GPU's prediction (the plumbing only)")
    elif same is False:
        notes.append(f"the twin predicted {(document or {}).get('preset')} but {ran_preset} ran")
    return {
        "measured_wall_s": None if wall is None else round(wall, 1),
        "measured_probes": measured_probes,
        "finished": finished,
        "beat_10_min": beat,
        "predicted_wall_s": guess.get("wall_s"),
        "predicted_wall_s_low": low,
        "predicted_wall_s_high": high,
        "predicted_probes": guess.get("probes"),
        "wall_error": _error(guess.get("wall_s"), wall) if finished else None,
        "probes_error": _error(guess.get("probes"), measured_probes) if finished else None,
        "within_range": (low <= wall <= high)
        if finished and wall is not None and low is not None and high is not None
        else None,
        "predicted_preset": (document or {}).get("preset"),
        "ran_preset": ran_preset,
        "same_preset": same,
        "comparable": comparable,
        "note": "; ".join(notes),
    }


def compared_text(c: Mapping[str, Any]) -> str:
    """The comparison in a few words: "7.8 min vs 7.5 predicted (-4%), 41 vs 39 probes"."""
    wall, guess = c.get("measured_wall_s"), c.get("predicted_wall_s")
    if wall is None:
        return "no wall time measured"
    parts = [f"{wall / 60:.1f} min"]
    if guess is not None:
        error = c.get("wall_error")
        said = f" ({100 * error:+.0f}%)" if error is not None else ""
        if not c.get("comparable"):
            said = " (not comparable)" if c.get("finished") else ""
        parts[0] += f" vs {guess / 60:.1f} predicted{said}"
    if c.get("measured_probes") is not None:
        probes = f"{c['measured_probes']} probes"
        if c.get("predicted_probes") is not None:
            probes = f"{c['measured_probes']} vs {c['predicted_probes']:.0f} probes"
        parts.append(probes)
    beat = c.get("beat_10_min")
    parts.append({True: "under 10 min", False: "NOT under 10 min", None: "10 min: unknown"}[beat])
    return ", ".join(parts)
