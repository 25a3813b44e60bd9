"""Exports of a session that tuned the user's own script are that script's command line.

A stand-in training script (its own flags and defaults, faster with 2 workers, bf16
and TF32 off) is tuned by a real `tuneup probe --trainer command`; every export must
then run the script exactly as the confirmation did.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tuneup.cli import main
from tuneup.commands.export import run_export_command
from tuneup.errors import UsageError
from tuneup.tuning.results.journal import ResultsDir, export_hint, where_it_stands

# Its own default is 1 worker, where tuneup's default is 2: a tuned value of 2 must
# still be passed. Throughput peaks at 2 workers, x1.5 with bf16 (read from a variable).
SCRIPT = """
import argparse, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--num_epochs", type=int, default=3)
parser.add_argument("--num_data_workers", type=int, default=1)
args = parser.parse_args()
print("argv:", " ".join(sys.argv[1:]))
print("amp:", os.environ.get("TRAIN_AMP", "unset"))
rate = 10.0 * min(args.num_data_workers, 2)
rate *= 1.5 if os.environ.get("TRAIN_AMP") == "bf16" else 1.0
for epoch in range(1, args.num_epochs + 1):
    sps = rate / 3 if epoch == 1 else rate
    print(f"INFO - Time taken for epoch {epoch} is {64 / sps:.3f} sec, avg {sps} samples/sec",
          file=sys.stderr)
    print(f"INFO -   Avg train loss={0.1 / epoch:.6f}", file=sys.stderr)
"""

SECTION = {
    "flags": {"num_data_workers": "--num_data_workers {value}"},
    "env": {"amp_mode": "TRAIN_AMP"},
}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished command session: workers and AMP tuned on the stand-in script."""
    root = tmp_path_factory.mktemp("command")
    work = root / "my project"  # a space: every export must quote it
    work.mkdir()
    (work / "train.py").write_text(textwrap.dedent(SCRIPT).lstrip(), encoding="utf-8")
    preset = {
        "name": "my-script",
        "train": {"num_data_workers": 1, "device": "cuda"},
        "probe": {
            "stages": ["workers", "amp"],
            "budget": {"limit_s": 30},
            "hints": {"gpus_per_node": 4, "cpus_per_task": 16, "hint": "nomultithread"},
        },
        "command": {
            "run": [sys.executable, "train.py", "--num_epochs", "3"],
            "cwd": str(work),
            **SECTION,
        },
    }
    path = root / "my-script.yaml"
    path.write_text(yaml.safe_dump(preset), encoding="utf-8")
    out = root / "run"
    code = main(["probe", "--trainer", "command", "--preset", str(path), "--out", str(out)])
    assert code == 0
    return out


def export(folder: Path, fmt: str, tmp_path: Path) -> str:
    target = tmp_path / f"export.{fmt}"
    assert run_export_command(folder, fmt, target) == 0
    return target.read_text()


def test_the_session_tuned_the_script_and_recorded_its_command(tuned: Path) -> None:
    summary = ResultsDir(tuned).summary()
    values = summary.recommendation.values
    assert values["num_data_workers"] == 2 and values["amp_mode"] == "bf16"
    session = ResultsDir(tuned).session()
    assert session["command"]["flags"] == SECTION["flags"]


