"""Presets: every bundled one loads, mistakes are all listed, lookup order, list/show, warnings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_bounded import alias_bomb
from tuneup.bundled import bundled_preset_names
from tuneup.commands.presets import run_presets_list, run_presets_show
from tuneup.config import build_config
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import (
    apply_stage_candidates,
    list_presets,
    load_preset,
    parse_preset,
    preset_stage,
    preset_to_dict,
    preset_warnings,
)
from tuneup.preset.schema import flat_hints, hint_keys
from tuneup.probe.stages import load_stage

BUNDLED = bundled_preset_names()
# The presets for a known machine (generic-cuda knows nothing of its node).
MACHINE_PRESETS = [n for n in BUNDLED if n not in ("cpu-smoke", "generic-cuda")]


@pytest.fixture
def config_env(tmp_path: Path) -> dict[str, str]:
    """A user config folder of our own, so the real ~/.config never leaks in."""
    (tmp_path / "cfg" / "presets").mkdir(parents=True)
    return {"TUNEUP_CONFIG_DIR": str(tmp_path / "cfg")}


def user_preset(env: dict[str, str], name: str, data: Any) -> Path:
    path = Path(env["TUNEUP_CONFIG_DIR"]) / "presets" / f"{name}.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def test_the_machine_presets_the_issue_names_are_bundled() -> None:
    for name in (
        "cpu-smoke",
        "generic-cuda",
        "perlmutter-a100",
        "perlmutter-a100-4gpu",
        "jean-zay-v100",
        "jean-zay-a100",
        "jean-zay-h100",
        "summit-v100",
        "h200",
    ):
        assert name in BUNDLED


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_preset_validates_and_loads(name: str, config_env: dict[str, str]) -> None:
    preset = load_preset(name, environ=config_env)
    assert preset.name == name and preset.origin == "bundled" and preset.source == name
    assert len(preset.description) > 20
    build_config(preset.train, source=name)  # the base config is a valid TrainConfig
    for stage_name in preset.stages:
        stage = preset_stage(stage_name, preset)  # candidates fit the stage's knobs
        assert stage.name == stage_name
    # Read back from its own YAML, it is the same preset.
    again = parse_preset(yaml.safe_load(yaml.safe_dump(preset_to_dict(preset))), name)
    assert again == preset.__class__(**{**vars(preset), "source": "", "origin": ""})


@pytest.mark.parametrize("name", MACHINE_PRESETS)
def test_gpu_presets_say_their_layout_and_keep_workers_within_each_gpus_cpus(name: str) -> None:
    preset = load_preset(name)
    hints = flat_hints(preset.hints)
    assert preset.train["device"] == "cuda"
    assert hints["gpus_per_node"] >= 1 and isinstance(hints["time"], str)
    cpus_per_gpu = hints.get("cpus_per_task") or hints["cpus_per_node"] // hints["gpus_per_node"]
    workers = [c.values["num_data_workers"] for c in preset.stage_candidates["workers"]]
    assert workers and max(workers) <= cpus_per_gpu
    assert preset.train["num_data_workers"] <= cpus_per_gpu
    if preset.launch.nproc is not None:
        assert preset.launch.nproc <= hints["gpus_per_node"]


def test_v100_presets_use_a_local_batch_of_32_and_skip_tf32() -> None:
    for name in ("jean-zay-v100", "summit-v100"):
        preset = load_preset(name)
        assert preset.train["local_batch_size"] == 32
        assert "tf32" not in preset.stages  # Volta has no TF32


def test_the_four_gpu_perlmutter_preset_runs_four_ranks_and_the_single_one_one() -> None:
    assert load_preset("perlmutter-a100-4gpu").launch.nproc == 4
    assert load_preset("perlmutter-a100").launch.nproc == 1


BROKEN = {
    "name": "broken",
    "extra": 1,
    "train": {"device": "cpu", "bach": 3, "num_data_workers": -1, "amp_mode": "fp8"},
    "probe": {
        "stages": [
            "workers",
            "warpdrive",
            {"amp": {"amp_mode": ["bf16", "fp9"]}},
            "workers",
            {"batch_size": {"amp_mode": ["bf16"]}},
        ],
        "budget": {"trails": 3, "limit_s": -1, "trial_steps": 20},
        "hints": {"gpus_per_node": "four", "time": 3600, "cpu_per_task": 3, "slurm": {"qoss": 1}},
        "lauch": {},
    },
}


def test_a_preset_with_mistakes_lists_every_problem() -> None:
    with pytest.raises(UsageError) as caught:
        parse_preset(BROKEN, "broken.yaml")
    lines = str(caught.value).splitlines()
    problems = lines[1:]
    assert lines[0] == f"preset broken.yaml has {len(problems)} problems:"
    expected = [
        "extra: unknown key",
        "'bach'",
        "'num_data_workers' must be 0 or more",
        "'fp8' is not one of",
        "probe.lauch: unknown key: did you mean 'launch'?",
        "unknown stage 'warpdrive'",
        "probe.stages.amp: config key 'amp_mode': 'fp9'",
        "stage 'workers' is listed twice",
        "stage batch_size does not set 'amp_mode'",
        "probe.budget.trails: unknown key: did you mean 'trial_s'?",
        "probe.budget.trial_steps: trials are timed in seconds now, not counted in steps: use "
        "trial_s",
        "probe.budget.limit_s: must be a positive number",
        "probe.hints.gpus_per_node: must be a whole number",
        "probe.hints.time: must be text",
        "probe.hints.cpu_per_task: unknown key: did you mean 'cpus_per_task'?",
        "probe.hints.slurm.qoss: unknown key: did you mean 'qos'?",
    ]
    for fragment in expected:
        assert sum(fragment in line for line in problems) == 1, fragment
    assert len(problems) == len(expected)


def test_one_problem_is_still_a_headed_list() -> None:
    with pytest.raises(UsageError) as caught:
        parse_preset({"name": "x", "train": {"width": "wide"}}, "x")
    assert str(caught.value).splitlines() == [
        "preset x has 1 problem:",
        "  train: config key 'width' must be an integer, got 'wide'",
    ]


def test_knobs_valid_only_together_are_not_reported() -> None:
    # data_size 16 fails against the default depth alone, but suits levels 4.
    preset = parse_preset({"train": {"data_size": 16, "levels": 4}}, "x")
    assert preset.train == {"data_size": 16, "levels": 4}
    with pytest.raises(UsageError, match="data_size 24 does not fit"):
        parse_preset({"train": {"data_size": 24, "levels": 4}}, "x")


def test_cluster_model_hints_are_accepted_and_checked() -> None:
    scaling = pytest.importorskip("tuneup.cluster.allreduce")
    for key in (scaling.HINT_GBS, scaling.HINT_LATENCY_US, scaling.HINT_NODE_GBS):
        assert key in hint_keys()
    ok = {"probe": {"hints": {"interconnect_gbs": 25, "interconnect_latency_us": 0}}}
    assert parse_preset(ok, "x").hints["interconnect_gbs"] == 25
    with pytest.raises(UsageError, match="interconnect_gbs: must be a positive number"):
        parse_preset({"probe": {"hints": {"interconnect_gbs": 0}}}, "x")


def test_a_broken_command_section_is_listed_with_the_rest() -> None:
    pytest.importorskip("tuneup_plugins.command.adapter")
    with pytest.raises(UsageError) as caught:
        parse_preset({"train": {"width": "wide"}, "command": {"rnu": "python t.py"}}, "cmd")
    text = str(caught.value)
    assert "'width'" in text and "command" in text and "rnu" in text


def test_stage_candidates_from_the_preset_replace_the_stages_own() -> None:
    preset = parse_preset(
        {
            "train": {"num_data_workers": 1},
            "probe": {"stages": [{"workers": {"num_data_workers": [2, 3, 64]}}]},
        },
        "x",
    )
    stage = apply_stage_candidates(load_stage("workers"), preset)
    proposal = stage.propose(MachineInfo(cpus_usable=8), {"num_data_workers": 1})
    assert [c.values for c in proposal.candidates] == [
        {"num_data_workers": 2},
        {"num_data_workers": 3},
    ]  # 64 is more than the 8 CPUs
    untouched = apply_stage_candidates(load_stage("amp"), preset)
    assert untouched == load_stage("amp")


def test_a_preset_says_only_what_it_changes_of_the_default_ladder() -> None:
    from tuneup.probe.stages import default_ladder

    plain = parse_preset({"name": "plain"}, "x")
    assert (
        plain.stages
        == default_ladder()
        == parse_preset({"probe": {"stages": "default"}}, "x").stages
    )
    changed = parse_preset(
        {
            "probe": {
                "without": ["ddp", "tf32"],
                "candidates": {"workers": {"num_data_workers": [2, 4]}},
            }
        },
        "x",
    )
    assert changed.stages == tuple(n for n in default_ladder() if n not in ("ddp", "tf32"))
    assert [c.values for c in changed.stage_candidates["workers"]] == [
        {"num_data_workers": 2},
        {"num_data_workers": 4},
    ]


def test_without_and_candidates_name_only_stages_in_the_ladder() -> None:
    with pytest.raises(UsageError) as caught:
        parse_preset(
            {
                "probe": {
                    "without": ["wokers", "ddp"],
                    "candidates": {"ddp": {"bucket_cap_mb": [10]}, "jitt": {}},
                }
            },
            "x",
        )
    text = str(caught.value)
    assert "probe.without: unknown stage 'wokers': did you mean 'workers'?" in text
    assert "probe.candidates.ddp: stage 'ddp' is not in the ladder" in text
    assert "probe.candidates.jitt: unknown stage 'jitt'" in text


def test_a_list_of_candidate_mappings_is_one_candidate_each() -> None:
    preset = parse_preset(
        {"probe": {"stages": [{"cuda_graphs": [{"cuda_graphs": True, "amp_mode": "bf16"}]}]}}, "x"
    )
    (cand,) = preset.stage_candidates["cuda_graphs"]
    assert cand.values == {"cuda_graphs": True, "amp_mode": "bf16"}
    assert parse_preset(preset_to_dict(preset), "x").stage_candidates == preset.stage_candidates


# --- lookup -----------------------------------------------------------------------------------


def test_lookup_is_bundled_then_the_user_folder_then_a_path(
    tmp_path: Path, config_env: dict[str, str]
) -> None:
    mine = user_preset(config_env, "mine", {"description": "my own", "train": {"device": "cpu"}})
    shadow = user_preset(config_env, "cpu-smoke", {"description": "a copy", "train": {}})
    loaded = load_preset("mine", environ=config_env)
    assert loaded.name == "mine" and loaded.origin == f"user: {mine.resolve()}"
    assert loaded.source == str(mine.resolve())  # what --resume reloads
    assert load_preset("cpu-smoke", environ=config_env).origin == "bundled"
    by_path = load_preset(str(shadow), environ=config_env)
    assert by_path.description == "a copy"
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text("name: far\ntrain: {width: 4}\n")
    assert load_preset(str(elsewhere), environ=config_env).origin == f"file: {elsewhere.resolve()}"


def test_an_unknown_name_lists_bundled_and_user_presets(config_env: dict[str, str]) -> None:
    user_preset(config_env, "mine", {"train": {}})
    with pytest.raises(UsageError) as caught:
        load_preset("perlmuter-a100", environ=config_env)
    message = str(caught.value)
    assert "\n" not in message and "did you mean 'perlmutter-a100'?" in message
    assert "mine" in message and "cpu-smoke" in message


def test_bad_yaml_is_one_line_naming_the_line(config_env: dict[str, str]) -> None:
    path = user_preset(config_env, "bad", "name: bad\ntrain: [unclosed\n")
    with pytest.raises(UsageError) as caught:
        load_preset("bad", environ=config_env)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_the_config_folder_follows_xdg_when_tuneup_config_dir_is_unset(tmp_path: Path) -> None:
    folder = tmp_path / "xdg" / "tuneup" / "presets"
    folder.mkdir(parents=True)
    (folder / "xdgone.yml").write_text("description: from xdg\n")
    preset = load_preset("xdgone", environ={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert preset.description == "from xdg" and preset.origin.startswith("user: ")


def test_list_shows_shadowed_and_broken_user_presets(config_env: dict[str, str]) -> None:
    user_preset(config_env, "cpu-smoke", {"description": "a copy"})
    user_preset(config_env, "oops", {"train": {"widht": 4}})
    entries = {(e.name, e.origin.split(":")[0]): e for e in list_presets(config_env)}
    assert all((name, "bundled") in entries for name in BUNDLED)
    assert entries[("cpu-smoke", "user")].shadowed
    assert not entries[("cpu-smoke", "bundled")].shadowed
    assert entries[("oops", "user")].error.endswith("has 1 problem")


def test_a_binary_an_undecodable_or_a_bomb_preset_is_listed_broken_in_one_line(
    config_env: dict[str, str],
) -> None:
    folder = Path(config_env["TUNEUP_CONFIG_DIR"]) / "presets"
    (folder / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (folder / "latin.yaml").write_bytes("description: caf\u00e9\n".encode("latin-1"))
    user_preset(config_env, "bomb", alias_bomb())
    user_preset(config_env, "fine", {"description": "still listed"})

    errors = {e.name: e.error for e in list_presets(config_env) if e.origin.startswith("user")}

    assert errors["binary"] == f"preset file {folder / 'binary.yaml'} is a binary file, not text"
    assert errors["latin"] == f"preset file {folder / 'latin.yaml'} is not UTF-8 text (byte 16)"
    assert errors["bomb"].endswith("once its aliases are expanded (an alias bomb?)")
    assert errors["fine"] is None
    with pytest.raises(UsageError, match=r"is a binary file, not text$"):
        load_preset("binary", environ=config_env)


def test_figures_that_are_not_finite_are_problems() -> None:
    raw = {"probe": {"budget": {"trial_s": float("inf")}, "costs": {"spawn_s": float("nan")}}}
    with pytest.raises(UsageError) as caught:
        parse_preset(raw, "inf.yaml")
    said = str(caught.value)
    assert "probe.budget.trial_s: must be a positive number, got inf" in said
    assert "probe.costs.spawn_s: must be a number of 0 or more, got nan" in said
    with pytest.raises(UsageError, match="got 1000000000000"):
        parse_preset({"probe": {"budget": {"trial_s": 10**400}}}, "huge.yaml")


# --- the commands -----------------------------------------------------------------------------


def test_presets_list_prints_name_origin_and_description(
    config_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    user_preset(config_env, "cpu-smoke", {"description": "a copy"})
    assert run_presets_list(environ=config_env) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(BUNDLED) + 1
    for name in BUNDLED:
        line = next(line for line in lines if line.split()[:2] == [name, "bundled"])
        assert load_preset(name).description in line
    assert "shadowed by the bundled cpu-smoke" in lines[-1] and "user:" in lines[-1]


def test_presets_show_prints_yaml_that_loads_back_and_warns_on_stderr(
    tmp_path: Path, config_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    small = MachineInfo(cuda=False, gpu_count=0, cpus_usable=2)
    assert run_presets_show("perlmutter-a100-4gpu", machine=small, environ=config_env) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("# preset perlmutter-a100-4gpu (bundled)")
    saved = tmp_path / "copy.yaml"
    saved.write_text(captured.out)
    copy = load_preset(str(saved), environ=config_env)
    original = load_preset("perlmutter-a100-4gpu")
    assert (copy.train, copy.stages, copy.budget, copy.hints, copy.launch) == (
        original.train,
        original.stages,
        original.budget,
        original.hints,
        original.launch,
    )
    assert "no CUDA" in captured.err and "workers" in captured.err


def test_the_cli_prints_every_problem_and_exits_2(config_env: dict[str, str]) -> None:
    user_preset(config_env, "broken", BROKEN)
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", "presets", "show", "broken"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **config_env},
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "has 16 problems:" in done.stderr and done.stderr.count("\n  ") == 16


# --- warnings on this machine -----------------------------------------------------------------


def test_warnings_name_what_cannot_work_here() -> None:
    preset = load_preset("perlmutter-a100-4gpu")
    laptop = MachineInfo(cuda=False, gpu_count=0, cpus_usable=8)
    warnings = preset_warnings(preset, laptop)
    assert any("16 workers are more than the 2 CPUs each rank has" in w for w in warnings)
    assert any("train.device is cuda" in w for w in warnings)
    assert any("gpus_per_node is 4, but 0 GPUs" in w for w in warnings)
    assert any("launch.nproc is 4" in w for w in warnings)
    node = MachineInfo(cuda=True, gpu_count=4, cpus_usable=128, world_size=4)
    assert preset_warnings(preset, node) == []


def test_a_cpu_preset_on_a_cpu_machine_has_no_warnings() -> None:
    preset = load_preset("cpu-smoke")
    assert preset_warnings(preset, MachineInfo(cpus_usable=2)) == []
    crowded = parse_preset({"train": {"device": "cpu", "num_data_workers": 6}}, "x")
    (warning,) = preset_warnings(crowded, MachineInfo(cpus_usable=2))
    assert "num_data_workers is 6, more than the 2 CPUs" in warning
