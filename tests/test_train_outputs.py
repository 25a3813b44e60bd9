"""`tuneup train` with expdir set: the tutorial's out.log and TensorBoard scalars.

Runs are in-process (`tuneup.cli.main`) on the conftest's tiny CPU config,
about a second each; one Ctrl-C test starts a real child process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneup.cli import main
from tuneup.config import build_config
from tuneup.unet.distributed import DistEnv
from tuneup.unet.expdir import (
    CONFIG_RULE,
    END_RULE,
    config_name,
    experiment_dir,
)
from tuneup.unet.runtime import TF32_ENV
from tuneup.unet.scalars import Scalar, scalars_for

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - root - INFO - ")
EPOCH_LINE = re.compile(r"^Time taken for epoch (\d+) is [\d.]+ sec, avg [\d.]+ samples/sec$")
TUTORIAL_TAGS = {"Loss/train", "Learning Rate", "Avg iters per sec", "Samples per sec"}
STEPS_PER_EPOCH = 4  # the conftest's tiny run: Nsamples 16 / global batch 4


@dataclass
class Run:
    code: int
    out: str
    err: str


@contextlib.contextmanager
def _torch_state_kept() -> Iterator[None]:
    """Put back the process-wide torch switches a run sets (as conftest's restore_torch_state)."""
    import torch

    precision = torch.get_float32_matmul_precision()
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    benchmark = torch.backends.cudnn.benchmark
    rng = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
        torch.backends.cudnn.benchmark = benchmark
        torch.random.set_rng_state(rng)


def _train(*args: str) -> Run:
    """`tuneup train ARGS` in this process, its stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as mp,
        _torch_state_kept(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        mp.setenv(TF32_ENV, "1")  # recorded, so the command's change is undone
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_STEP_NUM_TASKS"):
            mp.delenv(name, raising=False)
        code = main(["train", *args])
    return Run(code, out.getvalue(), err.getvalue())


def _tutorial_yaml(folder: Path, block: dict[str, Any], name: str = "tiny") -> Path:
    """A YAML of named blocks in the tutorial's format."""
    path = folder / "UNet.yaml"
    path.write_text(yaml.safe_dump({name: block}))
    return path


def _messages(out_log: Path) -> list[str]:
    """The lines of out.log without their timestamp prefix (all of them must carry one)."""
    lines = out_log.read_text().splitlines()
    assert lines and all(STAMP.match(line) for line in lines), lines[:3]
    return [STAMP.sub("", line) for line in lines]


@pytest.fixture(scope="module")
def expdir_run(
    tmp_path_factory: pytest.TempPathFactory, tiny_run: dict[str, Any]
) -> tuple[Run, Path, Path, Path]:
    """Two tiny epochs of block 'tiny' with expdir set, run number 07, per-step metrics."""
    root = tmp_path_factory.mktemp("expdir")
    yaml_path = _tutorial_yaml(root, {**tiny_run, "num_epochs": 2})
    metrics = root / "metrics.jsonl"
    run = _train(
        "--yaml_config", str(yaml_path), "--config", "tiny", "--run_num", "07",
        "--set", f"expdir={root / 'exp'}", "--set", "log_every=1", "--metrics", str(metrics),
    )  # fmt: skip
    return run, root / "exp" / "tiny" / "1GPU" / "07", yaml_path, metrics


def test_out_log_holds_the_configuration_dump_then_the_tutorials_lines(expdir_run) -> None:
    run, folder, yaml_path, _ = expdir_run
    assert run.code == 0, run.err
    messages = _messages(folder / "out.log")
    end = messages.index(END_RULE)
    dump = messages[: end + 1]
    assert dump[:3] == [
        CONFIG_RULE,
        f"Configuration file: {yaml_path}",
        "Configuration name: tiny",
    ]
    assert "num_epochs 2" in dump and f"expdir {folder.parents[2]}" in dump
    assert "data_loader_config inmem" in dump and "device cpu" in dump
    rest = messages[end + 1 :]
    epochs = [m for m in map(EPOCH_LINE.match, rest) if m]
    assert [int(m.group(1)) for m in epochs] == [1, 2]
    assert sum(line.startswith("  Avg train loss=") for line in rest) == 2
    assert sum(line.startswith("  Avg val loss=") for line in rest) == 2
    assert "Starting Training Loop..." in rest


def test_out_log_is_the_console_text(expdir_run) -> None:
    run, folder, _, _ = expdir_run
    assert _messages(folder / "out.log") == run.out.splitlines()


def test_stderr_says_where_the_logs_go_and_run_num_is_used(expdir_run) -> None:
    run, folder, _, _ = expdir_run
    expected = (
        f"tuneup: logging to {folder / 'out.log'} and TensorBoard scalars to {folder / 'logs'}"
    )
    assert expected in run.err.splitlines()
    assert "ignores" not in run.err


def test_tensorboard_holds_the_tutorials_scalars_per_epoch(expdir_run) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, folder, _, metrics = expdir_run
    events = EventAccumulator(str(folder / "logs"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == TUTORIAL_TAGS | {"Loss/valid"}
    ends = [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]  # x = the global step at each epoch's end
    series = {tag: events.Scalars(tag) for tag in TUTORIAL_TAGS | {"Loss/valid"}}
    assert {tag: [e.step for e in points] for tag, points in series.items()} == {
        tag: ends for tag in series
    }
    printed = [float(line.split("=")[1]) for line in run.out.splitlines() if "Avg train" in line]
    assert [e.value for e in series["Loss/train"]] == pytest.approx(printed, abs=1e-6)
    val = [float(line.split("=")[1]) for line in run.out.splitlines() if "Avg val" in line]
    assert [e.value for e in series["Loss/valid"]] == pytest.approx(val, abs=1e-6)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    step_lr = {r["step"]: r["lr"] for r in records if r["kind"] == "train"}
    assert [e.value for e in series["Learning Rate"]] == pytest.approx([step_lr[s] for s in ends])
    rates = [e.value for e in series["Samples per sec"]]
    iters = [e.value for e in series["Avg iters per sec"]]
    assert all(r > 0 for r in rates)
    assert [r / i for r, i in zip(rates, iters, strict=True)] == pytest.approx([4.0, 4.0], rel=1e-3)


def test_metrics_jsonl_still_has_every_step(expdir_run) -> None:
    _, _, _, metrics = expdir_run
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(1, 9))
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [r["step"] for r in epochs] == [4, 8] and all(r["lr"] is not None for r in epochs)


def test_record_to_scalars_mapping() -> None:
    epoch = {"kind": "epoch", "epoch": 2, "step": 8, "loss": 0.5, "samples_per_s": 40.0,
             "iters_per_s": 10.0, "lr": 1e-4, "seconds": 0.4}  # fmt: skip
    assert scalars_for(epoch) == [
        Scalar("Loss/train", 0.5, 8),
        Scalar("Learning Rate", 1e-4, 8),
        Scalar("Avg iters per sec", 10.0, 8),
        Scalar("Samples per sec", 40.0, 8),
    ]
    val = {"kind": "val", "epoch": 2, "step": 8, "loss": 0.25, "seconds": 0.1}
    assert scalars_for(val) == [Scalar("Loss/valid", 0.25, 8)]
    window = {"kind": "train", "epoch": 1, "step": 3, "loss": 0.7, "lr": 1e-4,
              "samples_per_s": 40.0, "elapsed_s": 1.0}  # fmt: skip
    assert scalars_for(window) == [], "the tutorial plots epochs, not windows"
    no_lr = {**epoch, "lr": None}  # an epoch that ran no step has no learning rate
    assert [s.tag for s in scalars_for(no_lr)] == [
        "Loss/train",
        "Avg iters per sec",
        "Samples per sec",
    ]


def test_without_expdir_nothing_is_written(
    tmp_path: Path, tiny_run: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    yaml_path = _tutorial_yaml(tmp_path, tiny_run)
    monkeypatch.chdir(tmp_path)
    run = _train("--yaml_config", str(yaml_path), "--config", "tiny", "--run_num", "07")
    assert run.code == 0, run.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["UNet.yaml"]
    assert "logging to" not in run.err
    assert CONFIG_RULE not in run.out, "the configuration dump comes with an out.log only"
    assert any(EPOCH_LINE.match(line) for line in run.out.splitlines())


def test_config_file_stem_names_the_folder_and_run_num_defaults_to_00(
    tmp_path: Path, tiny_run: dict[str, Any]
) -> None:
    config = tmp_path / "my-run.yaml"  # tuneup's flat YAML: no block name
    config.write_text(yaml.safe_dump({**tiny_run, "expdir": str(tmp_path / "exp")}))
    run = _train("--config", str(config))
    assert run.code == 0, run.err
    messages = _messages(tmp_path / "exp" / "my-run" / "1GPU" / "00" / "out.log")
    assert messages[1:3] == [f"Configuration file: {config}", "Configuration name: my-run"]


def test_without_tensorboard_the_run_says_so_and_still_logs(
    tmp_path: Path, tiny_run: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    yaml_path = _tutorial_yaml(tmp_path, tiny_run)
    run = _train(
        "--yaml_config", str(yaml_path), "--config", "tiny", "--set", f"expdir={tmp_path / 'x'}"
    )
    assert run.code == 0, run.err
    folder = tmp_path / "x" / "tiny" / "1GPU" / "00"
    assert (
        f"tuneup: logging to {folder / 'out.log'}; "
        "TensorBoard scalars: not written (pip install tensorboard)"
    ) in run.err.splitlines()
    assert any(EPOCH_LINE.match(m) for m in _messages(folder / "out.log"))
    assert not list((folder / "logs").glob("events.out.tfevents.*"))


def test_an_expdir_that_cannot_be_made_is_one_line(
    tmp_path: Path, tiny_run: dict[str, Any]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    yaml_path = _tutorial_yaml(tmp_path, tiny_run)
    run = _train("--yaml_config", str(yaml_path), "--config", "tiny",
                 "--set", f"expdir={blocker / 'exp'}")  # fmt: skip
    assert run.code == 2
    assert run.err.count("\n") == 1 and "Traceback" not in run.err
    assert f"cannot use {blocker / 'exp' / 'tiny' / '1GPU' / '00' / 'logs'}" in run.err
    assert f"{blocker} is a file, not a folder" in run.err
    assert run.err.rstrip().endswith("give expdir another path")
    assert run.out == "", "nothing trains when the logs cannot be written"


def test_a_run_num_that_is_not_a_folder_name_is_refused(
    tmp_path: Path, tiny_run: dict[str, Any]
) -> None:
    yaml_path = _tutorial_yaml(tmp_path, tiny_run)
    run = _train("--yaml_config", str(yaml_path), "--config", "tiny", "--run_num", "../x",
                 "--set", f"expdir={tmp_path / 'exp'}")  # fmt: skip
    assert run.code == 2 and "--run_num '../x'" in run.err
    assert not (tmp_path / "exp").exists() and not (tmp_path / "x").exists()


def test_only_rank_0_writes_and_the_folder_counts_the_ranks(tmp_path: Path, capsys) -> None:
    from contextlib import ExitStack

    from tuneup.commands.train import _open_outputs

    cfg = build_config({"expdir": str(tmp_path / "exp")})
    with ExitStack() as closing:
        run_log, sinks = _open_outputs(cfg, DistEnv(rank=1, world_size=2), "short", "01", closing)
        run_log.write("a line from rank 1")
        assert sinks == []
    assert not (tmp_path / "exp").exists()
    with ExitStack() as closing:
        run_log, _ = _open_outputs(cfg, DistEnv(rank=0, world_size=2), "short", "01", closing)
        run_log.write("a line from rank 0")
    folder = experiment_dir(str(tmp_path / "exp"), "short", 2, "01")
    assert folder == tmp_path / "exp" / "short" / "2GPU" / "01"
    assert _messages(folder / "out.log") == ["a line from rank 0"]
    assert str(folder / "out.log") in capsys.readouterr().err
    assert config_name("short", Path("config/UNet.yaml"), "cpu-smoke") == "short"
    assert config_name(None, None, "cpu-smoke") == "cpu-smoke"


def test_ctrl_c_keeps_out_log_and_scalars_complete(
    tmp_path: Path, tiny_run: dict[str, Any]
) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    yaml_path = _tutorial_yaml(tmp_path, {**tiny_run, "num_epochs": 100000, "Nsamples_val": 0})
    folder = tmp_path / "exp" / "tiny" / "1GPU" / "03"
    child = subprocess.Popen(
        [sys.executable, "-m", "tuneup", "train", "--yaml_config", str(yaml_path),
         "--config", "tiny", "--run_num", "03", "--set", f"expdir={tmp_path / 'exp'}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        log = folder / "out.log"
        if log.exists() and "Time taken for epoch 2 " in log.read_text():
            break
        time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    messages = _messages(folder / "out.log")
    stopped = re.fullmatch(r"Stopped by Ctrl-C after (\d+) steps", messages[-1])
    assert stopped, messages[-3:]
    events = EventAccumulator(str(folder / "logs"))
    events.Reload()
    steps = [e.step for e in events.Scalars("Loss/train")]
    epochs = sum(bool(EPOCH_LINE.match(m)) for m in messages)
    assert len(steps) == epochs >= 2 and steps[-1] == int(stopped.group(1))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a disk that is full)")
def test_a_metrics_write_the_disk_refuses_names_the_file_and_its_folder() -> None:
    from tuneup.paths import StorageFault
    from tuneup.unet.metrics import MetricsWriter

    writer = MetricsWriter(Path("/dev/full"))
    with pytest.raises(StorageFault) as said:
        writer.write({"kind": "train", "step": 1, "loss": 0.5})
    line = str(said.value)
    assert line.startswith("cannot write the metrics file /dev/full (no space left on the device)")
    assert "free some space in /dev" in line and "--metrics" in line
    writer.close()  # nothing left to flush: closing does not fail a second time
