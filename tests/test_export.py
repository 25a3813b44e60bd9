"""Exports: each format reads back as the configuration it was rendered from."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneup.bundled import read_bundled_preset
from tuneup.cli import _train_overrides, build_parser
from tuneup.commands.export import run_export_command
from tuneup.config import build_config, knob_names, load_config
from tuneup.errors import UsageError
from tuneup.export.render import FORMATS, render
from tuneup.export.tutorial import TUTORIAL_KEYS
from tuneup.tuning.results.journal import ResultsDir
from tuneup.unet.distributed import dist_env_from

TUNED_GPU = {
    "num_data_workers": 8,
    "data_loader_config": "dali-lowmem",
    "amp_mode": "fp16",
    "optimizer_impl": "apex",
    "jit": "script",
    "tf32": False,
    "global_batch_size": 256,
    "broadcast_buffers": False,
    "bucket_cap_mb": 100,
    "lr_schedule": {"start_lr": 1e-3, "warmup_steps": 64},
    "train_path": "/data/my box/train.h5",
    "expdir": "007",  # a string YAML would read as a number unless quoted
}
MODERN = {"amp_mode": "bf16", "jit": "compile", "compile_mode": "max-autotune", "seed": 3}
CASES = {
    "tuned-gpu": TUNED_GPU,
    "modern": MODERN,
    "defaults": {},
    "cpu-smoke": read_bundled_preset("cpu-smoke")["train"],
}


def expected(values: dict[str, Any]) -> dict[str, Any]:
    return build_config(values).to_dict()


def write(tmp_path: Path, text: str, name: str = "out.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# What the tutorial's block sets on purpose where the probed config had something else:
# a usable expdir, and for a model the tutorial cannot build (cpu-smoke: 4 levels on
# 16^3 crops) the tutorial's crop.
DELIBERATE = {"expdir", "data_size"}


@pytest.mark.parametrize("case", CASES)
def test_yaml_block_and_flags_reproduce_the_config_in_tuneup_train(tmp_path, case):
    values = CASES[case]
    path = write(tmp_path, render("yaml", values))
    args = build_parser().parse_args(
        [
            "train",
            "--yaml_config",
            str(path),
            "--config",
            "tuned",
            *shlex.split(render("flags", values)),
        ]
    )
    trained = load_config(path, "tuned", _train_overrides(args)).to_dict()
    want = expected(values)
    # As the tutorial runs it: the per-rank batch given, and buffers not broadcast with
    # gradients as bucket views (its --disable_broadcast_buffers sets both).
    want["local_batch_size"] = want["local_batch_size"] or want["global_batch_size"]
    if not want["broadcast_buffers"]:
        want["gradient_as_bucket_view"] = True
    assert {k: v for k, v in trained.items() if k not in DELIBERATE} == {
        k: v for k, v in want.items() if k not in DELIBERATE
    }
    assert trained["expdir"] == (want["expdir"] or "./logs")


def test_yaml_block_has_the_tutorial_keys_its_train_py_reads(tmp_path):
    block = yaml.safe_load(render("yaml", TUNED_GPU))["tuned"]
    assert set(TUTORIAL_KEYS) <= set(block)
    assert block["amp_mode"] == "fp16" and "enable_amp" not in block  # SC22 spelling
    assert block["enable_apex"] is True and block["enable_jit"] is True
    assert block["num_data_workers"] == 8 and block["data_loader_config"] == "dali-lowmem"
    assert block["tf32"] is False  # a tuneup-only knob that differs from its default
    assert "channels_last" not in block  # left at its default: not written

    modern = yaml.safe_load(render("yaml", MODERN))["tuned"]
    assert modern["enable_jit"] is False and modern["jit"] == "compile"
    assert modern["amp_mode"] == "bf16"


@pytest.mark.parametrize("case", CASES)
def test_tuneup_format_has_every_knob_and_loads_back(tmp_path, case):
    values = CASES[case]
    text = render("tuneup", values)
    assert list(yaml.safe_load(text)) == list(knob_names())
    assert load_config(write(tmp_path, text)).to_dict() == expected(values)


def parse_train_flags(line: str) -> dict[str, Any]:
    args = build_parser().parse_args(["train", *shlex.split(line)])
    return load_config(None, None, _train_overrides(args)).to_dict()


def test_flags_are_the_tutorials_sc22_spelling_only():
    tokens = shlex.split(render("flags", TUNED_GPU))
    for flag in ("--enable_apex", "--enable_jit", "--disable_broadcast_buffers"):
        assert flag in tokens
    assert tokens[tokens.index("--amp_mode") + 1] == "fp16" and "--enable_amp" not in tokens
    assert tokens[tokens.index("--num_data_workers") + 1] == "8"
    assert tokens[tokens.index("--bucket_cap_mb") + 1] == "100"
    assert tokens[tokens.index("--local_batch_size") + 1] == "256"
    assert "--set" not in tokens
    assert shlex.split(render("flags", MODERN))[:2] == ["--amp_mode", "bf16"]
    trained = parse_train_flags(render("flags", TUNED_GPU))
    assert trained["amp_mode"] == "fp16" and trained["gradient_as_bucket_view"] is True


def test_flags_name_the_ddp_knobs_of_a_config():
    tokens = shlex.split(render("flags", {"bucket_cap_mb": 100, "broadcast_buffers": False}))
    assert tokens[tokens.index("--bucket_cap_mb") + 1] == "100"
    assert "--disable_broadcast_buffers" in tokens
    assert "--noddp" in shlex.split(render("flags", {"noddp": True}))


def env_exports(text: str) -> dict[str, str]:
    exports = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"export ([A-Z_][A-Z0-9_]*)=(\S+)", line)
        assert match, f"not an export line: {line!r}"
        exports[match[1]] = match[2]
    return exports


def test_env_sets_tf32_override_only_when_tf32_is_off():
    assert env_exports(render("env", TUNED_GPU))["NVIDIA_TF32_OVERRIDE"] == "0"
    assert "NVIDIA_TF32_OVERRIDE" not in env_exports(render("env", MODERN))


def test_env_writes_a_thread_count_only_where_the_threads_stage_chose_one():
    # no count tuned: torch's own choice stands; what would leave the workers their
    # cores is offered as a comment (a quarter of 64 CPUs less 8 workers: 8)
    hints = {"gpus_per_node": 4, "cpus_per_node": 64}
    text = render("env", TUNED_GPU, hints=hints)
    assert "OMP_NUM_THREADS" not in env_exports(text)
    assert "# export OMP_NUM_THREADS=8" in text and "torch's own choice" in text
    assert "OMP_NUM_THREADS" not in env_exports(render("env", {"num_data_workers": 2}))
    chosen = render("env", {**TUNED_GPU, "intra_op_threads": 6}, hints=hints)
    assert env_exports(chosen)["OMP_NUM_THREADS"] == "6"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_env_file_sources_in_bash(tmp_path):
    values = {**TUNED_GPU, "intra_op_threads": 4}  # the threads stage chose 4
    path = write(tmp_path, render("env", values, hints={"cpus_per_task": 12}), "env.sh")
    out = subprocess.run(
        ["bash", "-c", f'source "{path}"; echo "$NVIDIA_TF32_OVERRIDE $OMP_NUM_THREADS"'],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.split() == ["0", "4"]


def sbatch_options(text: str) -> dict[str, str]:
    options = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line.removeprefix("#SBATCH --").partition("=")
            options[key] = value
    return options


PERLMUTTER = {
    "nodes": 2,
    "gpus_per_node": 4,
    "cores_per_node": 64,
    "slurm": {"account": "m1234_g", "qos": "regular", "constraint": "gpu", "time": "00:30:00"},
}


def test_sbatch_lays_out_one_rank_per_gpu_from_the_hints():
    options = sbatch_options(render("sbatch", TUNED_GPU, hints=PERLMUTTER))
    assert options["nodes"] == "2" and options["ntasks-per-node"] == "4"
    assert options["gpus-per-node"] == "4"
    assert options["cpus-per-task"] == "16"  # the node's 64 CPUs over its 4 ranks
    assert options["account"] == "m1234_g" and options["qos"] == "regular"
    assert options["constraint"] == "gpu" and options["time"] == "00:30:00"
    assert options["partition"] == "<partition>"  # not in the hints: a marked placeholder


def test_sbatch_without_hints_uses_placeholders_and_the_workers():
    text = render("sbatch", {"num_data_workers": 4})
    options = sbatch_options(text)
    assert options["account"] == "<account>" and options["partition"] == "<partition>"
    assert options["ntasks-per-node"] == "1" and options["gpus-per-node"] == "1"
    assert options["cpus-per-task"] == "5"  # no share known: the process and its 4 workers
    assert "set cpus_per_task to your site's CPUs per GPU" in text
    cpu_script = render("sbatch", {"device": "cpu"})
    assert "gpus-per-node" not in sbatch_options(cpu_script)
    assert "GPU" not in cpu_script and "trains on the CPU cores of its task" in cpu_script


def test_sbatch_runs_tuneup_train_on_the_embedded_config(tmp_path):
    text = render("sbatch", TUNED_GPU, hints=PERLMUTTER)
    assert text.startswith("#!/bin/bash\n")
    assert "export NVIDIA_TF32_OVERRIDE=0" in text and "export MASTER_PORT=" in text
    srun = [line for line in text.splitlines() if line.startswith("srun ")]
    assert srun == ['srun --ntasks-per-node=4 --cpus-per-task=16 tuneup train --config "$CONFIG"']
    body = text.split("<<'TUNEUP_CONFIG'\n", 1)[1].split("\nTUNEUP_CONFIG\n", 1)[0]
    assert load_config(write(tmp_path, body)).to_dict() == expected(TUNED_GPU)
    if shutil.which("bash"):
        script = write(tmp_path, text, "job.sbatch")
        subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


def test_sbatch_refuses_a_batch_smaller_than_the_ranks():
    with pytest.raises(UsageError, match="smaller than the job's 8 ranks"):
        render("sbatch", {"global_batch_size": 4}, hints={"nodes": 2, "gpus_per_node": 4})


@pytest.mark.parametrize(
    "hints", [{"nodes": 0}, {"gpus_per_node": "four"}, {"cpus_per_task": True}, ["nodes"]]
)
def test_bad_hints_are_one_clear_error(hints):
    with pytest.raises(UsageError, match="hint"):
        render("sbatch", {}, hints=hints)


def test_unknown_format_lists_the_formats():
    with pytest.raises(UsageError, match="unknown export format 'json': choose one of ") as info:
        render("json", {})
    assert all(fmt in str(info.value) for fmt in FORMATS)
    assert set(FORMATS) == {"yaml", "flags", "env", "sbatch", "tuneup"}


def test_invalid_values_are_refused_before_rendering():
    with pytest.raises(UsageError, match="amp_mode"):
        render("yaml", {"amp_mode": "fp8"})


def sbatch_lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sbatch_asks_for_a_2x4_allocation_and_the_sites_share_of_cpus(tmp_path):
    hints = {"nodes": 2, "gpus_per_node": 4, "cpus_per_task": 32}
    text = render("sbatch", {"num_data_workers": 8, "global_batch_size": 64}, hints=hints)
    options = sbatch_options(text)
    assert options["nodes"] == "2" and options["ntasks-per-node"] == "4"
    assert options["gpus-per-node"] == "4"
    # the site's share per GPU (memory comes with reserved cores), not 8 workers + 1
    assert options["cpus-per-task"] == "32"
    assert sbatch_lines(text, "srun ") == [
        'srun --ntasks-per-node=4 --cpus-per-task=32 tuneup train --config "$CONFIG"'
    ]
    assert "num_data_workers: 8" in text  # the measured workers are the config's
    subprocess.run(["bash", "-n", str(write(tmp_path, text, "job.sbatch"))], check=True, timeout=30)


def test_cpus_per_task_is_the_nodes_share_and_more_workers_are_said_to_share_it():
    hints = {"gpus_per_node": 4, "cpus_per_node": 64}
    text = render("sbatch", {"num_data_workers": 20, "global_batch_size": 64}, hints=hints)
    assert sbatch_options(text)["cpus-per-task"] == "16"
    assert "# --cpus-per-task: the node's share: 64 CPUs per node / 4 task(s)" in text
    assert (
        "# note: 20 loader workers + 1 training process want 21 CPUs, more than the 16 "
        "reserved: they will share cores" in text
    )
    assert sbatch_lines(text, "srun ")[0].startswith("srun --ntasks-per-node=4 --cpus-per-task=16 ")


def test_sbatch_marks_what_the_hints_do_not_say():
    text = render("sbatch", {"num_data_workers": 4}, hints={"gpus_per_node": 4})
    options = sbatch_options(text)
    assert options["account"] == "<account>" and options["partition"] == "<partition>"
    assert options["time"] == "01:00:00" and "# --time: tuneup's default" in text
    timed = render("sbatch", {}, hints={"time": "02:00:00", "account": "a", "partition": "p"})
    assert "<" not in "".join(sbatch_lines(timed, "#SBATCH")) and "tuneup's default" not in timed


PRESET_HINTS = {
    "gpus_per_node": 1,  # the preset's guess; the probed layout wins
    "cores_per_node": 64,
    "slurm": {"account": "m1234_g", "qos": "regular", "constraint": "gpu"},
}
DDP_WON = {
    "num_data_workers": 8,
    "data_loader_config": "dali-lowmem",
    "amp_mode": "fp16",
    "global_batch_size": 64,
    "bucket_cap_mb": 100,
    "broadcast_buffers": False,
}


def results_folder(
    tmp_path: Path, values: dict[str, Any], **blocks: Any
) -> tuple[Path, dict[str, Any]]:
    """A finished session's folder, written as tuneup writes it (session.json, summary.json)."""
    session = {
        "preset": "perlmutter",
        "preset_source": "perlmutter",
        "trainer": "unet",
        "search": "staged",
        "seed": 0,
        "stages": ["workers", "data", "amp", "ddp"],
        "machine": {"cuda": True, "gpu_count": 4, "cpus_usable": 64},
        "base_config": {"num_data_workers": 2},
        "hints": PRESET_HINTS,
        "tuneup_version": "0",
        "started": "2025-01-01T00:00:00+0000",
        **blocks,
    }
    changes = {k: v for k, v in values.items() if k != "global_batch_size"}
    summary = {
        "search": "staged",
        "baseline": {"values": {"num_data_workers": 2}, "full_sps": 1000.0},
        "recommendation": {
            "values": values,
            "changes": changes,
            "path": list(changes),
            "headline": "recommendation: ...",
            "full_sps": 2000.0,
        },
        "speedup": {"value": 2.0},
        "stages": [],
        "probes": {"ok": 10},
    }
    results = ResultsDir(tmp_path / "run")
    results.create(session)
    results.write_summary(summary)
    return results.path, session


