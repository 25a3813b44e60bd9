"""Every path a user names is checked the same way: one line, exit 2, nothing written."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tuneup.cli import main
from tuneup.errors import UsageError
from tuneup.paths import StorageFault, output_file, output_folder, problem
from tuneup.tuning.results.journal import ResultsDir


def tuneup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuneup", *args], capture_output=True, text=True, timeout=120
    )


def read_only() -> Path | None:
    """A folder no one may write to here (/sys), as a read-only mount would be."""
    target = Path("/sys/tuneup-check")
    return target if os.access("/sys", os.F_OK) else None


def test_each_kind_of_bad_path_is_one_line_naming_the_flag_and_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    through = blocker / "x.yaml"
    with pytest.raises(UsageError, match=rf"{blocker} is a file, not a folder: give -o another"):
        output_file(through, "-o", "the export's file")
    with pytest.raises(UsageError, match="it is a folder: give -o a file name"):
        output_file(tmp_path, "-o", "the export's file")
    long_name = tmp_path / ("n" * 300) / "x.yaml"
    with pytest.raises(UsageError, match=r"too long .* give --metrics a shorter one"):
        output_file(long_name, "--metrics", "the metrics file")
    full = OSError(errno.ENOSPC, "No space left on device")
    assert "no space left on the device: free some or give --record" in problem(
        tmp_path, full, "--record", "the trace file"
    )
    assert output_folder(tmp_path / "new" / "deep", "--out", "the results folder").is_dir()
    fine = output_file(tmp_path / "made" / "x.yaml", "-o", "the export's file")
    assert fine.parent.is_dir() and not fine.exists()  # checked, not created


@pytest.mark.parametrize(
    "args",
    [
        ["export", "{session}", "--format", "yaml", "-o", "{bad}/tuned.yaml"],
        ["train", "--set", "max_steps=1", "--metrics", "{bad}/metrics.jsonl"],
        ["monitor", "--once", "--record", "{bad}/gpus.jsonl"],
        ["probe", "--trainer", "sim", "--out", "{bad}/run"],
    ],
    ids=["export -o", "train --metrics", "monitor --record", "probe --out"],
)
def test_every_front_end_refuses_a_path_through_a_file_the_same_way(
    args: list[str], tmp_path: Path, sim_session: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    done = tuneup(*(a.format(bad=blocker, session=sim_session) for a in args))
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "internal error" not in line and "Traceback" not in line
    assert line.startswith("tuneup: error: cannot use ") and "is a file, not a folder" in line
    assert blocker.read_text() == "x"


@pytest.mark.skipif(read_only() is None, reason="no read-only folder here")
def test_a_read_only_place_for_an_export_is_one_line_not_an_internal_error(
    sim_session: Path,
) -> None:
    done = tuneup("export", str(sim_session), "--format", "yaml", "-o", f"{read_only()}/t.yaml")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "give -o" in done.stderr


def test_a_results_folder_that_is_not_one_says_why(tmp_path: Path) -> None:
    missing = tuneup("probe", "--resume", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "(no such folder)" in missing.stderr
    empty = tuneup("export", str(tmp_path), "--format", "yaml")
    assert empty.returncode == 2 and "(no session.json in it)" in empty.stderr


@pytest.fixture(scope="module")
def sim_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("paths") / "run"
    done = tuneup("probe", "--trainer", "sim", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while a file is written: its content reaches the disk cut short."""

    def no_space(fd: int) -> None:
        os.ftruncate(fd, 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("tuneup.paths.os.fsync", no_space)


def test_an_export_onto_a_full_disk_leaves_the_earlier_one_whole(
    sim_session: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    target = tmp_path / "job.sbatch"
    assert main(["export", str(sim_session), "--format", "sbatch", "-o", str(target)]) == 0
    earlier = target.read_text()
    target.chmod(0o750)  # the user made it executable: a new export keeps that
    _full_disk(monkeypatch)
    capsys.readouterr()
    assert main(["export", str(sim_session), "--format", "sbatch", "-o", str(target)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "no space left on the device" in line and "the earlier job.sbatch is unchanged" in line
    assert target.read_text() == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sbatch"]  # no temporary left
    monkeypatch.undo()
    assert main(["export", str(sim_session), "--format", "yaml", "-o", str(target)]) == 0
    assert target.read_text() != earlier and target.stat().st_mode & 0o777 == 0o750


def test_a_new_export_on_a_full_disk_is_not_left_empty(
    sim_session: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    _full_disk(monkeypatch)
    target = tmp_path / "tuned.yaml"
    assert main(["export", str(sim_session), "--format", "yaml", "-o", str(target)]) == 2
    assert "no file was made" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_apps_export_on_a_full_disk_keeps_the_earlier_files(
    sim_session: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("textual")
    from tuneup.tui.screens.results import export_all

    folder = tmp_path / "session"
    shutil.copytree(sim_session, folder)
    values = ResultsDir(folder).summary().recommendation.values
    before = {p: p.read_text() for p in export_all(values, folder)}
    _full_disk(monkeypatch)
    with pytest.raises(StorageFault, match="is unchanged"):
        export_all({**values, "num_data_workers": 7}, folder)
    assert {p: p.read_text() for p in before} == before
