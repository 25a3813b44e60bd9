"""The job as the monitor and the app's SETUP show it: read once, by `read_job_env`."""

from __future__ import annotations

import time

import pytest

from tuneup.cluster.job import JobEnv, read_job_env
from tuneup.cluster.slurm import count_hosts, expand_hostlist

NOW = 1767225600 - 3600  # an hour before the job below ends


def read(environ: dict[str, str]) -> JobEnv:
    return read_job_env(environ, affinity=range(4), hostname="nid001", now=NOW)


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


# --- values out of range: left out, each said once, never an error or an absurd figure ------


@pytest.mark.parametrize(
    "value", ["nan", "inf", "-inf", "1e400", "-1", "abc", "0", "1600000000", str(NOW + 20 * 3.2e7)]
)
def test_an_end_time_that_no_allocation_has_is_ignored_and_said(value: str) -> None:
    job = read({"SLURM_JOB_ID": "9", "SLURM_JOB_END_TIME": value})

    assert job.end_time is None and job.seconds_left(NOW) is None
    (ignored,) = job.ignored
    assert ignored.line == (
        f"SLURM_JOB_END_TIME={value!r} is not an end time in epoch seconds, from a day ago "
        "to ten years ahead: ignored"
    )


def test_an_end_time_minutes_past_is_slurm_s_grace_and_kept() -> None:
    job = read({"SLURM_JOB_ID": "9", "SLURM_JOB_END_TIME": str(NOW - 300)})
    assert job.end_time == NOW - 300 and job.ignored == ()


def test_a_host_list_of_a_hundred_million_is_counted_never_expanded() -> None:
    start = time.perf_counter()
    job = read(
        {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[0-99999999]", "SLURM_JOB_NUM_NODES": "2"}
    )
    assert time.perf_counter() - start < 0.1
    assert (job.nodes, job.num_nodes) == ((), 2)
    assert [i.variable for i in job.ignored] == ["SLURM_JOB_NODELIST"]
    assert count_hosts("n[0-99999999],login[1-2]") == 100_000_002
    assert count_hosts("r[1-2]n[07-08],x") == 5 and count_hosts("odd[a-b]") == 1
    assert expand_hostlist("x[0-9]" * 30) is None  # 10**30 hosts, counted


def test_a_host_list_of_thousands_of_brackets_reads_without_recursion() -> None:
    assert expand_hostlist("n" + "[1]" * 5000) == ("n" + "1" * 5000,)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SLURM_JOB_GPUS", "0-99999999"),  # a range of indices, counted first
        ("SLURM_TASKS_PER_NODE", "4(x99999999999)"),
        ("SLURM_TASKS_PER_NODE", "99999(x2)"),
        ("SLURM_NTASKS", "9" * 5000),  # int() refuses 4,300 digits: no ValueError
        ("SLURM_CPUS_PER_TASK", "\u00b2"),  # a digit to str.isdigit, not to int()
        ("SLURM_GPUS_ON_NODE", "1000000"),
        ("SLURM_JOB_NUM_NODES", "1000001"),
    ],
)
def test_counts_and_lists_out_of_range_are_ignored_fast(variable: str, value: str) -> None:
    start = time.perf_counter()
    job = read({"SLURM_JOB_ID": "9", variable: value})
    assert time.perf_counter() - start < 0.1
    assert [i.variable for i in job.ignored] == [variable]
    assert job.ignored[0].line.startswith(f"{variable}=") and len(job.ignored[0].line) < 160


def test_what_was_ignored_goes_to_session_json_too() -> None:
    job = read({"SLURM_JOB_ID": "9", "SLURM_JOB_END_TIME": "nan"})
    assert job.to_dict()["ignored"] == [
        {"name": "end_time", "variable": "SLURM_JOB_END_TIME", "value": "nan"}
    ]
