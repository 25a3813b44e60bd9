"""Plugins: third-party stages and trainers found through entry points, listed, loaded, run.

The "installed" packages are entry-point fixtures: a folder holding the
package and its ``*.dist-info`` (METADATA and entry_points.txt) put on
sys.path, which importlib.metadata finds exactly as it finds a pip install.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tuneup.commands.plugins import format_table, plugin_rows, run_plugins_list, warn_broken_plugins
from tuneup.errors import UsageError
from tuneup.plugin_registry import BUILTIN, PLUGIN_API_VERSION
from tuneup.probe.stages import load_stage, scan_stages, stage_names
from tuneup.trainers.adapters import (
    TrainerAdapter,
    TrainerContext,
    load_trainer,
    scan_trainers,
    trainer_names,
)

REPO = Path(__file__).resolve().parent.parent

GOOD = {
    "goodpkg/__init__.py": """
        from dataclasses import dataclass

        from tuneup.trainers.adapters import TrainerAdapter
        from tuneup_plugins.sim import sim_backend
        from tuneup.probe.stages import Stage
        from tuneup.probe.types import Candidate

        PREFETCH = Stage(
            name="prefetch",
            title="Prefetch depth",
            description="Batches each loader worker prepares ahead.",
            knobs=("prefetch_factor",),
            candidates=(
                Candidate("prefetch 4", {"prefetch_factor": 4}),
                Candidate("prefetch 8", {"prefetch_factor": 8}),
            ),
            api_version=2,
        )


        @dataclass(frozen=True)
        class EchoTrainer(TrainerAdapter):
            def backend(self, ctx):
                return sim_backend(ctx.seed + 1)


        ECHO = EchoTrainer(name="echo", description="the sim, seeded differently", api_version=2)
    """,
    "goodpkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: goodpkg\nVersion: 0.1\n",
    "goodpkg-0.1.dist-info/entry_points.txt": """
        [tuneup.stages]
        prefetch = goodpkg:PREFETCH

        [tuneup.trainers]
        echo = goodpkg:ECHO
    """,
}

BROKEN = {
    "brokenpkg/__init__.py": """
        from tuneup.probe.stages import Stage
        from tuneup.probe.types import Candidate

        FUTURE = Stage(
            name="future",
            title="From the future",
            description="Written for a plugin API this tuneup does not have.",
            knobs=("pin_memory",),
            candidates=(Candidate("unpinned", {"pin_memory": False}),),
            api_version=99,
        )
        AMP = Stage(
            name="amp",
            title="Hijacked AMP",
            description="Tries to replace the built-in amp stage.",
            knobs=("cudnn_benchmark",),
            candidates=(Candidate("hijacked", {"cudnn_benchmark": False}),),
        )
        NOT_A_TRAINER = "sim"
    """,
    "brokenpkg-0.2.dist-info/METADATA": "Metadata-Version: 2.1\nName: brokenpkg\nVersion: 0.2\n",
    "brokenpkg-0.2.dist-info/entry_points.txt": """
        [tuneup.stages]
        ghost = brokenpkg.missing:STAGE
        future = brokenpkg:FUTURE
        amp = brokenpkg:AMP

        [tuneup.trainers]
        text = brokenpkg:NOT_A_TRAINER
    """,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Install packages (name -> files) into a fresh folder on sys.path; returns the folder."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))

    def install(*packages: dict[str, str]) -> Path:
        for files in packages:
            _write(root, files)
        return root

    yield install
    packages = ("goodpkg", "brokenpkg", "remotepkg")
    for name in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[name]


def test_builtins_declare_the_current_api_version():
    assert PLUGIN_API_VERSION == 3
    assert load_stage("workers").api_version == PLUGIN_API_VERSION
    assert load_trainer("sim").api_version == PLUGIN_API_VERSION
    assert {"unet", "sim", "command"} <= set(trainer_names())
    trainers, warnings = scan_trainers()
    assert warnings == [] and {"unet", "sim", "command"} <= set(trainers)


def test_listing_names_imports_no_plugin(installed):
    root = installed(GOOD, BROKEN)
    code = (
        "import sys\n"
        "from tuneup.probe.stages import stage_names\n"
        "from tuneup.trainers.adapters import trainer_names\n"
        "print(stage_names(), trainer_names())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('goodpkg', 'brokenpkg', 'tuneup_plugins')))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    names, imported = done.stdout.splitlines()
    for name in ("prefetch", "ghost", "future", "workers", "echo", "text", "command"):
        assert f"'{name}'" in names
    assert imported == "[]"


def test_a_third_party_stage_and_trainer_load_by_name(installed):
    installed(GOOD)
    stage = load_stage("prefetch")
    assert [c.values for c in stage.candidates] == [{"prefetch_factor": 4}, {"prefetch_factor": 8}]
    trainer = load_trainer("echo")
    assert isinstance(trainer, TrainerAdapter)
    backend = trainer.backend(TrainerContext(workdir=Path("unused"), seed=3))
    assert callable(backend)


def test_broken_plugins_are_clear_errors_by_name_and_skipped_when_scanning(installed):
    installed(GOOD, BROKEN)
    with pytest.raises(UsageError, match="failed to import: ModuleNotFoundError"):
        load_stage("ghost")
    with pytest.raises(
        UsageError, match="plugin API version 99; this tuneup supports versions 2, 3"
    ):
        load_stage("future")
    with pytest.raises(
        UsageError, match=r"is a str, not a tuneup\.trainers\.adapters\.TrainerAdapter"
    ):
        load_trainer("text")
    # The built-in wins a name clash, whatever order the metadata lists them in.
    assert load_stage("amp").title != "Hijacked AMP"

    stages, warnings = scan_stages()
    assert "prefetch" in stages and "workers" in stages
    assert "ghost" not in stages and "future" not in stages
    assert stages["amp"].title != "Hijacked AMP"
    joined = "\n".join(warnings)
    assert len(warnings) == 3, joined
    assert "'ghost'" in joined and "'future'" in joined
    assert "'amp' (brokenpkg:AMP) from brokenpkg 0.2 repeats a name already loaded" in joined
    assert all(w.endswith("skipped") and "\n" not in w for w in warnings)
    trainers, warnings = scan_trainers()
    assert "echo" in trainers and "text" not in trainers and len(warnings) == 1


def test_unknown_names_list_the_known_ones(installed):
    installed(GOOD)
    with pytest.raises(UsageError, match=r"unknown stage 'prefetc': did you mean 'prefetch'\?"):
        load_stage("prefetc")
    with pytest.raises(UsageError, match=r"unknown trainer 'nope': known trainers are .*echo"):
        load_trainer("nope")


def test_plugins_list_shows_origin_and_status(installed, capsys):
    installed(GOOD, BROKEN)
    assert run_plugins_list() == 0
    out, err = capsys.readouterr()
    rows = {(r.kind, r.name, r.origin): r for r in plugin_rows()}
    assert rows[("stage", "prefetch", "goodpkg 0.1")].ok
    assert rows[("trainer", "echo", "goodpkg 0.1")].ok
    assert rows[("stage", "workers", BUILTIN)].ok
    assert rows[("stage", "amp", BUILTIN)].ok
    assert not rows[("stage", "amp", "brokenpkg 0.2")].ok
    assert "failed to import" in rows[("stage", "ghost", "brokenpkg 0.2")].status
    assert "API version 99" in rows[("stage", "future", "brokenpkg 0.2")].status

    lines = out.splitlines()
    assert lines[0].split() == ["KIND", "NAME", "ORIGIN", "STATUS"]
    prefetch = next(line for line in lines if " prefetch " in line)
    assert prefetch.split() == ["stage", "prefetch", "goodpkg", "0.1", "ok"]
    ghost = next(line for line in lines if " ghost " in line)
    assert "brokenpkg 0.2" in ghost and "ModuleNotFoundError" in ghost
    # Every row starts its status in the same column.
    column = lines[0].index("STATUS")
    assert all(len(line) > column and line[column - 2 : column] == "  " for line in lines)
    assert "4 plugin(s) skipped" in err and "stage 'ghost'" in err and "trainer 'text'" in err


def test_format_table_has_a_row_per_entry_point_and_survives_none():
    lines = format_table(plugin_rows())
    assert len(lines) == 1 + len(stage_names()) + len(trainer_names())
    assert format_table([]) == ["KIND  NAME  ORIGIN  STATUS"]


def test_warn_broken_plugins_prints_each_on_stderr(installed, capsys):
    installed(BROKEN)
    assert len(warn_broken_plugins()) == 4
    err = capsys.readouterr().err
    assert err.count("tuneup: warning: ") == 4


def _sim_ladder(tmp_path: Path, stages: str, capsys) -> dict:
    from tuneup.cli import main

    code = main(
        [
            "probe",
            "--trainer",
            "sim",
            "--preset",
            "cpu-smoke",
            "--stages",
            stages,
            "--seed",
            "5",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_a_third_party_stage_runs_in_a_sim_ladder_beside_broken_plugins(
    installed, tmp_path, capsys
):
    installed(GOOD, BROKEN)
    document = _sim_ladder(tmp_path, "workers,prefetch,amp", capsys)
    probes = document["probes"]
    stages = {p["stage"] for p in probes}
    assert {"baseline", "prefetch"} <= stages
    if document["summary"]["confirmation"] is not None:  # something was adopted
        assert "confirm" in stages
    prefetch = [p for p in probes if p["stage"] == "prefetch"]
    tried = {p["variant"].get("prefetch_factor") for p in prefetch if p["variant"]}
    assert tried == {4, 8}  # the incumbent's probes around them have variant {}
    assert all(p["status"] == "ok" and p["full_sps"] > 0 for p in prefetch)
    # The built-in amp stage ran; the clashing third-party 'amp' (which sets another knob) not.
    amp = [p["variant"] for p in probes if p["stage"] == "amp" and p["variant"]]
    assert amp and all(set(v) == {"amp_mode"} for v in amp)
    journal = (tmp_path / "run" / "journal.jsonl").read_text().splitlines()
    assert any(json.loads(line)["stage"] == "prefetch" for line in journal)


def test_naming_a_broken_stage_in_the_ladder_is_one_clear_error(installed, tmp_path, capsys):
    installed(BROKEN)
    from tuneup.cli import main

    argv = ["probe", "--trainer", "sim", "--preset", "cpu-smoke", "--stages", "workers,ghost"]
    assert main([*argv, "--out", str(tmp_path / "run"), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "ghost" in err and "\n" not in err


def _readme_example() -> dict[str, str]:
    """The README's example package, as files: its module and its entry points."""
    import re

    import tuneup_plugins

    readme = (Path(tuneup_plugins.__file__).parent / "README.md").read_text(encoding="utf-8")
    module = re.search(r"`tuneup_prefetch/__init__.py`:\n\n```python\n(.*?)```", readme, re.S)
    toml = re.search(r"`pyproject.toml`:\n\n```toml\n(.*?)```", readme, re.S)
    assert module and toml, "the README's example package moved"
    groups = re.findall(r'\[project\.entry-points\."([^"]+)"\]\n((?:\w+ = "[^"]+"\n)+)', toml[1])
    entry_points = "".join(
        "[" + group + "]\n" + lines.replace('"', "") + "\n" for group, lines in groups
    )
    info = "tuneup_prefetch-0.1.dist-info"
    return {
        "tuneup_prefetch/__init__.py": module[1],
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: tuneup-prefetch\nVersion: 0.1\n",
        f"{info}/entry_points.txt": entry_points,
    }


