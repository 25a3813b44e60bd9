"""Reading the SLURM job and the visible GPUs from the environment."""

from __future__ import annotations

import pytest

from tuneup.hardware.backends import choose_backend
from tuneup.monitor.slurm import (
    JOB_INFO_SOURCES,
    SLURM_VARIABLES,
    JobInfo,
    expand_hostlist,
    parse_visible_devices,
    read_job,
    visible_gpu_indices,
)
from tuneup.testing import FakeGpu, FakeNvml


def test_a_gpu_job_is_read_from_its_variables() -> None:
    env = {
        "SLURM_JOB_ID": "31415",
        "SLURM_JOB_NODELIST": "nid[001-003,010]",
        "SLURM_JOB_GPUS": "0,1,2,3",
        "SLURM_CPUS_PER_TASK": "32",
        "SLURM_JOB_END_TIME": "1767225600",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    }
    assert read_job(env) == JobInfo(
        job_id="31415",
        nodes=("nid001", "nid002", "nid003", "nid010"),
        gpus=(0, 1, 2, 3),
        cpus_per_task=32,
        end_time=1767225600.0,
    )


def test_old_spellings_and_the_step_s_gpus_are_used() -> None:
    env = {
        "SLURM_JOBID": "7",
        "SLURM_NODELIST": "login1",
        "SLURM_JOB_GPUS": "0-3",
        "SLURM_STEP_GPUS": "2,3",
    }
    job = read_job(env)
    assert job is not None
    assert (job.job_id, job.nodes, job.gpus) == ("7", ("login1",), (2, 3))
    assert job.cpus_per_task is None and job.end_time is None


def test_outside_slurm_there_is_no_job() -> None:
    assert read_job({}) is None
    assert read_job({"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_ID": ""}) is None


def test_values_in_an_unexpected_form_are_left_out() -> None:
    job = read_job(
        {
            "SLURM_JOB_ID": "9",
            "SLURM_JOB_GPUS": "gpu:a100:2",
            "SLURM_CPUS_PER_TASK": "lots",
            "SLURM_JOB_END_TIME": "tomorrow",
        }
    )
    assert job == JobInfo(job_id="9")


def test_every_jobinfo_field_is_read_through_the_one_slurm_table() -> None:
    assert set(JOB_INFO_SOURCES) == set(JobInfo.__dataclass_fields__)
    assert set(JOB_INFO_SOURCES.values()) <= set(SLURM_VARIABLES)
    assert all(v.startswith("SLURM_") for names in SLURM_VARIABLES.values() for v in names)


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("nid[001-003,010],login1", ("nid001", "nid002", "nid003", "nid010", "login1")),
        ("gpu[8-11]", ("gpu8", "gpu9", "gpu10", "gpu11")),
        ("r[1-2]n[07-08]", ("r1n07", "r1n08", "r2n07", "r2n08")),
        ("node7", ("node7",)),
        ("odd[a-b]", ("odd[a-b]",)),
    ],
)
def test_hostlists_expand(hostlist: str, hosts: tuple[str, ...]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize(
    ("value", "indices", "note"),
    [
        (None, None, ""),
        ("0,2", [0, 2], ""),
        (" 3 , 1 ", [3, 1], ""),
        ("GPU-8a3f2c1e-0000,GPU-77", None, "UUID"),
        ("MIG-5b0d1b2e-aaaa", None, "MIG"),
        ("", [], "hides every GPU"),
        ("NoDevFiles", [], "hides every GPU"),
        ("1,-1,2", [1], "only [1]"),
    ],
)
def test_cuda_visible_devices_become_nvml_indices(
    value: str | None, indices: list[int] | None, note: str
) -> None:
    visible = parse_visible_devices(value)
    assert visible.indices == indices
    assert note in visible.note and bool(visible.note) == bool(note)
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_gpu_indices(env) == indices


def test_by_default_the_monitor_watches_only_the_job_s_gpus() -> None:
    env = {"SLURM_JOB_ID": "1", "CUDA_VISIBLE_DEVICES": "2,3"}
    nvml = FakeNvml(devices=[FakeGpu(util=25 * i) for i in range(4)])

    backend = choose_backend(visible=visible_gpu_indices(env), nvml_module=nvml)

    assert [d.index for d in backend.devices()] == [2, 3]
    assert [s.util_gpu_pct for s in backend.sample()] == [50, 75]
