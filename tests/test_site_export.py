"""The sbatch and env exports follow the site's own batch habits, as the presets give them.

Jean Zay reserves each GPU's share of the node's cores with --hint=nomultithread,
a QOS and --gres; the tutorial's Perlmutter jobs take 32 CPUs a task, -C gpu,
NCCL_NET_GDR_LEVEL=PHB and a reversed GPU order. The measured loader workers go
into the config, never into the CPU reservation.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.test_export import sbatch_options as options
from tuneup.bundled import cache_dir
from tuneup.commands.export import run_export_command
from tuneup.config import load_config
from tuneup.errors import UsageError
from tuneup.export.render import render
from tuneup.preset.load import load_preset, parse_preset
from tuneup.tuning.results.journal import ResultsDir

TUNED = {"num_data_workers": 2, "amp_mode": "bf16", "local_batch_size": 64}


def exports(text: str) -> dict[str, str]:
    return dict(re.findall(r"^export ([A-Z_0-9]+)=(\S+)$", text, flags=re.M))


def embedded_config(text: str, tmp_path: Path) -> Any:
    body = text.split("<<'TUNEUP_CONFIG'\n", 1)[1].split("\nTUNEUP_CONFIG\n", 1)[0]
    path = tmp_path / "embedded.yaml"
    path.write_text(body)
    return load_config(path)


def bash_parses(text: str, tmp_path: Path) -> None:
    if shutil.which("bash"):
        script = tmp_path / "job.sbatch"
        script.write_text(text)
        subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


def test_jean_zay_a100_reserves_each_gpus_share_not_the_workers(tmp_path: Path) -> None:
    hints = load_preset("jean-zay-a100").hints
    text = render("sbatch", {**TUNED, "device": "cuda"}, hints=hints)
    found = options(text)
    # 2 workers were best, but Jean Zay allots memory per reserved core: 8 per GPU
    assert found["cpus-per-task"] == "8" and found["ntasks-per-node"] == "8"
    assert found["hint"] == "nomultithread" and found["qos"] == "qos_gpu_a100-t3"
    assert found["constraint"] == "a100" and found["gres"] == "gpu:8"
    assert "gpus-per-node" not in found  # the site's way of asking, not both
    assert "# module load arch/a100" in text  # its software lines, as a template
    assert "OMP_NUM_THREADS" not in exports(text)  # no count tuned: torch's own
    assert "# export OMP_NUM_THREADS=6" in text  # 8 CPUs less the 2 loader workers, offered
    assert "srun --ntasks-per-node=8 --cpus-per-task=8 tuneup train" in text
    assert embedded_config(text, tmp_path).num_data_workers == 2  # the measured workers
    bash_parses(text, tmp_path)


def test_jean_zay_v100_reserves_ten_cores_a_gpu() -> None:
    hints = load_preset("jean-zay-v100").hints
    found = options(render("sbatch", {**TUNED, "device": "cuda"}, hints=hints))
    assert (found["cpus-per-task"], found["gres"]) == ("10", "gpu:4")
    assert found["hint"] == "nomultithread"


def test_perlmutter_orders_its_gpus_and_sets_nccl_as_the_tutorial(tmp_path: Path) -> None:
    hints = load_preset("perlmutter-a100-4gpu").hints
    text = render("sbatch", {**TUNED, "device": "cuda"}, hints=hints)
    found = options(text)
    assert found["cpus-per-task"] == "32" and found["constraint"] == "gpu"
    assert found["gpus-per-node"] == "4" and found["qos"] == "regular"
    env = exports(text)
    assert env["CUDA_VISIBLE_DEVICES"] == "3,2,1,0" and env["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert "# export NCCL_NET_GDR_LEVEL" not in text  # set, so not offered as a placeholder
    assert "# export NCCL_SOCKET_IFNAME=<interface>" in text  # the ones it does not set
    # the env export carries the same site habits
    assert exports(render("env", {**TUNED, "device": "cuda"}, hints=hints)) == {
        "CUDA_VISIBLE_DEVICES": "3,2,1,0",
        "NCCL_NET_GDR_LEVEL": "PHB",
    }
    bash_parses(text, tmp_path)


def test_bad_site_hints_are_listed_in_the_preset_and_refused_by_the_export() -> None:
    hints = {
        "gpu_request": "gpus",
        "cuda_visible_devices": "3;2",
        "env": {"1NCCL": "x"},
        "setup": 3,
        "hint": True,
    }
    with pytest.raises(UsageError) as info:
        parse_preset({"probe": {"hints": hints}}, "site.yaml")
    text = str(info.value)
    for expected in (
        "probe.hints.gpu_request: must be one of gpus-per-node, gres",
        'probe.hints.cuda_visible_devices: must be a list of GPUs like "3,2,1,0"',
        "probe.hints.env: '1NCCL' is not a variable name",
        "probe.hints.setup: must be a line of shell or a list of lines",
        "probe.hints.hint: must be text",
    ):
        assert expected in text
    for key, value in hints.items():
        with pytest.raises(UsageError, match=f"export hint {key}"):
            render("sbatch", {}, hints={key: value})


def session(tmp_path: Path, values: dict[str, Any], **extra: Any) -> Path:
    results = ResultsDir(tmp_path / "run")
    results.create({"preset": "p", "trainer": "unet", "hints": {"gpus_per_node": 1}, **extra})
    results.write_summary({"recommendation": {"values": values}})
    return results.path


def test_the_batch_script_of_a_synthetic_session_trains_on_the_users_data(
    tmp_path: Path,
) -> None:
    synthetic = str(cache_dir() / "synthetic" / "train.h5")
    values = {**TUNED, "Nsamples_val": 0, "box_size": [256, 128], "train_path": synthetic,
              "val_path": synthetic}  # fmt: skip
    folder = session(tmp_path, values)
    for fmt in ("sbatch", "tuneup"):
        assert run_export_command(folder, fmt, tmp_path / fmt) == 0
    text = (tmp_path / "sbatch").read_text()
    cfg = embedded_config(text, tmp_path)
    assert cfg.Nsamples_val > 0  # a real run validates; the probes did not
    assert cfg.box_size == [1024, 512]  # the tutorial's data, not the probe's synthetic box
    assert (cfg.train_path, cfg.val_path) == ("<your train.h5>", "<your val.h5>")
    assert "<your train.h5>" in (tmp_path / "tuneup").read_text()


def test_the_batch_script_reads_the_box_of_the_users_files(
    tmp_path: Path, synthetic_data: Any
) -> None:
    values = {**TUNED, "Nsamples_val": 0, "box_size": [256, 128],
              "train_path": str(synthetic_data.train_path),
              "val_path": str(synthetic_data.val_path)}  # fmt: skip
    folder = session(tmp_path, values)
    assert run_export_command(folder, "sbatch", tmp_path / "job") == 0
    cfg = embedded_config((tmp_path / "job").read_text(), tmp_path)
    assert cfg.box_size == [32, 16]  # the conftest's boxes, read from the files
    assert cfg.train_path == str(synthetic_data.train_path)
