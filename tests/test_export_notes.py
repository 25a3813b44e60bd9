"""Exports say what they leave out: each tuned knob the format cannot carry, with how to
apply it, on stderr and in the file where the format takes comments; a session with
nothing to recommend exports its baseline and says so."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tuneup.commands.export import run_export_command
from tuneup.config import load_config
from tuneup.export.notes import export_notes
from tuneup.tuning.results.journal import ResultsDir

BASE = {"num_data_workers": 2}


def session(tmp_path: Path, changes: dict[str, Any], headline: str) -> Path:
    """A finished session's folder as tuneup writes it, recommending `changes`."""
    results = ResultsDir(tmp_path / "run")
    results.create({"preset": "cpu-smoke", "trainer": "unet", "search": "staged"})
    results.write_summary(
        {
            "search": "staged",
            "baseline": {"values": BASE, "full_sps": 10.0},
            "recommendation": {
                "values": {**BASE, **changes},
                "changes": changes,
                "path": list(changes),
                "headline": headline,
            },
            "stages": [],
        }
    )
    return results.path


def export(folder: Path, fmt: str, capsys: pytest.CaptureFixture[str], to: Path | None = None):
    assert run_export_command(folder, fmt, to) == 0
    said = capsys.readouterr()
    notes = [line for line in said.err.splitlines() if line.startswith("tuneup: note: ")]
    return said.out, notes


COMPILED = {"amp_mode": "bf16", "jit": "compile"}
HEADLINE = "recommendation: bf16 + torch.compile: 1.13x faster"


def test_flags_name_torch_compile_and_how_to_apply_it_on_stderr_only(tmp_path, capsys) -> None:
    folder = session(tmp_path, COMPILED, HEADLINE)
    out, notes = export(folder, "flags", capsys)
    assert shlex.split(out)[:2] == ["--amp_mode", "bf16"] and "#" not in out  # still one line
    (note,) = notes
    assert "jit=compile is left out" in note and "model = torch.compile(model)" in note
    assert "amp_mode" not in note  # the flags carry it


def test_the_yaml_block_says_so_in_a_comment_and_still_loads(tmp_path, capsys) -> None:
    folder = session(tmp_path, COMPILED, HEADLINE)
    target = tmp_path / "tuned.yaml"
    _, notes = export(folder, "yaml", capsys, target)
    text = target.read_text()
    assert notes and all(f"# {n}\n" in text for n in notes)
    assert "jit=compile" in text.splitlines()[0] and "torch.compile(model)" in text
    assert load_config(target, "tuned").jit == "compile"  # a comment, nothing else changed


def test_tuneup_train_formats_carry_every_knob_and_say_nothing(tmp_path, capsys) -> None:
    folder = session(tmp_path, COMPILED, HEADLINE)
    for fmt in ("tuneup", "sbatch"):
        _, notes = export(folder, fmt, capsys, tmp_path / f"x.{fmt}")
        assert notes == []


def test_the_env_file_names_the_config_keys_it_cannot_hold(tmp_path, capsys) -> None:
    folder = session(tmp_path, {**COMPILED, "tf32": False, "intra_op_threads": 1}, HEADLINE)
    target = tmp_path / "env.sh"
    _, notes = export(folder, "env", capsys, target)
    (note,) = notes
    assert "config keys, not environment, left out of this file: amp_mode, jit;" in note
    assert "tf32" not in note  # NVIDIA_TF32_OVERRIDE=0 is in the file
    assert "export OMP_NUM_THREADS=1\n" in target.read_text()  # the threads stage's pick
    assert note in target.read_text()
    done = subprocess.run(
        ["bash", "-c", f"source {target} && echo $NVIDIA_TF32_OVERRIDE $OMP_NUM_THREADS"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "0 1"  # the comment breaks nothing


@pytest.mark.parametrize(
    ("headline", "said"),
    [
        ("no recommendation: nothing could be compared with the baseline", "has no recommendation"),
        ("recommendation: keep the baseline (no variant beat it)", "keeping the baseline"),
    ],
)
def test_a_session_without_a_recommendation_exports_the_baseline_and_says_so(
    tmp_path, capsys, headline: str, said: str
) -> None:
    folder = session(tmp_path, {}, headline)
    target = tmp_path / "tuned.yaml"
    _, notes = export(folder, "yaml", capsys, target)
    (note,) = notes
    assert said in note and "baseline configuration, unchanged" in note
    assert note in target.read_text()
    out, notes = export(folder, "flags", capsys)
    assert len(notes) == 1 and "#" not in out


@pytest.mark.parametrize(
    ("knob", "value", "how"),
    [
        ("optimizer_impl", "fused", "fused=True"),
        ("channels_last", True, "channels_last_3d"),
        ("data_loader_config", "gpu", "no gpu loader"),
        ("tf32", False, "NVIDIA_TF32_OVERRIDE=0"),
        ("cuda_graphs", True, "CUDA graph"),
        ("intra_op_threads", 1, "OMP_NUM_THREADS=1"),
    ],
)
def test_each_knob_the_tutorial_lacks_is_named_with_how(knob: str, value: Any, how: str) -> None:
    (note,) = export_notes("yaml", {knob: value}, HEADLINE, folder="runs/a")
    assert note.startswith(f"{knob}=") and how in note


def test_what_the_tutorial_takes_is_not_named() -> None:
    carried = {
        "amp_mode": "fp16",
        "optimizer_impl": "apex",
        "jit": "script",
        "num_data_workers": 8,
        "data_loader_config": "dali-lowmem",
        "bucket_cap_mb": 100,
        "global_batch_size": 128,
    }
    assert export_notes("yaml", carried, HEADLINE) == []
    # on the command line alone, the learning-rate schedule rides in the YAML block
    (note,) = export_notes("flags", {**carried, "lr_schedule": {"scaling": "sqrt"}}, HEADLINE)
    assert note.startswith("not on the command line, only in the YAML block: lr_schedule;")
