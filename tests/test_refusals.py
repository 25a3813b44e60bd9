"""What `tuneup train` refuses, a probe session refuses before its first probe: one line,
exit 2, in about a second, never two baseline timeouts and a word about the node."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuneup.hardware.types import MachineInfo
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.session.stage_plans import stage_plans
from tuneup.unet.synth import SynthResult

# The tester's preset: a batch eight times the data set (cpu-smoke's model otherwise).
BIG_BATCH = """\
name: bigbatch
synthetic_data: {box: 64, val_box: 32, seed: 0}
train:
  device: cpu
  levels: 4
  width: 8
  data_size: 16
  box_size: [64, 32]
  global_batch_size: 4096
  base_batch_size: 8
  Nsamples: 512
  Nsamples_val: 0
  data_loader_config: inmem
  num_data_workers: 1
"""


def _tuneup(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneup", *args],
        capture_output=True,
        text=True,
        timeout=300,  # a loaded machine; the refusal itself takes about a second
        cwd=cwd,
    )


@pytest.mark.parametrize("trainer", ["unet", "sim"])
def test_a_batch_larger_than_the_data_set_is_refused_before_any_probe(
    tmp_path: Path, trainer: str
) -> None:
    preset = tmp_path / "big.yaml"
    preset.write_text(BIG_BATCH)
    out = tmp_path / "run"

    started = time.monotonic()
    done = _tuneup(
        "probe", "--preset", str(preset), "--trainer", trainer, "--out", str(out), cwd=tmp_path
    )
    took = time.monotonic() - started

    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert "Nsamples 512" in line and "4096" in line
    assert "raise Nsamples to at least 4096" in line and str(preset) in line
    assert not out.exists()  # nothing made, nothing run
    assert took < 60  # two baseline timeouts were 240 s; on an idle machine this is ~1 s


def test_tuneup_train_refuses_the_same_config_with_the_same_words(tmp_path: Path) -> None:
    preset = tmp_path / "big.yaml"
    preset.write_text(BIG_BATCH)
    probe = _tuneup("probe", "--preset", str(preset), "--trainer", "sim", cwd=tmp_path)
    config = tmp_path / "big_train.yaml"
    # the same knobs as a config file, on data that needs no file
    knobs = BIG_BATCH.split("train:\n", 1)[1].replace("  ", "").replace("inmem", "synthetic")
    config.write_text(knobs)
    train = _tuneup("train", "--config", str(config), "--set", "max_steps=1", cwd=tmp_path)

    assert train.returncode == 2, train.stderr
    said = train.stderr.strip().splitlines()[-1]
    reason = said.split("error: ", 1)[1]
    assert reason.startswith("Nsamples 512 gives no full batch of 4096")
    assert probe.stderr.strip().endswith(reason)


def test_a_crop_larger_than_the_users_box_is_refused_naming_the_file(
    tmp_path: Path, synthetic_data: SynthResult
) -> None:
    preset = tmp_path / "crop.yaml"
    preset.write_text(
        "name: crop\n"
        "train: {device: cpu, levels: 4, width: 8, data_size: 64, global_batch_size: 4,\n"
        "        Nsamples: 64, data_loader_config: inmem, num_data_workers: 0,\n"
        f"        train_path: {synthetic_data.train_path}, val_path: {synthetic_data.val_path}}}\n"
    )
    done = _tuneup("probe", "--preset", str(preset), "--out", str(tmp_path / "run"), cwd=tmp_path)

    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "crop 64 is larger than the box side 32" in line and "at most 32" in line
    assert not (tmp_path / "run").exists()


def test_candidates_the_trainer_refuses_are_not_tried_and_say_why() -> None:
    unet = load_trainer("unet")
    base = {
        "device": "cpu",
        "levels": 4,
        "width": 8,
        "data_size": 16,
        "box_size": [64, 32],
        "global_batch_size": 256,
        "Nsamples": 300,
        "data_loader_config": "synthetic",
    }
    (plan,) = stage_plans(("batch_size",), MachineInfo(), base, refusal=unet.refusal)

    assert [c.values["global_batch_size"] for c in plan.candidates] == [128]
    (said,) = plan.not_tried
    assert "global_batch_size 512" in said and "Nsamples 300 gives no full batch of 512" in said


def test_the_unet_trainer_refuses_what_its_ranks_and_crops_cannot_run() -> None:
    unet = load_trainer("unet")
    base = {
        "global_batch_size": 2,
        "levels": 4,
        "Nsamples": 64,
        "data_loader_config": "synthetic",
        "box_size": [32, 32],
        "data_size": 64,
    }
    assert "smaller than the 4 ranks" in str(unet.refusal(base, 4))
    assert "crop 64 is larger than the box side 32 of the synthetic data" in str(
        unet.refusal(base, 1)
    )
    assert unet.refusal({**base, "data_size": 32}, 1) is None  # 32 fits the box and 4 levels
    assert load_trainer("command").refusal(base, 4) is None  # a command's own script decides