def test_the_readme_example_package_works_as_written(installed, tmp_path, monkeypatch):
    installed(_readme_example())
    rows = {(r.kind, r.name): r for r in plugin_rows()}
    for key in (("stage", "prefetch"), ("trainer", "replay")):
        assert rows[key].ok and rows[key].origin == "tuneup-prefetch 0.1", rows[key]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "measured.json").write_text('{"8": 130.0}')
    backend = load_trainer("replay").backend(TrainerContext(tmp_path))
    stage = load_stage("prefetch")
    fast = backend("prefetch", stage.candidates[1], {"prefetch_factor": 8})
    assert fast.ok and fast.full_sps == 130.0
    assert backend("prefetch", stage.candidates[0], {"prefetch_factor": 4}).status.value == (
        "unsupported"
    )


def test_builtin_trainers_take_the_session_layout(tmp_path):
    from tuneup.cluster.launch import LaunchPlan
    from tuneup.probe.types import Candidate

    plan = LaunchPlan(nproc=4)
    sim = load_trainer("sim").backend(TrainerContext(tmp_path, seed=2, launch=plan))
    assert sim("ddp", Candidate("all", {}), {}).ranks == 4
    single = load_trainer("sim").backend(TrainerContext(tmp_path, seed=2))
    assert single("ddp", Candidate("all", {}), {}).ranks == 1
    unet = load_trainer("unet").backend(TrainerContext(tmp_path / "probes", launch=plan))
    assert unet.launch is plan


