"""The config model as a user meets it: tutorial YAML, --set overrides, errors and help."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_bounded import alias_bomb
from tuneup.commands.train import resolve_config
from tuneup.config import TrainConfig

# A small file in the tutorial's format: named blocks, `<<:` merge keys chained
# two deep, the tutorial's spellings (`2.E-4`, `0.`, `!!bool`, `use_cache: None`).
TUTORIAL_YAML = """\
base: &base
  weight_init: {conv_init: 'normal', conv_scale: 0.02, conv_bias: 0}
  lambda_rho: 0
  full_scale: !!bool True
  global_batch_size: 64
  base_batch_size: 64
  Nsamples: 65536
  Nsamples_val: 8192
  num_epochs: 4
  amp_mode: 'none'
  enable_apex: !!bool False
  enable_benchy: !!bool False
  enable_jit: !!bool False
  enable_amp: !!bool False
  expdir: '/logs'
  lr_schedule: {scaling: 'none', start_lr: 2.E-4, end_lr: 0., warmup_steps: 128}
  data_loader_config: 'lowmem'
  box_size: [1024, 512]
  data_size: 64
  num_data_workers: 2
  N_out_channels: 5
  train_path: '/data/train.h5'
  val_path: '/data/val.h5'
  train_path_npy_data: '/data/train_nbody.npy'
  train_path_npy_label: '/data/train_hydro.npy'
  val_path_npy_data: '/data/val_nbody.npy'
  val_path_npy_label: '/data/val_hydro.npy'
  use_cache: None

short: &short
  <<: *base
  Nsamples: 512
  Nsamples_val: 64
  num_epochs: 2
  enable_amp: !!bool True
  data_loader_config: 'inmem'

short_opt:
  <<: *short
  enable_apex: !!bool True
  enable_jit: !!bool True
  num_data_workers: 8

bs256:
  <<: *base
  global_batch_size: 256
  full_scale: !!bool False
  lr_schedule: {scaling: 'sqrt', start_lr: 2.E-4, end_lr: 0., warmup_steps: 64}

typo:
  <<: *base
  lamda_rho: 0.1
