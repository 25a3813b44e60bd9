"""Exports the tutorial's own train.py takes as they are: its parser, its YAML reader.

`sc22_parser` holds exactly the SC22 train.py's flags (from the workload's
facts), `sc21_parser` the SC21 ones; `yparams_block` reads a block as its
YParams does (YAML with anchors and merge keys, one named block).
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneup.cli import _train_overrides, build_parser
from tuneup.commands.export import run_export_command
from tuneup.config import load_config
from tuneup.errors import UsageError
from tuneup.export.render import render
from tuneup.export.tutorial import TutorialRun
from tuneup.tuning.results.journal import ResultsDir
from tuneup.unet.synth import SynthResult

LOADERS = ["synthetic", "inmem", "lowmem", "dali-lowmem"]


def _common(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--run_num", default="00", type=str)
    parser.add_argument("--yaml_config", default="./config/UNet.yaml", type=str)
    parser.add_argument("--config", default="base", type=str)
    parser.add_argument("--enable_apex", action="store_true")
    parser.add_argument("--enable_jit", action="store_true")
    parser.add_argument("--enable_benchy", action="store_true")
    parser.add_argument("--enable_manual_profiling", action="store_true")
    parser.add_argument("--data_loader_config", default=None, type=str, choices=LOADERS)
    parser.add_argument("--local_batch_size", default=None, type=int)
    parser.add_argument("--num_epochs", default=None, type=int)
    parser.add_argument("--num_data_workers", default=None, type=int)
    parser.add_argument("--bucket_cap_mb", default=25, type=int)
    parser.add_argument("--disable_broadcast_buffers", action="store_true")
    parser.add_argument("--noddp", action="store_true")
    return parser


def _strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    def error(message: str) -> None:
        raise AssertionError(f"the tutorial's train.py refuses it: {message}")

    parser.error = error  # type: ignore[method-assign]
    return parser


def sc22_parser() -> argparse.ArgumentParser:
    parser = _common(argparse.ArgumentParser())
    parser.add_argument("--amp_mode", default="none", choices=["none", "fp16", "bf16"])
    return _strict(parser)


def sc21_parser() -> argparse.ArgumentParser:
    parser = _common(argparse.ArgumentParser())
    parser.add_argument("--enable_amp", action="store_true")
    return _strict(parser)


def yparams_block(text: str, name: str) -> dict[str, Any]:
    return yaml.safe_load(text)[name]


TUNED = {
    "amp_mode": "bf16",
    "optimizer_impl": "fused",
    "jit": "compile",
    "channels_last": True,
    "data_loader_config": "dali-lowmem",
    "num_data_workers": 8,
    "local_batch_size": 128,
    "bucket_cap_mb": 100,
    "broadcast_buffers": False,
    "Nsamples_val": 0,
}


def test_a_4_rank_export_runs_in_sc22_and_in_tuneup_train_alike(tmp_path: Path) -> None:
    run = TutorialRun(world_size=4, box_size=(1024, 512))
    line = render("flags", TUNED, run=run)
    block_text = render("yaml", TUNED, run=run)

    command = ["--yaml_config", "tuned.yaml", "--config", "tuned", *shlex.split(line)]
    args = sc22_parser().parse_args(command)
    assert (args.amp_mode, args.local_batch_size, args.bucket_cap_mb) == ("bf16", 128, 100)
    assert args.data_loader_config == "dali-lowmem" and args.disable_broadcast_buffers

    block = yparams_block(block_text, "tuned")
    assert block["global_batch_size"] == 128 * 4  # what the tuned ranks trained together
    assert block["Nsamples_val"] > 0 and block["expdir"]
    assert block["box_size"] == [1024, 512] and block["full_scale"] is True
    assert block["amp_mode"] == "bf16" and block["data_size"] == 64
    for own in ("channels_last", "jit", "optimizer_impl"):  # tuneup's knobs, said so
        assert f"{own}:" in block_text
    assert "channels_last: true  # tuneup only: the tutorial does not apply it" in block_text

    path = tmp_path / "tuned.yaml"
    path.write_text(block_text)
    parsed = build_parser().parse_args(["train", *(str(path) if t == "tuned.yaml" else t
                                                   for t in command)])  # fmt: skip
    cfg = load_config(path, "tuned", _train_overrides(parsed))
    assert (cfg.amp_mode, cfg.optimizer_impl, cfg.jit, cfg.channels_last) == (
        "bf16", "fused", "compile", True,
    )  # fmt: skip
    assert cfg.local_batch_size == 128 and cfg.bucket_cap_mb == 100
    assert cfg.gradient_as_bucket_view is True  # as the tutorial's flag does


def test_a_one_gpu_export_of_a_synthetic_session_names_the_tutorials_data() -> None:
    run = TutorialRun(world_size=1, synthetic=True)
    values = {**TUNED, "local_batch_size": None, "global_batch_size": 64, "levels": 5,
              "train_path": "/cache/tuneup/synth/train.h5"}  # fmt: skip
    block = yparams_block(render("yaml", values, run=run), "tuned")
    assert block["box_size"] == [1024, 512] and block["train_path"] is None
    assert block["full_scale"] is False  # the 5-level model the session measured
    assert block["global_batch_size"] == 64
    args = sc22_parser().parse_args(shlex.split(render("flags", values, run=run)))
    assert args.local_batch_size == 64


def test_sc21_spelling_on_request_and_bf16_refused_there() -> None:
    fp16 = {"amp_mode": "fp16", "optimizer_impl": "apex", "jit": "script"}
    args = sc21_parser().parse_args(shlex.split(render("flags", fp16, edition="sc21")))
    assert args.enable_amp and args.enable_apex and args.enable_jit
    with pytest.raises(AssertionError, match="refuses"):
        sc22_parser().parse_args(["--enable_amp"])  # the old spelling SC22 rejects
    with pytest.raises(UsageError, match="no bf16"):
        render("flags", {"amp_mode": "bf16"}, edition="sc21")


def test_tuneup_train_takes_the_tutorials_whole_command_line(tmp_path: Path, capsys) -> None:
    line = ("--run_num 3 --yaml_config cfg.yaml --config short --amp_mode fp16 --enable_apex "
            "--enable_jit --enable_benchy --enable_manual_profiling --data_loader_config inmem "
            "--local_batch_size 8 --num_epochs 2 --num_data_workers 4 --bucket_cap_mb 50 "
            "--disable_broadcast_buffers --noddp")  # fmt: skip
    sc22_parser().parse_args(shlex.split(line))  # the same line the tutorial takes
    args = build_parser().parse_args(["train", *shlex.split(line)])
    overrides = dict(o.split("=", 1) for o in _train_overrides(args))
    assert overrides["amp_mode"] == "fp16" and overrides["local_batch_size"] == "8"
    assert overrides["gradient_as_bucket_view"] == "true" and overrides["noddp"] == "true"


def test_export_reads_the_box_sides_from_the_users_data(
    tmp_path: Path, synthetic_data: SynthResult, capsys
) -> None:
    folder = tmp_path / "session"
    results = ResultsDir(folder)
    results.create({"preset": "p", "trainer": "unet", "launch": {"world_size": 2, "nodes": 1}})
    values = {"train_path": str(synthetic_data.train_path),
              "val_path": str(synthetic_data.val_path), "global_batch_size": 16}  # fmt: skip
    results.write_summary({"recommendation": {"values": values}})
    assert run_export_command(folder, "yaml", None) == 0
    block = yparams_block(capsys.readouterr().out, "tuned")
    assert block["box_size"] == [32, 16]  # the conftest's boxes, not the tutorial's
    assert block["train_path"] == str(synthetic_data.train_path)
    assert block["global_batch_size"] == 16
    assert json.loads(json.dumps(block))  # plain values only


def test_a_block_name_alone_reads_the_tutorials_config_file_as_its_train_py_does(
    tmp_path: Path, tiny_run: dict[str, Any]
) -> None:
    import subprocess
    import sys

    def train(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tuneup", "train", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    missing = train("--config", "tiny")
    assert missing.returncode == 2 and "no config/UNet.yaml here" in missing.stderr
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "UNet.yaml").write_text(yaml.safe_dump({"tiny": tiny_run}))
    done = train("--config", "tiny", "--run_num", "7", "--num_epochs", "1")
    assert done.returncode == 0, done.stderr
    assert "--run_num" not in done.stderr  # used for the log folder (none: no expdir here)
    assert "Time taken for epoch 1" in done.stdout + done.stderr