def export(folder: Path, fmt: str, tmp_path: Path) -> str:
    target = tmp_path / f"export.{fmt}"
    assert run_export_command(folder, fmt, target) == 0
    return target.read_text()


LAUNCH = {"nproc": 4, "nodes": 2, "world_size": 8, "launcher": "srun"}
JOB = {"partition": "gpu_ss11", "account": "other_g", "num_nodes": 2, "gpus_on_node": 4}


def test_export_from_a_session_asks_for_the_probed_layout_and_job(tmp_path):
    folder, _ = results_folder(tmp_path, DDP_WON, launch=LAUNCH, job=JOB)
    text = export(folder, "sbatch", tmp_path)
    options = sbatch_options(text)
    assert options["nodes"] == "2" and options["ntasks-per-node"] == "4"
    assert options["gpus-per-node"] == "4"
    assert options["cpus-per-task"] == "16"  # the preset's 64 cores per node / 4 ranks
    assert options["partition"] == "gpu_ss11"  # the job's: the preset gives none
    assert options["account"] == "m1234_g"  # the preset's wins over the job's
    assert options["qos"] == "regular" and options["constraint"] == "gpu"
    assert sbatch_lines(text, "srun ")[0].startswith("srun --ntasks-per-node=4 --cpus-per-task=16 ")


