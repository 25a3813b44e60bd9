"""The `command` trainer: a training script run per probe, its samples/s read from its output.

The scripts are written by the tests: one printing the tutorial's epoch lines,
one printing benchy's lines, one that crashes, one that never prints a
throughput, one that hangs and one that runs out of memory.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from tuneup_plugins.command.invocation import UnsupportedKnob, build_invocation
from tuneup_plugins.command.output import measurements, parse_output
from tuneup_plugins.command.run import CommandBackend
from tuneup_plugins.command.section import (
    DEFAULT_PATTERN,
    check_command_section,
    parse_command_section,
)

from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.probe.types import Candidate, ProbeBudget, Status
from tuneup.trainers.adapters import TrainerContext, load_trainer

# The tutorial's log format (README of NERSC/sc22-dl-tutorial), with made-up numbers.
TUTORIAL_LOG = """\
2022-11-09 00:19:04,091 - root - INFO - Starting Training Loop...
2022-11-09 00:19:04,091 - root - INFO - Time taken for epoch 1 is 110.5 sec, avg 37.1 samples/sec
2022-11-09 00:19:04,092 - root - INFO -   Avg train loss=0.065003
2022-11-09 00:19:14,226 - root - INFO -   Avg val loss=0.040343
2022-11-09 00:20:03,014 - root - INFO - Time taken for epoch 2 is 48.7 sec, avg 83.9 samples/sec
2022-11-09 00:20:03,049 - root - INFO -   Avg train loss=0.027986
2022-11-09 00:20:55,329 - root - INFO - Time taken for epoch 3 is 47.3 sec, avg 86.5 samples/sec
2022-11-09 00:20:55,329 - root - INFO -   Avg train loss=0.020926
2022-11-09 00:21:40,000 - root - INFO - Time taken for epoch 4 is 47.9 sec, avg 85.0 samples/sec
2022-11-09 00:21:40,001 - root - INFO -   Avg train loss=0.019000
"""

# benchy's output as its source prints it (romerojosh/benchy: per trial an
# "Iteration Throughput" line every report_freq batches, then "Average Iteration
# Throughput" and "Trial Throughput"; warm-up trials labelled *_WARMUP_*; the summary
# is the mean +/- standard deviation of the trial throughputs), with made-up numbers.
BENCHY_LOG = """\
BENCHY::INFO::Message: Using default benchy configuration.
BENCHY::INFO::Message: Profiling mode single. Starting profiler on rank 0 only.
BENCHY::IO_WARMUP_0::Iteration Throughput: 24.0
BENCHY::IO_WARMUP_0::Average Iteration Throughput: 22.0
BENCHY::IO_WARMUP_0::Trial Throughput: 20.0
BENCHY::IO_0::Iteration Throughput: 105.6
BENCHY::IO_0::Average Iteration Throughput: 96.80000000000001
BENCHY::IO_0::Trial Throughput: 88.0
BENCHY::IO_1::Iteration Throughput: 108.0
BENCHY::IO_1::Average Iteration Throughput: 99.00000000000001
BENCHY::IO_1::Trial Throughput: 90.0
BENCHY::IO_2::Iteration Throughput: 107.39999999999999
BENCHY::IO_2::Average Iteration Throughput: 98.45
BENCHY::IO_2::Trial Throughput: 89.5
BENCHY::SYNTHETIC_WARMUP_0::Iteration Throughput: 14.399999999999999
BENCHY::SYNTHETIC_WARMUP_0::Average Iteration Throughput: 13.200000000000001
BENCHY::SYNTHETIC_WARMUP_0::Trial Throughput: 12.0
BENCHY::SYNTHETIC_0::Iteration Throughput: 451.2
BENCHY::SYNTHETIC_0::Average Iteration Throughput: 413.6
BENCHY::SYNTHETIC_0::Trial Throughput: 376.0
BENCHY::SYNTHETIC_1::Iteration Throughput: 453.0
BENCHY::SYNTHETIC_1::Average Iteration Throughput: 415.25000000000006
BENCHY::SYNTHETIC_1::Trial Throughput: 377.5
BENCHY::SYNTHETIC_2::Iteration Throughput: 450.3
BENCHY::SYNTHETIC_2::Average Iteration Throughput: 412.77500000000003
BENCHY::SYNTHETIC_2::Trial Throughput: 375.25
2022-11-09 00:20:03,014 - root - INFO - Time taken for epoch 2 is 48.7 sec, avg 999.0 samples/sec
BENCHY::FULL_WARMUP_0::Iteration Throughput: 18.0
BENCHY::FULL_WARMUP_0::Average Iteration Throughput: 16.5
BENCHY::FULL_WARMUP_0::Trial Throughput: 15.0
BENCHY::FULL_0::Iteration Throughput: 106.8
BENCHY::FULL_0::Average Iteration Throughput: 97.9
BENCHY::FULL_0::Trial Throughput: 89.0
BENCHY::FULL_1::Iteration Throughput: 109.2
BENCHY::FULL_1::Average Iteration Throughput: 100.10000000000001
BENCHY::FULL_1::Trial Throughput: 91.0
BENCHY::FULL_2::Iteration Throughput: 108.0
BENCHY::FULL_2::Average Iteration Throughput: 99.00000000000001
BENCHY::FULL_2::Trial Throughput: 90.0
BENCHY::SUMMARY::IO average trial throughput: 89.167 +/- 0.850
BENCHY::SUMMARY:: SYNTHETIC average trial throughput: 376.250 +/- 0.935
BENCHY::SUMMARY::FULL average trial throughput: 90.000 +/- 0.816
BENCHY::INFO::Message: Writing JSON output to /tmp/benchy_result.251122-00:20:55.json.
BENCHY::INFO::Message: Tests completed.... exiting.
"""

# A stand-in for the tutorial's train.py: its flags, its epoch and loss lines (logged on
# stderr, as Python logging does), throughput rising with workers up to 8, halved when
# NVIDIA_TF32_OVERRIDE=0, and a slow first epoch.
TRAIN_PY = """
import argparse, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--num_epochs", type=int, default=3)
parser.add_argument("--num_data_workers", type=int, default=2)
parser.add_argument("--amp_mode", default="none")
parser.add_argument("--disable_broadcast_buffers", action="store_true")
args = parser.parse_args()
print("argv:", " ".join(sys.argv[1:]))
rate = 10.0 * min(args.num_data_workers, 8)
if os.environ.get("NVIDIA_TF32_OVERRIDE") == "0":
    rate /= 2