# --- what tuneup does for a trainer comes from what it declares, never from its name ---------

REMOTE = {
    "remotepkg/__init__.py": """
        from dataclasses import dataclass

        from tuneup.trainers.adapters import TrainerAdapter
        from tuneup_plugins.sim import sim_backend


        @dataclass(frozen=True)
        class RemoteTrainer(TrainerAdapter):
            def backend(self, ctx):
                return sim_backend(len(self.section_of(ctx)["host"]))

            def check_section(self, data):
                return [] if "host" in data else ["remote.host: missing: the machine to train on"]

            def render_export(self, fmt, section, values, hints, source):
                return f"ssh {section['host']} train --workers {values['num_data_workers']}\\n"


        REMOTE = RemoteTrainer(
            name="remote",
            description="trains on another machine",
            api_version=2,
            tunes="a remote run",
            section=True,
            exports={"ssh": "remote.sh"},
        )
    """,
    "remotepkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: remotepkg\nVersion: 0.1\n",
    "remotepkg-0.1.dist-info/entry_points.txt": "[tuneup.trainers]\nremote = remotepkg:REMOTE\n",
}


def test_a_trainer_checks_and_reads_its_own_preset_section(installed, tmp_path):
    from tuneup.preset.load import parse_preset, preset_to_dict

    installed(REMOTE)
    preset = parse_preset({"remote": {"host": "gpu7"}}, "p.yaml")
    assert preset.sections == {"remote": {"host": "gpu7"}}
    assert parse_preset(preset_to_dict(preset), "again").sections == preset.sections
    backend = load_trainer("remote").backend(TrainerContext(tmp_path, preset=preset))
    assert callable(backend)
    with pytest.raises(UsageError, match=r"remote\.host: missing"):
        parse_preset({"remote": {"port": 22}}, "p.yaml")
    with pytest.raises(UsageError, match="sim: the sim trainer reads no section"):
        parse_preset({"sim": {"seed": 1}}, "p.yaml")
    with pytest.raises(UsageError) as caught:
        parse_preset({"remot": {}}, "p.yaml")
    assert "did you mean 'remote'?" in str(caught.value) and "command" in str(caught.value)


