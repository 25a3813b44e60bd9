"""Every exported file is data until the user runs it, and then does only what tuneup wrote.

A corpus of hostile values (newlines, `$(...)`, backticks, `;`, quotes, carriage
returns, Unicode line separators) goes in through every way a value reaches an export:
the preset's hints as session.json keeps them, the job block, the setup lines, a knob
value, the results folder's name, a command section. Each export is then run, sourced
or parsed in a sandbox: no payload runs (each would make a file named PWNED-*), and a
YAML file defines no key tuneup did not write. Where a value cannot be written safely
for its place, the export is refused in one line.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneup.commands.export import run_export_command
from tuneup.config import knob_names
from tuneup.errors import UsageError
from tuneup.tuning.results.journal import ResultsDir

PAYLOADS = (
    "x\ntouch PWNED-newline",
    "x\ntouch PWNED-between\n",  # bare between the lines a shell quote opens and closes
    "x\nevil: 1\n",  # a YAML key of its own
    "x\rtouch PWNED-cr",
    "x\u2028touch PWNED-ls",
    "x\u2029touch PWNED-ps",
    "x\x85touch PWNED-nel",
    "$(touch PWNED-subst)",
    "`touch PWNED-tick`",
    "x; touch PWNED-semi",
    "x' ; touch PWNED-quote ; '",
    'x" ; touch PWNED-dquote ; "',
    "x\\\ntouch PWNED-continued",
    "$(touch${IFS}PWNED-nospace)",
)
TEXT_HINTS = ("job_name", "time", "partition", "account", "qos", "constraint", "hint")
TUNEUP_FORMATS = ("yaml", "flags", "env", "sbatch", "tuneup", "md")
SAFE_HINTS = {"gpus_per_node": 4, "cpus_per_task": 16}
CHANGED = {  # carried and not carried by the tutorial: every format has notes to write
    "amp_mode": "bf16",
    "jit": "compile",
    "optimizer_impl": "fused",
    "channels_last": True,
    "tf32": False,
    "global_batch_size": 128,
}


def session_folder(
    parent: Path, name: str = "run", values: dict[str, Any] | None = None, **blocks: Any
) -> Path:
    """A finished session's folder as tuneup writes it, with what the caller plants."""
    values = {**CHANGED, **(values or {})}
    session = {
        "preset": "mine",
        "preset_source": "mine",
        "trainer": "unet",
        "search": "staged",
        "seed": 0,
        "stages": ["amp", "jit"],
        "machine": {"cuda": True, "gpu_count": 4, "cpus_usable": 64},
        "base_config": {"num_data_workers": 2},
        "hints": SAFE_HINTS,
        "tuneup_version": "0",
        "started": "2026-01-01T00:00:00+0000",
        **blocks,
    }
    summary = {
        "search": "staged",
        "baseline": {"values": {"num_data_workers": 2}, "full_sps": 100.0},
        "recommendation": {
            "values": values,
            "changes": values,
            "path": list(values),
            "headline": "recommendation: ...",
            "full_sps": 200.0,
        },
        "speedup": {"value": 2.0},
        "stages": [],
        "probes": {"ok": 4},
    }
    results = ResultsDir(parent / name)
    results.create(session)
    results.write_summary(summary)
    return results.path


def export_text(folder: Path, fmt: str, target: Path) -> str | None:
    """The export's text, or None where it was refused (in one line)."""
    try:
        assert run_export_command(folder, fmt, target) == 0
    except UsageError as exc:
        assert "\n" not in str(exc) and "\r" not in str(exc), str(exc)
        return None
    return target.read_text(encoding="utf-8")


