"""tuneup's own data heals: the synthetic box and its .npy copies in the cache, checked
before use against what was recorded when they were made, made again when damaged, and
said in one line; a full cache disk names TUNEUP_CACHE_DIR and leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tuneup import paths
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.paths import space_text
from tuneup.preset.load import load_preset
from tuneup.probe.plan import plan_probe
from tuneup.probe.types import ProbeBudget
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.session.datakeep import base_values, data_keeper
from tuneup.tuning.session.stage_plans import ladder_reads_npy
from tuneup.unet.datacache import ensure_synthetic_data
from tuneup.unet.made import RECORD, checksum
from tuneup.unet.npy import npy_paths

BOX, VAL_BOX = 16, 16
Usage = namedtuple("Usage", "total used free")


def made(root: Path, npy: bool = False) -> tuple[Path, Path]:
    train, val, fresh = ensure_synthetic_data(BOX, VAL_BOX, 0, root, npy=npy)
    assert fresh
    return train, val


def corrupt_in_place(path: Path) -> None:
    """Bytes of the data overwritten where they lie (size unchanged), as a bad disk or a
    stray `dd conv=notrunc` would."""
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(size // 2)
        file.write(b"\xff" * 4096)


def test_a_truncated_box_is_made_again_whole_and_said(tmp_path: Path) -> None:
    train, _ = made(tmp_path)
    whole = checksum(train)
    os.truncate(train, train.stat().st_size // 3)
    said: list[str] = []
    assert ensure_synthetic_data(BOX, VAL_BOX, 0, tmp_path, npy=False, say=said.append)[2] is False
    (line,) = said
    assert f"the synthetic box in {train.parent}: train.h5 was cut short (" in line
    assert line.endswith("bytes): made it again")
    assert checksum(train) == whole  # the same bytes: the generator is deterministic


def test_a_box_corrupted_in_place_is_found_by_its_checksum(tmp_path: Path) -> None:
    _, val = made(tmp_path)
    whole = checksum(val)
    corrupt_in_place(val)
    stamp = val.stat().st_mtime_ns
    os.utime(val, ns=(stamp, stamp - 10**9))  # even with the time put back as it was
    said: list[str] = []
    ensure_synthetic_data(BOX, VAL_BOX, 0, tmp_path, npy=False, say=said.append)
    assert said == [
        f"the synthetic box in {val.parent}: val.h5 was changed since it was made "
        "(its checksum differs): made it again"
    ]
    assert checksum(val) == whole


def test_a_whole_box_is_not_read_again_by_the_quick_check(tmp_path: Path, monkeypatch) -> None:
    made(tmp_path)
    read: list[Path] = []
    monkeypatch.setattr("tuneup.unet.made.checksum", lambda path: read.append(path) or 0)
    said: list[str] = []
    ensure_synthetic_data(BOX, VAL_BOX, 0, tmp_path, npy=False, thorough=False, say=said.append)
    assert said == [] and read == []


def test_a_box_made_before_records_were_kept_is_read_once_and_kept(tmp_path: Path) -> None:
    train, _ = made(tmp_path)
    (train.parent / RECORD).unlink()
    stamp = train.stat().st_mtime_ns
    said: list[str] = []
    ensure_synthetic_data(BOX, VAL_BOX, 0, tmp_path, npy=False, say=said.append)
    assert said == [] and train.stat().st_mtime_ns == stamp  # kept, not made again
    assert {"train.h5", "val.h5"} <= set(json.loads((train.parent / RECORD).read_text()))
    os.truncate(train, 4096)
    (train.parent / RECORD).unlink()  # no record either: HDF5 itself finds it cut short
    ensure_synthetic_data(BOX, VAL_BOX, 0, tmp_path, npy=False, say=said.append)
    assert "train.h5 was unreadable (the data file" in said[0] and "is cut short" in said[0]


def test_damaged_dali_copies_are_made_again(tmp_path: Path, monkeypatch) -> None:
    train, _ = made(tmp_path, npy=True)
    data, label = npy_paths(train, train.parent)
    expected = np.load(data)
    os.truncate(data, data.stat().st_size - 1000)
    corrupt_in_place(label)
    said: list[str] = []
    ensure_synthetic_data(BOX, VAL_BOX, 0, tmp_path, npy=True, say=said.append)
    (line,) = said
    assert "train_data.npy was cut short (" in line
    assert "train_label.npy was changed since it was made" in line
    assert np.array_equal(np.load(data), expected)


def test_a_full_cache_disk_names_the_variable_and_leaves_no_folder(
    tmp_path: Path, monkeypatch
) -> None:
    need = 2 * 9 * 4 * BOX**3
    monkeypatch.setattr(paths.shutil, "disk_usage", lambda _: Usage(10**9, 0, need - 5000))
    root = tmp_path / "cache"
    with pytest.raises(UsageError) as info:
        ensure_synthetic_data(BOX, VAL_BOX, 0, root, npy=False)
    line = str(info.value)
    assert "TUNEUP_CACHE_DIR" in line and "--box" not in line and "--out" not in line
    assert "need 288.0 KiB, have 283.1 KiB" in line
    assert list(tmp_path.iterdir()) == []


def test_need_and_have_are_shown_until_they_differ() -> None:
    assert space_text(10_800_000, 10_790_000) == "need 10.30 MiB, have 10.29 MiB"
    assert space_text(9_437_184, 8_000_000) == "need 9.0 MiB, have 7.6 MiB"
    assert space_text(2**30 + 10, 2**30) == "need 1,073,741,834 bytes, have 1,073,741,824 bytes"


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["truncated", "corrupted"])
def test_the_check_before_a_probe_mends_the_box_and_the_probe_runs(
    fault: str, tmp_path: Path, monkeypatch, tiny_values: dict[str, Any]
) -> None:
    monkeypatch.setenv("TUNEUP_CACHE_DIR", str(tmp_path / "cache"))
    preset = load_preset("cpu-smoke")
    base = base_values(preset, load_trainer("unet"), None, npy=False)
    check = data_keeper(preset, load_trainer("unet"), base, tmp_path, npy=False)
    assert check is not None and check() is None
    train = Path(base["train_path"])
    if fault == "truncated":
        os.truncate(train, train.stat().st_size // 2)
    else:
        corrupt_in_place(train)
    said = check()
    assert said is not None and "train.h5 was" in said and "made it again" in said
    assert check() is None
    # a probe on the box made again: it reads, trains, and its loss is a number
    config = {**tiny_values, "train_path": str(train), "val_path": base["val_path"]}
    budget = ProbeBudget(trial_s=0.02, min_trials=2, max_trials=2, warmup_cap_s=0.3, loss_steps=3)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"config": config, "plan": plan_probe(budget).to_dict()}))
    done = subprocess.run(
        [sys.executable, "-m", "tuneup.worker", str(spec)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    losses = [json.loads(line)["value"] for line in done.stdout.splitlines() if '"loss"' in line]
    assert len(losses) == 3 and all(np.isfinite(losses))


def test_the_users_damaged_data_is_named_with_what_is_wrong_not_the_preset(
    tmp_path: Path, synthetic_data
) -> None:
    import yaml

    data = tmp_path / "train.h5"
    data.write_bytes(synthetic_data.train_path.read_bytes()[:100_000])
    preset = yaml.safe_load((Path(__file__).parents[1] / "presets" / "cpu-smoke.yaml").read_text())
    preset.pop("synthetic_data")
    preset["train"].update(train_path=str(data), val_path=str(data))
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(preset))
    command = ["probe", "--preset", str(mine), "--stages", "tf32", "--out", str(tmp_path / "r")]
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", *command],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TUNEUP_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert f"the data file {data} is cut short (100,000 of " in last
    assert "train section" not in last and "tuneup doctor" not in last


def test_the_npy_copies_are_made_where_a_ladder_reads_them_without_dali(
    tmp_path: Path, monkeypatch
) -> None:
    """A machine without DALI (or a loader that reads the copies without it) gets them as
    a machine with it does: the need comes from the loaders the ladder runs, never from
    what this process can import."""
    monkeypatch.setitem(sys.modules, "nvidia", None)  # `import nvidia.dali` fails here
    monkeypatch.setenv("TUNEUP_CACHE_DIR", str(tmp_path / "cache"))
    preset = load_preset("cpu-smoke")
    train_values = dict(preset.train)
    proposes_dali = MachineInfo(cpus_usable=2, dali=True)  # its data stage tries dali-lowmem
    assert ladder_reads_npy(("workers", "data"), proposes_dali, train_values, preset)
    assert not ladder_reads_npy(
        ("workers", "data"), MachineInfo(cpus_usable=2), train_values, preset
    )
    npy_baseline = {**train_values, "data_loader_config": "dali-lowmem"}
    assert ladder_reads_npy(("workers",), MachineInfo(cpus_usable=2), npy_baseline, preset)

    base = base_values(preset, load_trainer("unet"), None, npy=True)
    train, val = Path(base["train_path"]), Path(base["val_path"])
    copies = [*npy_paths(train, train.parent), *npy_paths(val, val.parent)]
    assert all(path.is_file() for path in copies)
    for path in copies:
        path.unlink()
    check = data_keeper(preset, load_trainer("unet"), base, tmp_path, npy=True)
    assert check is not None
    said = check()
    assert said is not None and "train_data.npy was gone" in said  # made, then went: said
    assert all(path.is_file() for path in copies)


def test_copies_a_box_never_had_are_made_without_a_word(tmp_path: Path) -> None:
    """A box made for loaders that read no copies, then asked for them (a ladder with the
    data stage on a DALI machine): made, nothing was damaged, nothing to say."""
    train, _ = made(tmp_path)
    said: list[str] = []
    ensure_synthetic_data(BOX, VAL_BOX, 0, tmp_path, npy=True, say=said.append)
    assert said == []
    assert all(path.is_file() for path in npy_paths(train, train.parent))
