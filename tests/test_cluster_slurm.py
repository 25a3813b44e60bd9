"""The job a session runs in, read from fake SLURM environments and described in one line."""

from __future__ import annotations

import dataclasses

import pytest

from tuneup.cluster.job import JobEnv, cpus_per_gpu, default_layout, describe, read_job_env
from tuneup.cluster.slurm import SLURM_VARIABLES, tasks_per_node

# A Perlmutter-like batch job: 2 nodes of 4 A100s, 4 tasks of 32 CPUs on each.
TWO_NODES = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "nid[001-002]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NTASKS": "8",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_GPUS_ON_NODE": "4",
    "SLURM_JOB_GPUS": "0,1,2,3",
    "SLURM_CPUS_PER_TASK": "32",
    "SLURM_CPUS_ON_NODE": "128",
    "SLURM_JOB_END_TIME": "10000",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURM_JOB_ACCOUNT": "m1234",
}


def read(environ: dict[str, str], **kwargs) -> JobEnv:
    kwargs.setdefault("affinity", range(8))
    kwargs.setdefault("hostname", "nid001")
    kwargs.setdefault("now", 10000 - 3600)  # an hour before the job's end
    return read_job_env(environ, **kwargs)


def test_a_multi_node_gpu_job_is_read_whole() -> None:
    job = read(TWO_NODES)

    assert job == JobEnv(
        source="slurm",
        hostname="nid001",
        cpus_usable=8,
        job_id="4242",
        nodes=("nid001", "nid002"),
        num_nodes=2,
        ntasks=8,
        tasks_per_node=(4, 4),
        gpus_on_node=4,
        gpus=(0, 1, 2, 3),
        cpus_per_task=32,
        cpus_on_node=128,
        end_time=10000.0,
        partition="gpu",
        account="m1234",
    )
    assert default_layout(job) == (4, 2)
    assert job.to_dict()["nodes"] == ["nid001", "nid002"]


def test_a_single_node_job_with_old_spellings_and_an_index_list_of_gpus() -> None:
    job = read(
        {
            "SLURM_JOBID": "7",
            "SLURM_NODELIST": "gpu17",
            "SLURM_NNODES": "1",
            "SLURM_NPROCS": "1",
            "SLURM_TASKS_PER_NODE": "1",
            "SLURM_STEP_GPUS": "2,3",
            "SLURM_JOB_GPUS": "0-3",
        }
    )

    assert (job.job_id, job.nodes, job.num_nodes, job.ntasks) == ("7", ("gpu17",), 1, 1)
    assert job.gpus_on_node == 2  # the step's GPUs, not the job's
    assert default_layout(job) == (2, 1)


def test_uneven_tasks_per_node_are_expanded_node_by_node() -> None:
    assert tasks_per_node("4(x2),2") == (4, 4, 2)
    env = {**TWO_NODES, "SLURM_JOB_NUM_NODES": "3", "SLURM_TASKS_PER_NODE": "4(x2),2"}
    assert read(env).tasks_per_node == (4, 4, 2)
    # --ntasks-per-node is preferred, and means the same count on every node.
    assert read({**TWO_NODES, "SLURM_NTASKS_PER_NODE": "2"}).tasks_per_node == (2, 2)


def test_a_cpu_only_node_runs_one_rank() -> None:
    env = {**TWO_NODES, "SLURM_GPUS_ON_NODE": "0"}
    del env["SLURM_JOB_GPUS"]
    job = read(env, gpu_count=4)  # SLURM's word beats the driver's count

    assert job.gpus_on_node == 0
    assert default_layout(job) == (1, 2)
    assert "no GPU" in describe(job, now=0)


def test_a_job_that_names_only_its_id_falls_back_to_what_was_found() -> None:
    job = read({"SLURM_JOB_ID": "1"}, gpu_count=3)

    assert job.in_slurm
    assert (job.nodes, job.num_nodes, job.ntasks, job.tasks_per_node) == ((), 1, None, None)
    assert job.gpus_on_node == 3
    assert (job.cpus_per_task, job.end_time, job.partition, job.account) == (None,) * 4


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("SLURM_JOB_NUM_NODES", "two", "num_nodes"),
        ("SLURM_NTASKS", "-3", "ntasks"),
        ("SLURM_TASKS_PER_NODE", "4(x)", "tasks_per_node"),
        ("SLURM_GPUS_ON_NODE", "gpu:a100:4", "gpus_on_node"),
        ("SLURM_JOB_GPUS", "gpu:a100:4", "gpus"),
        ("SLURM_CPUS_PER_TASK", "lots", "cpus_per_task"),
        ("SLURM_CPUS_ON_NODE", "0", "cpus_on_node"),
        ("SLURM_JOB_END_TIME", "tomorrow", "end_time"),
    ],
)
def test_garbage_values_are_left_out_not_fatal(variable: str, value: str, field: str) -> None:
    env = {**TWO_NODES, variable: value}
    if field == "gpus_on_node":
        env["SLURM_JOB_GPUS"] = "gpu:a100:4"
    job = read(env)

    expected = {"num_nodes": 2}.get(field)  # the node list still says how many nodes
    assert getattr(job, field) == expected
    garbled = {field, "gpus"} if field == "gpus_on_node" else {field}  # both GPU variables
    said = [i.variable for i in job.ignored if i.name == field]
    assert said == [variable]  # and said once, naming it
    assert f"{variable}={value!r} is not " in job.ignored_value(field).line  # type: ignore[union-attr]
    others = {f.name for f in dataclasses.fields(JobEnv)} - garbled - {"ignored"}
    assert {f: getattr(job, f) for f in others} == {f: getattr(read(TWO_NODES), f) for f in others}


def test_outside_slurm_the_job_is_this_machine() -> None:
    job = read_job_env({"CUDA_VISIBLE_DEVICES": "0"}, affinity={0, 1}, gpu_count=0, hostname="lap")

    assert (job.source, job.nodes, job.num_nodes, job.job_id) == ("local", ("lap",), 1, None)
    assert default_layout(job) == (1, 1)
    assert describe(job) == "local machine: 2 CPUs usable, no GPU"
    assert describe(dataclasses.replace(job, gpus_on_node=4)) == (
        "local machine: 2 CPUs usable, 4 GPUs"
    )


def test_affinity_is_read_from_this_process_by_default() -> None:
    import os

    assert read_job_env({}).cpus_usable == len(os.sched_getaffinity(0))


def test_describe_says_where_probes_run_and_how_long_is_left() -> None:
    job = read(TWO_NODES)

    assert describe(job, now=10000 - 3720) == (
        "SLURM job 4242: 2 nodes (nid001, nid002), 4 GPUs/node, 32 CPUs/task, "
        "8 CPUs usable here, 1h02m left"
    )
    assert describe(job, now=20000).endswith("time limit reached")
    big = dataclasses.replace(job, nodes=tuple(f"nid{i:03d}" for i in range(1, 129)), num_nodes=128)
    assert "128 nodes (nid001, nid002, ..., nid128)" in describe(big, now=0)


def test_cpus_are_shared_among_the_ranks_of_a_node() -> None:
    job = read(TWO_NODES)  # 8 usable CPUs here

    assert cpus_per_gpu(job, 4) == 2
    assert cpus_per_gpu(job, 3) == 2
    assert cpus_per_gpu(job, 16) == 1  # never zero


def test_every_variable_in_the_table_is_a_slurm_one() -> None:
    assert all(v.startswith("SLURM_") for names in SLURM_VARIABLES.values() for v in names)