def test_a_trainer_with_exports_of_its_own_renders_its_sessions(installed):
    from tuneup.export.session import SessionExport, render_session

    installed(REMOTE)
    export = SessionExport(
        values={"num_data_workers": 8},
        adapter=load_trainer("remote"),
        section={"host": "gpu7"},
    )
    assert export.formats == ("ssh",) and export.file_name("ssh") == "remote.sh"
    assert render_session(export, "ssh") == "ssh gpu7 train --workers 8\n"
    unet = SessionExport(values={"num_data_workers": 8}, adapter=load_trainer("unet"))
    assert "yaml" in unet.formats and unet.file_name("yaml") is None
    with pytest.raises(UsageError, match=r"'remote'\); this one tuned tuneup's U-Net"):
        render_session(unet, "ssh")


def test_the_builtin_trainers_declare_what_tuneup_does_for_them():
    unet, sim, command = (load_trainer(n) for n in ("unet", "sim", "command"))
    assert unet.data_files and unet.gpu_telemetry and unet.in_app and not unet.simulated
    assert sim.simulated and sim.in_app and not (sim.data_files or sim.gpu_telemetry)
    # the sim answers at once but prices its probes like a GPU node's (what --budget counts)
    assert sim.step_model.startup_s >= unet.step_model.startup_s
    assert command.section and "command" in command.exports and not command.in_app


def test_the_app_refuses_a_trainer_it_does_not_drive():
    from tuneup.commands.tui import run_tui_command

    with pytest.raises(UsageError, match="--trainer command: the app drives sim, unet"):
        run_tui_command(trainer="command")


def test_no_core_module_imports_a_plugin():
    import ast

    import tuneup

    offenders = []
    for path in Path(tuneup.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "tuneup_plugins"]
    assert offenders == []