def test_flags_are_the_scripts_own_for_every_tuned_value(tuned: Path, tmp_path: Path) -> None:
    # 2 workers is tuneup's default but not the script's (1): it is passed all the same
    assert shlex.split(export(tuned, "flags", tmp_path)) == ["--num_data_workers", "2"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_command_line_reruns_the_script_as_the_confirmation_ran_it(
    tuned: Path, tmp_path: Path
) -> None:
    line = export(tuned, "command", tmp_path)
    assert line.count("\n") == 1 and line.startswith("cd ") and "TRAIN_AMP=bf16" in line
    env = {k: v for k, v in os.environ.items() if k != "TRAIN_AMP"}
    ran = subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, timeout=60, env=env, check=True
    )
    assert "argv: --num_epochs 3 --num_data_workers 2" in ran.stdout
    assert "amp: bf16" in ran.stdout
    # what it prints is what the recommendation measured: 10 x 2 workers x 1.5 (bf16)
    recommended = ResultsDir(tuned).summary().recommendation.full_sps
    assert f"avg {recommended} samples/sec" in ran.stderr and recommended == 30.0


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_env_file_sets_the_tuned_variables(tuned: Path, tmp_path: Path) -> None:
    path = tmp_path / "env.sh"
    path.write_text(export(tuned, "env", tmp_path))
    out = subprocess.run(
        ["bash", "-c", f'source "{path}"; echo "${{TRAIN_AMP:-unset}}"'],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.strip() == "bf16"


FAKE_SRUN = """#!/bin/sh
{ echo "ARGS $*"; echo "PWD $(pwd)"; echo "AMP ${TRAIN_AMP:-unset}"; } \
  > "$SLURM_SUBMIT_DIR/srun.log"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_batch_script_runs_the_tuned_command_in_its_folder(tuned: Path, tmp_path: Path) -> None:
    text = export(tuned, "sbatch", tmp_path)
    assert "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --gpus-per-node=4" in text
    assert "#SBATCH --cpus-per-task=64" in text  # the site's 16 per GPU x the task's 4 GPUs
    assert "#SBATCH --hint=nomultithread" in text
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path)}
    subprocess.run(["bash", str(script)], check=True, timeout=30, env=env)
    args, pwd, amp = (tmp_path / "srun.log").read_text().splitlines()
    cwd = ResultsDir(tuned).session()["command"]["cwd"]
    assert args == (
        f"ARGS --ntasks-per-node=1 --cpus-per-task=64 {sys.executable} train.py "
        "--num_epochs 3 --num_data_workers 2"
    )
    assert pwd == f"PWD {cwd}" and amp == "AMP bf16"


def test_tuneup_configs_are_refused_for_a_scripts_session(tuned: Path, tmp_path: Path) -> None:
    for fmt in ("yaml", "tuneup"):
        with pytest.raises(UsageError, match=r"tuned your own command.*--format command"):
            run_export_command(tuned, fmt, tmp_path / "x")


def test_an_older_session_finds_its_command_in_its_preset(tuned: Path, tmp_path: Path) -> None:
    older = tmp_path / "older"
    shutil.copytree(tuned, older)
    session = json.loads((older / "session.json").read_text())
    del session["command"]  # sessions before the section was recorded
    (older / "session.json").write_text(json.dumps(session))
    assert export(older, "flags", tmp_path) == export(tuned, "flags", tmp_path)


def test_the_command_format_is_only_for_a_scripts_session(tmp_path: Path) -> None:
    from tests.test_export import DDP_WON, results_folder

    folder, _ = results_folder(tmp_path, DDP_WON)
    with pytest.raises(UsageError, match="--format command is for a session that tuned your"):
        run_export_command(folder, "command", tmp_path / "x")


def with_summary(tuned: Path, folder: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of the tuned session whose summary.json `edit` changed."""
    shutil.copytree(tuned, folder)
    summary = json.loads((folder / "summary.json").read_text())
    edit(summary)
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def test_a_session_that_changed_nothing_exports_the_bare_command(tuned: Path, tmp_path: Path):
    # nothing adopted, and no knob set by the preset: the recommendation is the script as is
    plain = with_summary(tuned, tmp_path / "plain", lambda s: s["recommendation"].update(values={}))
    assert shlex.split(export(plain, "flags", tmp_path)) == []
    line = shlex.split(export(plain, "command", tmp_path).splitlines()[-1])
    assert line[-3:] == ["train.py", "--num_epochs", "3"]


def test_a_summary_without_a_recommendation_is_rebuilt_from_the_journal(
    tuned: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # valid JSON of the wrong shape is damaged: the journal rebuilds it, and it is said
    broken = with_summary(tuned, tmp_path / "broken", lambda s: s.pop("recommendation"))
    assert export(broken, "flags", tmp_path) == export(tuned, "flags", tmp_path)
    assert "summary.json was damaged (it holds no recommended values)" in capsys.readouterr().err
    # with no journal to rebuild it from, one clear line
    gone = with_summary(tuned, tmp_path / "gone", lambda s: s.pop("recommendation"))
    (gone / "journal.jsonl").unlink()
    with pytest.raises(UsageError) as caught:
        run_export_command(gone, "flags", tmp_path / "x")
    assert "\n" not in str(caught.value)


def test_the_hints_name_a_format_this_session_can_export(tuned: Path) -> None:
    """Every 'export with' line of a session that tuned your script names its own command
    format: tuneup's yaml is refused for it."""
    assert export_hint(tuned).endswith("--format command")
    assert any("--format command" in line for line in where_it_stands(tuned))
    assert not any("--format yaml" in line for line in where_it_stands(tuned))


def test_the_ladder_runs_only_the_stages_whose_knobs_the_section_maps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default ladder on a section that maps two knobs: every other stage is named as
    unmapped before the first probe, and no probe is spent finding it out."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(textwrap.dedent(SCRIPT).lstrip(), encoding="utf-8")
    preset = {
        "name": "two-knobs",
        "train": {"num_data_workers": 1, "device": "cuda"},
        "probe": {"budget": {"limit_s": 30}},
        "command": {"run": ["python", "train.py", "--num_epochs", "3"], "cwd": str(work)} | SECTION,
    }
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(preset), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["probe", "--trainer", "command", "--preset", str(path), "--out", str(out)]) == 0
    said = capsys.readouterr().err
    line = next(x for x in said.splitlines() if "not mapped by the command section" in x)
    assert "data" in line and "batch_size" in line and "workers" not in line.split(":")[-1]
    stages = {json.loads(x)["stage"] for x in (out / "journal.jsonl").read_text().splitlines()}
    assert stages <= {"baseline", "workers", "amp", "confirm"}