def test_export_of_a_session_without_layout_blocks_uses_the_preset(tmp_path):
    folder, _ = results_folder(tmp_path, DDP_WON)
    options = sbatch_options(export(folder, "sbatch", tmp_path))
    assert options["nodes"] == "1" and options["ntasks-per-node"] == "1"
    assert options["partition"] == "<partition>" and options["account"] == "m1234_g"


def test_a_damaged_launch_block_is_one_clear_error(tmp_path):
    folder, _ = results_folder(tmp_path, DDP_WON, launch={"nproc": "four", "nodes": 1})
    with pytest.raises(UsageError, match=r"launch 'nproc'.*damaged"):
        run_export_command(folder, "sbatch", tmp_path / "x")


def test_flags_carry_the_ddp_knobs_when_they_won(tmp_path):
    folder, _ = results_folder(tmp_path, DDP_WON, launch=LAUNCH)
    tokens = shlex.split(export(folder, "flags", tmp_path))
    assert tokens[tokens.index("--bucket_cap_mb") + 1] == "100"
    assert "--disable_broadcast_buffers" in tokens
    script = export(folder, "sbatch", tmp_path)
    assert "bucket_cap_mb: 100" in script and "broadcast_buffers: false" in script
    lost = {k: v for k, v in DDP_WON.items() if k not in ("bucket_cap_mb", "broadcast_buffers")}
    other, _ = results_folder(tmp_path / "other", lost, launch=LAUNCH)
    plain = shlex.split(export(other, "flags", tmp_path))
    assert plain[plain.index("--bucket_cap_mb") + 1] == "25"  # torch's default, said
    assert "--disable_broadcast_buffers" not in plain