def test_the_phase_a_stage_is_judged_on_follows_the_trainer_and_the_device():
    from tuneup.hardware.types import MachineInfo
    from tuneup.tuning.session.stage_plans import stage_plans

    class FullOnly(TrainerAdapter):  # a plugin written before phases were declared
        def backend(self, ctx):
            raise NotImplementedError

    gpu = MachineInfo(cuda=True, gpu_count=1, cpus_usable=16)
    names = ("workers", "amp", "batch_size")
    mine = stage_plans(names, gpu, {}, phases=FullOnly("mine", "mine").phases)
    unet = stage_plans(names, gpu, {}, phases=load_trainer("unet").phases)
    assert [p.judged for p in mine] == ["full", "full", "full"]
    assert [p.judged for p in unet] == ["io", "synthetic", "full"]
    # on the CPU the loader's workers and the model share the cores: the loader on FULL
    cpu = MachineInfo(cpus_usable=2)
    on_cpu = stage_plans(("workers", "amp"), cpu, {}, phases=load_trainer("unet").phases)
    assert [p.judged for p in on_cpu] == ["full", "synthetic"]


def test_a_builtin_declared_but_not_reinstalled_is_named_with_its_fix(tmp_path, capsys):
    import importlib.metadata

    from tuneup.commands.plugins import run_plugins_list
    from tuneup.plugin_registry import checkout_unregistered, declared_entry_points, unregistered

    root = Path(__file__).resolve().parent.parent
    declared = declared_entry_points(root / "pyproject.toml")
    assert "amp" in declared["tuneup.stages"] and "unet" in declared["tuneup.trainers"]
    # this checkout is installed as it declares: nothing to say
    assert checkout_unregistered() == []
    # a stage added to pyproject.toml without `pip install -e .` again
    installed = {g: list(importlib.metadata.entry_points(group=g)) for g in declared}
    added = {**declared, "tuneup.stages": {**declared["tuneup.stages"], "threads": "x:THREADS"}}
    lines = unregistered(added, installed)
    assert lines == [
        "stage 'threads' (x:THREADS) is declared in pyproject.toml but not registered: "
        "run `pip install -e .` again"
    ]
    run_plugins_list()
    assert "not registered" not in capsys.readouterr().err
    assert declared_entry_points(tmp_path / "none.toml") == {}  # an installed wheel: silent


def _defined_builtins(kind: type) -> dict[int, tuple[str, Any]]:
    """Every module-level `kind` (a Stage, a TrainerAdapter) the built-in plugins' source
    defines, in any module of the package: where it was first met, and the object."""
    import tuneup_plugins

    found: dict[int, tuple[str, Any]] = {}
    for module in pkgutil.walk_packages(tuneup_plugins.__path__, "tuneup_plugins."):
        for attribute, obj in vars(importlib.import_module(module.name)).items():
            if isinstance(obj, kind):
                found.setdefault(id(obj), (f"{module.name}:{attribute}", obj))
    return found