def run_in_sandbox(sandbox: Path, script: str) -> None:
    """Run `script` in bash in `sandbox` (no srun, no scontrol, no tuneup on its PATH),
    with stdin closed; whatever the script does after its payload-free lines is its own
    business (it may fail: srun is absent)."""
    subprocess.run(
        ["bash", "-c", script],
        cwd=sandbox,
        env={"PATH": "/usr/bin:/bin", "HOME": str(sandbox), "SLURM_SUBMIT_DIR": str(sandbox)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )


def planted(sandbox: Path) -> list[str]:
    return sorted(p.name for p in sandbox.rglob("PWNED*"))


def exercise(text: str, fmt: str, target: Path, sandbox: Path) -> None:
    """Run, source or parse one export as its user would."""
    if fmt in ("sbatch", "command"):
        run_in_sandbox(sandbox, f"bash {target}")
    elif fmt == "env":
        run_in_sandbox(sandbox, f". {target}")
    elif fmt == "flags":  # spliced into a command line: $(tuneup export ... --format flags)
        # as the shell splices it, and as a user who pastes it reads it back
        run_in_sandbox(sandbox, f'printf "%s\\n" $(cat {target}); eval "printf %s $(cat {target})"')
    elif fmt in ("yaml", "tuneup"):
        document = yaml.safe_load(text)
        if fmt == "yaml":
            assert list(document) == ["tuned"]
        else:
            assert set(document) == set(knob_names())
    elif fmt == "md":
        title = text.splitlines()[0]
        assert title.startswith("# tuneup: ") and "touch" not in text.split("\n", 1)[1][:1]


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: repr(p)[:24])
def test_hostile_hints_from_session_json_never_run(tmp_path: Path, payload: str) -> None:
    """A results folder someone sent you: its hints and job block hold a payload each."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    hints = {
        **SAFE_HINTS,
        **{key: payload for key in TEXT_HINTS},
        "setup": [f"module load x{payload}", f"first\n{payload}\nthird"],
        "env": {"NCCL_X": payload},
    }
    folder = session_folder(tmp_path, hints=hints, job={"partition": payload})
    refused = []
    for fmt in TUNEUP_FORMATS:
        target = sandbox / f"out.{fmt}"
        text = export_text(folder, fmt, target)
        if text is None:
            refused.append(fmt)
            continue
        exercise(text, fmt, target, sandbox)
        if fmt == "sbatch":  # one word: written as it is, a comment to bash
            assert f"#SBATCH --job-name={payload}\n" in text
    assert planted(sandbox) == []
    # an #SBATCH hint that is not one word cannot be written for sbatch: refused
    one_word = not any(c.isspace() or c in "\"'\\" or not c.isprintable() for c in payload)
    assert ("sbatch" in refused) == (not one_word)


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: repr(p)[:24])
def test_setup_blocks_are_commented_line_by_line(tmp_path: Path, payload: str) -> None:
    """A `setup: |` block of several lines: every line stays a comment in the job script."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    block = "module load cuda\ntouch PWNED-block-line2\ntouch PWNED-block-line3\n"
    folder = session_folder(tmp_path, hints={**SAFE_HINTS, "setup": block})
    target = sandbox / "job.sbatch"
    text = export_text(folder, "sbatch", target)
    assert text is not None
    assert "# touch PWNED-block-line2" in text and "# touch PWNED-block-line3" in text
    run_in_sandbox(sandbox, f"bash {target}")
    assert planted(sandbox) == []
    # a payload in a setup line is data too: refused when it holds a control character
    folder2 = session_folder(tmp_path, "run2", hints={**SAFE_HINTS, "setup": [payload]})
    text2 = export_text(folder2, "sbatch", sandbox / "job2.sbatch")
    if text2 is not None:
        run_in_sandbox(sandbox, f"bash {sandbox / 'job2.sbatch'}")
    assert planted(sandbox) == []


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: repr(p)[:24])
def test_hostile_folder_names_and_values_stay_data(tmp_path: Path, payload: str) -> None:
    """The folder's name goes into the notes of every format; a path knob into the config."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    values = {"train_path": f"/data/{payload}.h5", "expdir": payload}
    folder = session_folder(tmp_path, name=f"run{payload}".replace("/", "_"), values=values)
    for fmt in TUNEUP_FORMATS:
        target = sandbox / f"out.{fmt}"
        text = export_text(folder, fmt, target)
        assert text is not None, fmt  # nothing here needs refusing: all of it can be quoted
        exercise(text, fmt, target, sandbox)
        if fmt == "tuneup":  # the values read back as they were
            document = yaml.safe_load(text)
            assert document["expdir"] == payload
            assert document["train_path"] in (values["train_path"], "<your train.h5>")
    assert planted(sandbox) == []


def command_folder(parent: Path, payload: str) -> Path:
    """A finished `command` session whose section and values hold the payload."""
    section = {
        "run": ["printf", "%s\\n", "ran"],
        "cwd": str(parent / f"work{payload}".replace("/", "_")),
        "flags": {"train_path": "--data={value}", "num_data_workers": "--workers {value}"},
        "env": {"amp_mode": "TRAIN_AMP"},
    }
    Path(section["cwd"]).mkdir(parents=True, exist_ok=True)
    values = {"train_path": payload, "num_data_workers": 4, "amp_mode": "bf16"}
    return session_folder(
        parent, "cmd", values=values, trainer="command", command=section, hints=SAFE_HINTS
    )


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: repr(p)[:24])
def test_command_exports_pass_hostile_values_as_single_words(tmp_path: Path, payload: str):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    folder = command_folder(tmp_path, payload)
    for fmt in ("command", "flags", "env", "sbatch"):
        target = sandbox / f"out.{fmt}"
        text = export_text(folder, fmt, target)
        assert text is not None, fmt
        exercise(text, fmt, target, sandbox)
    assert planted(sandbox) == []
    # the command line hands the script the value as one argument, as the probes did
    done = subprocess.run(
        ["bash", str(sandbox / "out.command")], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert f"--data={payload}".replace("\r", "\n") in done.stdout.replace("\r", "\n")


def test_a_hint_that_cannot_be_one_word_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = session_folder(tmp_path, hints={**SAFE_HINTS, "job_name": "a\ntouch PWNED"})
    with pytest.raises(UsageError) as caught:
        run_export_command(folder, "sbatch", tmp_path / "job.sbatch")
    assert "job_name" in str(caught.value) and "control character \\n" in str(caught.value)
    assert not (tmp_path / "job.sbatch").exists()


# --- -o respects what is there ----------------------------------------------------------


def test_export_onto_a_fifo_feeds_its_reader_and_keeps_the_fifo(tmp_path: Path) -> None:
    folder = session_folder(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(
        target=lambda: got.append(fifo.read_text(encoding="utf-8")), daemon=True
    )
    reader.start()
    assert run_export_command(folder, "env", fifo) == 0
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert got and "# tuneup: environment of" in got[0]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_export_onto_a_device_node_writes_through_it(tmp_path: Path) -> None:
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD here")
    folder = session_folder(tmp_path)
    assert run_export_command(folder, "yaml", null) == 0
    assert stat.S_ISCHR(null.lstat().st_mode)  # still the device, not a plain file
    assert null.read_text() == ""  # and still /dev/null


@pytest.mark.parametrize("target", ["/dev/stdout", ">(cat > got.txt)"])
def test_export_to_stdout_or_a_process_substitution(tmp_path: Path, target: str) -> None:
    folder = session_folder(tmp_path)
    done = subprocess.run(
        [
            "bash",
            "-c",
            f'"{sys.executable}" -m tuneup export {folder} --format env -o {target}; wait',
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    if target == "/dev/stdout":
        assert "# tuneup: environment of" in done.stdout
    else:
        for _ in range(50):  # the substitution's cat may finish just after bash
            if (tmp_path / "got.txt").exists() and (tmp_path / "got.txt").read_text():
                break
            threading.Event().wait(0.1)
        assert "# tuneup: environment of" in (tmp_path / "got.txt").read_text()


def test_a_regular_file_is_still_replaced_whole(tmp_path: Path) -> None:
    folder = session_folder(tmp_path)
    target = tmp_path / "out.env"
    target.write_text("old\n")
    target.chmod(0o640)
    assert run_export_command(folder, "env", target) == 0
    assert "# tuneup: environment of" in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert json.dumps(sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")))