FAKE_SCONTROL = '#!/bin/sh\nprintf "nid001234\\nnid001235\\n"\n'
FAKE_SRUN = """#!/bin/sh
{ echo "ARGS $*"; echo "MASTER_ADDR=$MASTER_ADDR"; echo "MASTER_PORT=$MASTER_PORT";
  echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"; } > "$SLURM_SUBMIT_DIR/srun.log"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_script_starts_ranks_that_tuneup_train_can_place(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("scontrol", FAKE_SCONTROL), ("srun", FAKE_SRUN)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    folder, _ = results_folder(tmp_path, DDP_WON, launch=LAUNCH, job=JOB)
    script = write(tmp_path, export(folder, "sbatch", tmp_path), "job.sbatch")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_NODELIST": "nid[001234-001235]",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_ID": "42",
    }
    subprocess.run(["bash", str(script)], check=True, timeout=30, env=env)
    log = dict(line.split("=", 1) for line in (tmp_path / "srun.log").read_text().splitlines()[1:])
    args = (tmp_path / "srun.log").read_text().splitlines()[0]
    config = tmp_path / "tuneup-42.yaml"
    assert args == f"ARGS --ntasks-per-node=4 --cpus-per-task=16 tuneup train --config {config}"
    assert load_config(config).to_dict() == expected(DDP_WON)
    # What one rank of that step sees: tuneup train must find its place in the job.
    rank = dist_env_from(
        {**log, "SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1"}
    )
    assert log["MASTER_ADDR"] == "nid001234"
    assert (rank.world_size, rank.rank, rank.local_rank, rank.source) == (8, 5, 1, "slurm")