for epoch in range(1, args.num_epochs + 1):
    sps = rate / 3 if epoch == 1 else rate
    print(f"INFO - Time taken for epoch {epoch} is {64 / sps:.3f} sec, "
          f"avg {sps} samples/sec", file=sys.stderr)
    print(f"INFO -   Avg train loss={0.1 / epoch:.6f}", file=sys.stderr)
"""

SCRIPTS = {
    "train.py": TRAIN_PY,
    "benchy.py": "import sys\nprint(open(sys.argv[1]).read())\nsys.exit()\n",
    "crash.py": """
        import sys
        print("INFO - Time taken for epoch 1 is 9.0 sec, avg 7.0 samples/sec", file=sys.stderr)
        raise RuntimeError("the loader lost its file")
    """,
    "quiet.py": "print('training...')\nprint('done, loss 0.01')\n",
    "hang.py": "import time\nprint('starting', flush=True)\ntime.sleep(60)\n",
    "oom.py": """
        import sys
        print("Traceback (most recent call last):", file=sys.stderr)
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
              file=sys.stderr)
        sys.exit(1)
    """,
}


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "tutorial"
    folder.mkdir()
    for name, text in SCRIPTS.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    (folder / "benchy.log").write_text(BENCHY_LOG, encoding="utf-8")
    return folder


SECTION = {
    "flags": {
        "num_data_workers": "--num_data_workers {value}",
        "amp_mode": "--amp_mode {value}",
        "broadcast_buffers": {False: "--disable_broadcast_buffers", True: None},
    },
    "env": {"tf32": {"var": "NVIDIA_TF32_OVERRIDE", "values": {False: "0", True: None}}},
}


def backend_for(folder: Path, run: list[str], tmp_path: Path, **section) -> CommandBackend:
    spec = parse_command_section(
        {"run": [sys.executable, *run], "cwd": str(folder), **SECTION, **section}, "test"
    )
    return CommandBackend(spec, tmp_path / "probes", ProbeBudget(limit_s=30), grace_s=1.0)


def probe(backend: CommandBackend, values: dict, varied: dict | None = None):
    varied = values if varied is None else varied
    return backend("stage", Candidate("label", varied), values)


# --- the section -----------------------------------------------------------------------------


def test_a_sound_section_has_no_problems():
    section = {"run": "python train.py --num_epochs 3", **SECTION, "skip": 2, "limit_s": 900}
    assert check_command_section(section, "my.yaml") == []
    spec = parse_command_section(section, "my.yaml")
    # a bare `python` is tuneup's own interpreter, which has torch (the PATH's may not)
    assert spec.argv == (sys.executable, "train.py", "--num_epochs", "3")
    assert spec.mapped == {"num_data_workers", "amp_mode", "broadcast_buffers", "tf32"}


def test_every_problem_is_reported_on_its_own_line():
    section = {
        "run": "python 'train.py",
        "cwd": 3,
        "flags": {
            "num_workers": "--num_workers {value}",
            "amp_mode": "--amp",
            "tf32": {False: {"nested": 1}},
        },
        "env": {"jit": {"var": "1BAD"}, "pin_memory": ["x"]},
        "pattern": "avg ([0-9.]+) samples",
        "loss_pattern": "loss=(?P<loss>[0-9.]+",
        "skip": -1,
        "limit_s": 0,
        "timeout": 5,
    }
    problems = check_command_section(section, "my.yaml")
    assert all(p.startswith("my.yaml: command") and "\n" not in p for p in problems)
    text = "\n".join(problems)
    for expected in (
        "unknown key 'timeout'",
        "command.run: cannot split",
        "command.cwd",
        "'num_workers' is not a TrainConfig knob (did you mean 'num_data_workers'?)",
        "command.flags.amp_mode: '--amp' has no {value}",
        "command.flags.tf32.false",
        "command.env.jit.var",
        "command.env.pin_memory",
        "command.pattern: needs a group named 'sps'",
        "command.loss_pattern: not a valid regular expression",
        "command.skip",
        "command.limit_s",
    ):
        assert expected in text, expected
    assert len(problems) == 12
    with pytest.raises(UsageError, match=r"\(and 11 more problems\)"):
        parse_command_section(section, "my.yaml")


def test_a_missing_or_empty_run_is_a_problem():
    assert "command.run: missing" in check_command_section({}, "p")[0]
    assert "is empty" in check_command_section({"run": []}, "p")[0]
    assert "must be a mapping" in check_command_section("python train.py", "p")[0]


# --- the command line ------------------------------------------------------------------------


def spec_of(**section):
    return parse_command_section({"run": "python train.py", **SECTION, **section}, "test")


def test_knob_values_become_flags_and_environment():
    spec = spec_of()
    call = build_invocation(
        spec,
        {"num_data_workers": 8, "amp_mode": "bf16", "broadcast_buffers": False, "tf32": False},
        ["num_data_workers"],
    )
    assert call.argv == (
        sys.executable,
        "train.py",
        "--num_data_workers",
        "8",
        "--amp_mode",
        "bf16",
        "--disable_broadcast_buffers",
    )
    assert call.env == {"NVIDIA_TF32_OVERRIDE": "0"}
    # true maps to nothing: no flag, and the variable is removed from the child's environment
    call = build_invocation(spec, {"broadcast_buffers": True, "tf32": True})
    assert call.argv == (sys.executable, "train.py")
    assert call.env == {"NVIDIA_TF32_OVERRIDE": None}


def test_a_value_is_substituted_per_argument_never_through_a_shell():
    spec = spec_of(flags={"expdir": "--expdir={value} --tag x"})
    call = build_invocation(spec, {"expdir": "my runs; rm -rf ~"})
    assert call.argv[-3:] == ("--expdir=my runs; rm -rf ~", "--tag", "x")


def test_a_plain_variable_and_the_yaml_spelling_of_values():
    spec = spec_of(env={"num_data_workers": "WORKERS", "pin_memory": "PIN"})
    call = build_invocation(spec, {"num_data_workers": 4, "pin_memory": False})
    assert call.env == {"WORKERS": "4", "PIN": "false"}


def test_a_knob_the_section_does_not_map_is_unsupported():
    with pytest.raises(UnsupportedKnob, match="no flag or environment variable for jit"):
        build_invocation(spec_of(), {"jit": "compile"}, ["jit"])
    # An unmapped knob that only comes with the incumbent is the script's business.
    assert build_invocation(spec_of(), {"jit": "compile"}).argv == (sys.executable, "train.py")


def test_a_value_missing_from_a_table_is_unsupported_unless_it_is_the_default():
    spec = spec_of(flags={"amp_mode": {"bf16": "--amp_mode bf16"}})
    with pytest.raises(UnsupportedKnob, match=r"amp_mode=fp16 \(it lists: bf16\)"):
        build_invocation(spec, {"amp_mode": "fp16"}, ["amp_mode"])
    assert build_invocation(spec, {"amp_mode": "none"}).argv == (sys.executable, "train.py")


# --- the output ------------------------------------------------------------------------------


def test_epoch_lines_after_the_warm_up_are_the_trials():
    facts = parse_output(TUTORIAL_LOG.splitlines())
    assert facts.sps == (37.1, 83.9, 86.5, 85.0)
    fields = measurements(facts, skip=1)
    assert fields["full_sps_trials"] == [83.9, 86.5, 85.0]
    assert fields["full_sps"] == 85.0
    assert fields["warmup_s"] == 110.5
    assert 0 < fields["iqr_pct"] < 5
    assert fields["losses"] == [0.065003, 0.027986, 0.020926, 0.019]
    assert "io_sps" not in fields and "synthetic_sps" not in fields
    assert measurements(facts, skip=2)["full_sps_trials"] == [86.5, 85.0]


def test_benchy_trials_give_the_io_synthetic_full_split_with_their_spread():
    fields = measurements(parse_output(BENCHY_LOG.splitlines()), skip=1)
    # each phase is the median of its timed trials; warm-up, per-iteration and epoch
    # lines are left out
    assert (fields["io_sps"], fields["synthetic_sps"], fields["full_sps"]) == (89.5, 376.0, 90.0)
    assert fields["full_sps_trials"] == [89.0, 91.0, 90.0]
    assert fields["iqr_pct"] > 0  # three trials that differ: a spread, not zero


def test_benchy_trials_alone_are_enough():
    lines = [line for line in BENCHY_LOG.splitlines() if "SUMMARY" not in line]
    fields = measurements(parse_output(lines), skip=1)
    assert (fields["io_sps"], fields["full_sps"]) == (89.5, 90.0)
    assert fields["full_sps_trials"] == [89.0, 91.0, 90.0]


def test_a_benchy_summary_alone_gives_its_mean_and_its_spread():
    lines = [line for line in BENCHY_LOG.splitlines() if "SUMMARY" in line]
    fields = measurements(parse_output(lines), skip=1)
    assert (fields["io_sps"], fields["synthetic_sps"], fields["full_sps"]) == (
        89.167,
        376.25,
        90.0,
    )
    assert fields["full_sps_trials"] == [90.0]  # one figure: its noise is not claimed known
    assert fields["iqr_pct"] == pytest.approx(100 * 1.349 * 0.816 / 90.0)
    # the older spelling of benchy's README ("average throughput") reads the same
    older = [line.replace("average trial throughput", "average throughput") for line in lines]
    assert measurements(parse_output(older), skip=1)["full_sps"] == 90.0


def test_a_custom_pattern_and_a_nan_loss():
    import re

    lines = ["step 10 | 512.5 img/s | loss nan", "step 20 | 530.0 img/s | loss nan"]
    facts = parse_output(
        lines, re.compile(r"(?P<sps>[0-9.]+) img/s"), re.compile(r"loss (?P<loss>\S+)")
    )
    assert facts.sps == (512.5, 530.0)
    assert all(loss != loss for loss in facts.losses)  # NaN reaches the divergence guard
    assert re.compile(DEFAULT_PATTERN).search(TUTORIAL_LOG.splitlines()[1])


# --- running it ------------------------------------------------------------------------------


def test_the_tutorial_script_is_measured_with_its_flags_and_environment(scripts, tmp_path):
    backend = backend_for(scripts, ["train.py", "--num_epochs", "4"], tmp_path)
    result = probe(backend, {"num_data_workers": 4, "tf32": False}, {"num_data_workers": 4})
    assert result.status is Status.OK, result.reason
    assert result.full_sps == 20.0  # 10 x 4 workers, halved by NVIDIA_TF32_OVERRIDE=0
    assert result.full_sps_trials == [20.0, 20.0, 20.0]
    assert result.io_sps is None and result.synthetic_sps is None
    assert result.losses[0] == 0.1 and result.loss_end == 0.025
    assert result.variant == {"num_data_workers": 4}
    assert result.config == {"num_data_workers": 4, "tf32": False}
    assert result.wall_s > 0
    log = backend.runner.last_run.stderr_path.read_text()
    assert "argv: --num_epochs 4 --num_data_workers 4" in log  # stdout lands in the log too


def test_benchy_output_is_split_into_io_synthetic_full(scripts, tmp_path):
    backend = backend_for(scripts, ["benchy.py", "benchy.log"], tmp_path)
    result = probe(backend, {})
    assert result.status is Status.OK, result.reason
    assert (result.io_sps, result.synthetic_sps, result.full_sps) == (89.5, 376.0, 90.0)
    assert result.full_sps_trials == [89.0, 91.0, 90.0]


def test_a_crash_reports_the_exit_status_and_the_last_line(scripts, tmp_path):
    result = probe(backend_for(scripts, ["crash.py"], tmp_path), {})
    assert result.status is Status.CRASH
    assert result.reason.startswith("command exited with status 1: ")
    assert result.reason.endswith("RuntimeError: the loader lost its file")
    assert result.full_sps is None  # a failed probe is never mistaken for a fast one


def test_no_throughput_in_the_output_is_a_clear_failure(scripts, tmp_path):
    result = probe(backend_for(scripts, ["quiet.py"], tmp_path), {})
    assert result.status is Status.CRASH
    assert result.reason.startswith("no throughput found in the output (looked for the tutorial")
    assert "set command.pattern" in result.reason
    custom = backend_for(scripts, ["quiet.py"], tmp_path, pattern=r"(?P<sps>\d+) img/s")
    result = probe(custom, {})
    assert result.reason == r"no throughput found in the output (pattern '(?P<sps>\\d+) img/s')"


def test_only_warm_up_lines_says_to_run_more_epochs(scripts, tmp_path):
    result = probe(backend_for(scripts, ["train.py", "--num_epochs", "1"], tmp_path), {})
    assert result.status is Status.CRASH
    assert "all skipped as warm-up (command.skip is 1)" in result.reason


def test_a_hanging_script_is_killed_at_the_limit(scripts, tmp_path):
    backend = backend_for(scripts, ["hang.py"], tmp_path, limit_s=1)
    result = probe(backend, {})
    assert result.status is Status.TIMEOUT
    assert "no result within 1 s" in result.reason and "command.limit_s" in result.reason
    assert "throughput line(s) by then); killed; raise command.limit_s" in result.reason
    assert result.wall_s < 10


def test_out_of_memory_is_its_own_status(scripts, tmp_path):
    result = probe(backend_for(scripts, ["oom.py"], tmp_path), {})
    assert result.status is Status.OOM
    assert "CUDA out of memory" in result.reason


def test_an_unmapped_knob_makes_the_probe_unsupported_without_running(scripts, tmp_path):
    backend = backend_for(scripts, ["train.py"], tmp_path)
    result = probe(backend, {"jit": "compile"})
    assert result.status is Status.UNSUPPORTED
    assert "jit" in result.reason
    assert not (tmp_path / "probes").exists()


def test_a_program_that_cannot_start_is_a_crash_with_the_reason(scripts, tmp_path):
    spec = parse_command_section({"run": ["./no-such-program"], "cwd": str(scripts)}, "t")
    result = CommandBackend(spec, tmp_path / "probes", ProbeBudget(limit_s=30))(
        "s", Candidate("x", {}), {}
    )
    assert result.status is Status.CRASH
    assert "exited with status 127" in result.reason and "no-such-program" in result.reason


# --- the adapter in a ladder -----------------------------------------------------------------


def command_preset(folder: Path, run: list[str], **section) -> SimpleNamespace:
    command = {"run": [sys.executable, *run], "cwd": str(folder), **SECTION, **section}
    return SimpleNamespace(name="tutorial", source="tutorial.yaml", sections={"command": command})


def test_the_command_trainer_needs_a_command_section(tmp_path):
    trainer = load_trainer("command")
    with pytest.raises(UsageError, match="needs a `command:` section"):
        trainer.backend(
            TrainerContext(tmp_path, preset=SimpleNamespace(name="x", source="x", sections={}))
        )
    section = {"run": "no-such-program-xyz"}
    preset = SimpleNamespace(name="x", source="x.yaml", sections={"command": section})
    with pytest.raises(UsageError, match="'no-such-program-xyz' is not on PATH"):
        trainer.backend(TrainerContext(tmp_path, preset=preset))
    preset.sections = {"command": {"run": "python train.py", "cwd": str(tmp_path / "missing")}}
    with pytest.raises(UsageError, match=r"command\.cwd: no such folder"):
        trainer.backend(TrainerContext(tmp_path, preset=preset))


def test_a_workers_ladder_on_the_tutorial_script_recommends_eight_workers(scripts, tmp_path):
    from tuneup.tuning.search.staged import staged_search
    from tuneup.tuning.session.stage_plans import stage_plans

    ctx = TrainerContext(
        tmp_path / "probes",
        ProbeBudget(limit_s=30),
        preset=command_preset(scripts, ["train.py", "--num_epochs", "3"]),
    )
    backend = load_trainer("command").backend(ctx)
    base = {"num_data_workers": 1}
    plans = stage_plans(
        ("workers",), MachineInfo(cpus_usable=16), base, phases=load_trainer("command").phases
    )
    outcome = staged_search(base, plans, backend, confirm_pairs=1)
    # The stage's probes: its candidates, and the incumbent (no variant) measured around them.
    tried = {p.variant.get("num_data_workers") for p in outcome.probes if p.stage == "workers"}
    assert tried == {2, 4, 8, 16, None}
    assert outcome.best_values["num_data_workers"] == 8
    assert outcome.baseline.full_sps == 10.0 and outcome.best.full_sps == 80.0


def test_a_probe_can_not_change_the_ranks_of_a_command(scripts, tmp_path):
    backend = backend_for(scripts, ["train.py"], tmp_path)
    one = backend("ddp", Candidate("one GPU", {}, ranks=1), {})
    assert one.status is Status.OK
    two = backend("ddp", Candidate("two GPUs", {}, ranks=2), {})
    assert two.status is Status.UNSUPPORTED and "cannot change how many ranks" in two.reason


def test_tuneup_probe_points_at_the_tutorial_script(scripts, tmp_path, capsys):
    import json

    import yaml

    from tuneup.cli import main

    preset = {
        "name": "my-tutorial",
        "train": {"num_data_workers": 1},
        "probe": {"stages": ["workers"], "budget": {"limit_s": 30}},
        "command": {
            "run": [sys.executable, "train.py", "--num_epochs", "3"],
            "cwd": str(scripts),
            "flags": {"num_data_workers": "--num_data_workers {value}"},
        },
    }
    path = tmp_path / "my-tutorial.yaml"
    path.write_text(yaml.safe_dump(preset), encoding="utf-8")
    argv = ["probe", "--trainer", "command", "--preset", str(path), "--out", str(tmp_path / "run")]
    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    probes = document["probes"]
    assert probes[0]["stage"] == "baseline" and probes[0]["full_sps"] == 10.0
    tried = {
        p["variant"]["num_data_workers"]
        for p in probes
        if p["stage"] == "workers" and p["variant"]  # not the incumbent's re-measures
    }
    assert tried and all(p["status"] == "ok" for p in probes)
    # The script's throughput rises with workers up to 8 and then stays flat.
    best = min(tried, key=lambda w: (-min(w, 8), w))
    assert document["summary"]["recommendation"]["values"]["num_data_workers"] == best
    assert list((tmp_path / "run" / "probes").glob("*.stderr.log"))


def test_a_ladder_whose_baseline_fails_says_where_what_ran_is_kept(tmp_path, capsys):
    import yaml

    from tuneup.cli import main

    preset = {
        "name": "broken-script",
        "train": {"num_data_workers": 1},
        "probe": {"stages": ["workers"], "budget": {"limit_s": 30}},
        "command": {"run": [sys.executable, "-c", "import sys; sys.exit(3)"]},
    }
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(preset), encoding="utf-8")
    out = tmp_path / "run"
    code = main(["probe", "--trainer", "command", "--preset", str(path), "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 0 and "baseline" in err
    assert f"what ran is journaled in {out / 'journal.jsonl'}" in err


def test_a_thread_count_left_to_torch_is_never_passed_as_zero() -> None:
    """intra_op_threads 0 is torch's own choice: a section that maps it to OMP_NUM_THREADS
    leaves the variable as the user's environment has it (the baseline and every export);
    a count the threads stage chose is passed."""
    spec = parse_command_section(
        {"run": ["python", "train.py"], "env": {"intra_op_threads": "OMP_NUM_THREADS"}}, "mine"
    )
    assert "OMP_NUM_THREADS" not in build_invocation(spec, {"intra_op_threads": 0}).env
    assert build_invocation(spec, {"intra_op_threads": 2}).env == {"OMP_NUM_THREADS": "2"}
