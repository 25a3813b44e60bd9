"""The job as the monitor and the app's SETUP show it: read once, by `read_job_env`."""

from __future__ import annotations

import pytest

from tuneup.cluster.job import JobEnv, read_job_env
from tuneup.cluster.slurm import expand_hostlist


def read(environ: dict[str, str]) -> JobEnv:
    return read_job_env(environ, affinity=range(4), hostname="nid001")


def test_a_gpu_job_is_read_from_its_variables() -> None:
    env = {
        "SLURM_JOB_ID": "31415",
        "SLURM_JOB_NODELIST": "nid[001-003,010]",
        "SLURM_JOB_GPUS": "0,1,2,3",
        "SLURM_CPUS_PER_TASK": "32",
        "SLURM_JOB_END_TIME": "1767225600",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    }
    job = read(env)
    assert (job.job_id, job.nodes, job.gpus, job.cpus_per_task, job.end_time) == (
        "31415",
        ("nid001", "nid002", "nid003", "nid010"),
        (0, 1, 2, 3),
        32,
        1767225600.0,
    )


def test_old_spellings_and_the_step_s_gpus_are_used() -> None:
    env = {
        "SLURM_JOBID": "7",
        "SLURM_NODELIST": "login1",
        "SLURM_JOB_GPUS": "0-3",
        "SLURM_STEP_GPUS": "2,3",
    }
    job = read(env)
    assert job.in_slurm
    assert (job.job_id, job.nodes, job.gpus) == ("7", ("login1",), (2, 3))
    assert job.cpus_per_task is None and job.end_time is None


def test_outside_slurm_there_is_no_job() -> None:
    for env in ({}, {"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_ID": ""}):
        job = read(env)
        assert not job.in_slurm
        assert (job.job_id, job.gpus, job.end_time) == (None, None, None)


def test_values_in_an_unexpected_form_are_left_out() -> None:
    job = read(
        {
            "SLURM_JOB_ID": "9",
            "SLURM_JOB_GPUS": "gpu:a100:2",
            "SLURM_CPUS_PER_TASK": "lots",
            "SLURM_JOB_END_TIME": "tomorrow",
        }
    )
    assert job.job_id == "9"
    assert (job.nodes, job.gpus, job.cpus_per_task, job.end_time) == ((), None, None, None)


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


def test_the_job_s_gpus_go_to_session_json_as_a_list() -> None:
    assert read({"SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0,1"}).to_dict()["gpus"] == [0, 1]
    assert read({}).to_dict()["gpus"] is None