def _declared_objects(group: str) -> dict[int, str]:
    """What each entry point of `group` in pyproject.toml points at, by identity (read from
    the file, not the installed metadata: this is the checkout's declaration)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    document = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    declared = document["project"]["entry-points"][group]
    objects = {}
    for name, value in declared.items():
        module, attribute = value.split(":")
        objects[id(getattr(importlib.import_module(module), attribute))] = name
    return objects


@pytest.mark.parametrize(
    ("group", "kind"),
    [("tuneup.stages", "Stage"), ("tuneup.trainers", "TrainerAdapter")],
)
def test_every_builtin_stage_and_trainer_has_its_entry_point(group, kind):
    """A Stage or trainer adapter written in plugins/ but left out of pyproject.toml is
    never found by the registry, and nothing else says so: this test does."""
    from tuneup.probe.stages import Stage

    cls = {"Stage": Stage, "TrainerAdapter": TrainerAdapter}[kind]
    defined = _defined_builtins(cls)
    declared = _declared_objects(group)
    assert defined, f"no {kind} found in the built-in plugins: the walk is broken"
    missing = [
        f"{where} ({obj.name!r})" for key, (where, obj) in defined.items() if key not in declared
    ]
    assert not missing, (
        f'{", ".join(missing)}: no entry point under [project.entry-points."{group}"] in '
        'pyproject.toml; add `NAME = "MODULE:ATTRIBUTE"` there, then `pip install -e .`'
    )
    misnamed = [
        f"{declared[key]} -> {obj.name!r}"
        for key, (_, obj) in defined.items()
        if declared[key] != obj.name
    ]
    assert not misnamed, f"entry point names that are not their plugin's name: {misnamed}"


STALE_LINE = (
    "stage 'pace' (x:PACE) is declared in pyproject.toml but not registered: "
    "run `pip install -e .` again"
)


@pytest.fixture
def pace_not_reinstalled(monkeypatch):
    """A built-in stage 'pace' added to pyproject.toml, the package not installed again."""
    from tuneup import plugin_registry

    declared = plugin_registry.declared_entry_points(REPO / "pyproject.toml")
    stale = {**declared, "tuneup.stages": {**declared["tuneup.stages"], "pace": "x:PACE"}}
    monkeypatch.setattr(plugin_registry, "declared_entry_points", lambda _path: stale)
    # where this checkout's metadata is (an egg-info beside the sources, a dist-info) adds
    # its own clause: the lines here are those of a checkout without a stale egg-info
    monkeypatch.setattr(plugin_registry, "_BUILTIN_DISTRIBUTION", "no-such-distribution")


def test_probe_stages_naming_a_stage_not_reinstalled_says_the_reinstall(
    pace_not_reinstalled, tmp_path, capsys
):
    from tuneup.cli import main

    argv = ["probe", "--trainer", "sim", "--preset", "cpu-smoke", "--json"]
    assert main([*argv, "--stages", "pace", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"--stages: {STALE_LINE}" in err
    assert "unknown stage" not in err
    # a name nobody declared still lists the known ones
    assert main([*argv, "--stages", "pase", "--out", str(tmp_path / "other")]) == 2
    assert "--stages: unknown stage 'pase': known stages are amp, " in capsys.readouterr().err


def test_a_preset_or_load_naming_a_stage_not_reinstalled_says_the_reinstall(pace_not_reinstalled):
    from tuneup.preset.stage_schema import _unknown_stage

    assert _unknown_stage("pace", "probe.stages") == f"probe.stages: {STALE_LINE}"
    with pytest.raises(UsageError) as raised:
        load_stage("pace")
    assert str(raised.value) == STALE_LINE


def test_a_builtin_whose_import_fails_names_the_reinstall(monkeypatch):
    """A built-in entry point the installed metadata points where the checkout no longer
    has it (a stage moved or renamed since `pip install -e .`)."""
    from importlib.metadata import EntryPoint

    from tuneup import plugin_registry
    from tuneup.probe.stages import Stage

    moved = EntryPoint("gone", "tuneup_plugins.stages:GONE", "tuneup.stages")
    monkeypatch.setattr(plugin_registry.importlib.metadata, "entry_points", lambda group: [moved])
    registry = plugin_registry.Registry("tuneup.stages", "stage", Stage)
    (warning,) = registry.scan()[1]
    assert "stage plugin 'gone'" in warning and "from built-in failed to import" in warning
    assert "run `pip install -e .` again, if the checkout moved it" in warning


def test_tuneup_tui_warns_of_broken_and_unregistered_plugins_before_and_in_the_app(
    pace_not_reinstalled, monkeypatch, capsys
):
    """`tuneup tui` says them on stderr (seen again once the app gives the terminal back)
    and hands them to the app, which says them on its screen."""
    from tuneup.commands import tui
    from tuneup.tui import app as app_module

    made: list[dict[str, Any]] = []

    class Opened:
        session_folder = None

        def __init__(self, machine, **kwargs):
            made.append(kwargs)

        def run(self):
            pass

    monkeypatch.setattr(tui, "require_app", lambda *_args: None)
    monkeypatch.setattr(tui, "require_terminal", lambda *_args: None)
    monkeypatch.setattr(app_module, "TuneupApp", Opened)
    assert tui.run_tui_command(preset_name="cpu-smoke", trainer="sim") == 0
    assert f"tuneup: warning: {STALE_LINE}" in capsys.readouterr().err
    (kwargs,) = made
    assert STALE_LINE in kwargs["plugin_warnings"]