"""


@pytest.fixture(scope="module")
def tutorial_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tutorial") / "UNet.yaml"
    path.write_text(TUTORIAL_YAML)
    return path


def _block(path: Path, name: str, *overrides: str) -> TrainConfig:
    """A block as `tuneup train --yaml_config PATH --config NAME --set ...` resolves it."""
    cfg, synth = resolve_config(name, path, list(overrides))
    assert synth is None  # a user's file never triggers the default synthetic box
    return cfg


# --- the tutorial's format loads unchanged -------------------------------------------


def test_base_block_loads_with_the_tutorial_spellings(tutorial_yaml):
    cfg = _block(tutorial_yaml, "base")
    assert cfg.lr_schedule == {
        "scaling": "none",
        "start_lr": 2e-4,
        "end_lr": 0.0,
        "warmup_steps": 128,
    }
    assert isinstance(cfg.lr_schedule["start_lr"], float)
    assert cfg.weight_init == {"conv_init": "normal", "conv_scale": 0.02, "conv_bias": 0.0}
    assert cfg.use_cache is None  # `None` in the tutorial's YAML means no cache
    assert cfg.full_scale is True and cfg.unet_levels == 6
    assert (cfg.global_batch_size, cfg.base_batch_size) == (64, 64)
    assert (cfg.Nsamples, cfg.Nsamples_val, cfg.num_epochs) == (65536, 8192, 4)
    assert cfg.box_size == [1024, 512]
    assert (cfg.data_size, cfg.N_out_channels, cfg.num_data_workers) == (64, 5, 2)
    assert cfg.data_loader_config == "lowmem"
    assert cfg.expdir == "/logs"
    assert (cfg.train_path, cfg.val_path) == ("/data/train.h5", "/data/val.h5")
    assert cfg.train_path_npy_data == "/data/train_nbody.npy"
    assert cfg.train_path_npy_label == "/data/train_hydro.npy"
    assert cfg.val_path_npy_data == "/data/val_nbody.npy"
    assert cfg.val_path_npy_label == "/data/val_hydro.npy"
    assert cfg.lambda_rho == 0.0
    # every enable_* switch off: the modern knobs keep their defaults
    assert (cfg.amp_mode, cfg.optimizer_impl, cfg.jit) == ("none", "foreach", "none")


def test_child_block_overrides_and_inherits(tutorial_yaml):
    cfg = _block(tutorial_yaml, "short")
    assert (cfg.Nsamples, cfg.Nsamples_val, cfg.num_epochs) == (512, 64, 2)
    assert cfg.data_loader_config == "inmem"
    assert cfg.train_path == "/data/train.h5"  # inherited from base
    assert cfg.lr_schedule["start_lr"] == 2e-4
    assert cfg.amp_mode == "fp16"  # enable_amp: True
    assert (cfg.optimizer_impl, cfg.jit) == ("foreach", "none")


def test_chained_merge_keys_reach_the_grandparent(tutorial_yaml):
    cfg = _block(tutorial_yaml, "short_opt")
    assert cfg.num_data_workers == 8  # its own
    assert cfg.Nsamples == 512 and cfg.data_loader_config == "inmem"  # from short
    assert cfg.box_size == [1024, 512] and cfg.expdir == "/logs"  # from base
    assert cfg.amp_mode == "fp16"
    assert cfg.optimizer_impl == "apex"
    assert cfg.jit == "script"


def test_child_block_replaces_the_lr_schedule(tutorial_yaml):
    cfg = _block(tutorial_yaml, "bs256")
    assert cfg.global_batch_size == 256
    assert cfg.lr_schedule["scaling"] == "sqrt" and cfg.lr_schedule["warmup_steps"] == 64
    assert cfg.full_scale is False and cfg.unet_levels == 5


# --- --set overrides -----------------------------------------------------------------


def test_set_is_applied_after_the_file(tutorial_yaml):
    cfg = _block(tutorial_yaml, "short", "num_epochs=7", "data_loader_config=lowmem")
    assert cfg.num_epochs == 7
    assert cfg.data_loader_config == "lowmem"
    assert cfg.Nsamples == 512  # untouched keys stay as the block has them


def test_nested_set_changes_one_key_and_keeps_the_blocks_others(tutorial_yaml):
    cfg = _block(tutorial_yaml, "bs256", "lr_schedule.start_lr=1e-3")
    assert cfg.lr_schedule == {
        "scaling": "sqrt",
        "start_lr": 1e-3,
        "end_lr": 0.0,
        "warmup_steps": 64,
    }


def test_nested_set_on_the_default_config_keeps_the_presets_schedule():
    default, _ = resolve_config(None, None, [])
    cfg, _ = resolve_config(None, None, ["lr_schedule.start_lr=1e-3"])
    assert cfg.lr_schedule["start_lr"] == 1e-3
    others = {k: v for k, v in cfg.lr_schedule.items() if k != "start_lr"}
    assert others == {k: v for k, v in default.lr_schedule.items() if k != "start_lr"}


@pytest.mark.parametrize(("text", "expected"), [("off", False), ("on", True), ("false", False)])
def test_tf32_accepts_on_and_off(tutorial_yaml, text, expected):
    assert _block(tutorial_yaml, "base", f"tf32={text}").tf32 is expected


def test_set_values_are_yaml(tutorial_yaml):
    cfg = _block(
        tutorial_yaml,
        "base",
        "box_size=[128, 64]",
        "train_path=null",
        "lambda_rho=0.5",
        "max_steps=20",
        "pin_memory=no",
    )
    assert cfg.box_size == [128, 64]
    assert cfg.train_path is None
    assert cfg.lambda_rho == 0.5
    assert cfg.max_steps == 20
    assert cfg.pin_memory is False


def test_later_set_wins(tutorial_yaml):
    cfg = _block(
        tutorial_yaml,
        "base",
        "amp_mode=bf16",
        "amp_mode=fp16",
        "lr_schedule.scaling=linear",
        "lr_schedule.scaling=sqrt",
        "Nsamples=100",
        "Nsamples=200",
    )
    assert cfg.amp_mode == "fp16"
    assert cfg.lr_schedule["scaling"] == "sqrt"
    assert cfg.Nsamples == 200


def test_set_modern_knob_wins_over_the_files_enable_alias(tutorial_yaml):
    cfg = _block(tutorial_yaml, "short_opt", "amp_mode=none", "optimizer_impl=foreach", "jit=none")
    assert (cfg.amp_mode, cfg.optimizer_impl, cfg.jit) == ("none", "foreach", "none")


# --- errors through the real CLI: one line, exit status 2 ------------------------------


@pytest.fixture(scope="module")
def cli_dir(tutorial_yaml: Path) -> Path:
    """A folder holding the tutorial file, a malformed one, a binary one and an alias bomb."""
    folder = tutorial_yaml.parent
    (folder / "bad.yaml").write_text("num_epochs: [1, 2\nNsamples: 3\n")
    (folder / "binary.yaml").write_bytes(b"\x89HDF\r\n\x1a\n\x00\x00\x00")
    (folder / "bomb.yaml").write_text(alias_bomb())
    return folder


def _tuneup(folder: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TUNEUP_CACHE_DIR=str(folder / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "tuneup", *args],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=timeout,
    )


def _assert_one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tuneup: error: ")
    return lines[0]


def alias_bomb_flow(levels: int = 9) -> str:
    """A one-line alias bomb, as `--set` takes it."""
    parts = ['&l0 ["x","x","x","x","x","x","x","x","x","x"]']
    parts += [f"&l{n} [" + ",".join([f"*l{n - 1}"] * 10) + "]" for n in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


CLI_ERRORS = {
    "unknown key, suggested": (["--set", "num_epoch=3"], ["'num_epoch'", "'num_epochs'"]),
    "unknown key in a block": (
        ["--yaml_config", "UNet.yaml", "--config", "typo"],
        ["'lamda_rho'", "'lambda_rho'", "UNet.yaml"],
    ),
    "wrong type": (["--set", "num_epochs=many"], ["'num_epochs'", "integer", "'many'"]),
    "wrong type of a switch": (["--set", "tf32=maybe"], ["'tf32'", "true or false"]),
    "outside its choices": (["--set", "amp_mode=fp8"], ["'amp_mode'", "none, fp16, bf16"]),
    "nested outside its choices": (
        ["--set", "lr_schedule.scaling=cubic"],
        ["lr_schedule.scaling", "'cubic'", "none", "sqrt", "linear"],
    ),
    "unknown nested key": (
        ["--set", "lr_schedule.start=1e-3"],
        ["'lr_schedule.start'", "scaling", "start_lr", "end_lr", "warmup_steps"],
    ),
    "missing block lists the blocks": (
        ["--yaml_config", "UNet.yaml", "--config", "long"],
        ["'long'", "base", "short", "short_opt", "bs256"],
    ),
    "named blocks without --yaml_config": (
        ["--config", "UNet.yaml"],
        ["--yaml_config", "--config NAME", "base", "short_opt"],
    ),
    "missing config file": (["--config", "nowhere.yaml"], ["nowhere.yaml", "not found"]),
    "malformed yaml": (["--config", "bad.yaml"], ["bad.yaml", "line 2"]),
    "a binary file": (["--config", "binary.yaml"], ["binary.yaml", "is a binary file, not text"]),
    "an alias bomb": (["--config", "bomb.yaml"], ["bomb.yaml", "alias bomb"]),
    "an alias bomb in --set": (
        ["--set", "box_size=" + alias_bomb_flow()],
        ["--set box_size", "alias bomb"],
    ),
    "a number that is not finite": (["--set", "lambda_rho=.nan"], ["'lambda_rho'", "finite"]),
}


@pytest.mark.parametrize("case", list(CLI_ERRORS))
def test_bad_config_is_one_line_naming_the_key(cli_dir, case):
    args, fragments = CLI_ERRORS[case]
    done = _tuneup(cli_dir, "train", *args)
    line = _assert_one_line_error(done)
    for fragment in fragments:
        assert fragment in line
    assert done.stdout == ""  # nothing started


@pytest.fixture(scope="module")
def missing_data_run(cli_dir: Path) -> subprocess.CompletedProcess[str]:
    """The default config pointed at a file that does not exist."""
    return _tuneup(
        cli_dir,
        "train",
        "--set",
        "train_path=/nonexistent/train.h5",
        "--set",
        "val_path=/nonexistent/val.h5",
        timeout=120,
    )


def test_missing_data_file_names_the_path_and_the_fix(missing_data_run):
    done = missing_data_run
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tuneup: error: ")
    assert "/nonexistent/train.h5" in last and "tuneup data synth" in last
    assert "Time taken for epoch" not in done.stdout  # failed before training


def test_missing_data_file_is_the_only_line(missing_data_run):
    _assert_one_line_error(missing_data_run)


# --- help is rendered from the config model ------------------------------------------


def _rendered(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def test_train_help_lists_every_knob_with_its_default(cli_dir):
    done = _tuneup(cli_dir, "train", "--help")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        listed = [line for line in lines if line.strip().startswith(f"{f.name}=")]
        assert len(listed) == 1, f"{f.name} is not listed once in `tuneup train --help`"
        assert f.metadata["help"] in listed[0]
        value = getattr(defaults, f.name)
        if not isinstance(value, (dict, list)):
            assert listed[0].strip().startswith(f"{f.name}={_rendered(value)}")
    text = done.stdout
    assert "num_data_workers=2 " in text
    assert "amp_mode=none [none|fp16|bf16]" in text
    assert "data_loader_config=lowmem [lowmem|inmem|synthetic|dali-lowmem|gpu]" in text
    assert "start_lr: 0.0002" in text and "warmup_steps: 128" in text
    assert "--set" in text


def test_a_value_whose_first_use_costs_extra_says_so() -> None:
    from tuneup.config import first_uses

    assert first_uses({"jit": "compile"}) == {("jit", "compile"): 60.0}
    assert first_uses({"jit": "none", "amp_mode": "bf16"}) == {}
