"""Launch commands (one rank, torchrun, srun), layout checks, and launchers' failure reports."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tuneup.cluster.job import JobEnv, read_job_env
from tuneup.cluster.launch import (
    JOB_PORT_LOW,
    JOB_PORT_SPAN,
    LaunchPlan,
    LocalLauncher,
    OneGpuLauncher,
    RankFailure,
    SrunLauncher,
    TorchrunLauncher,
    check_plan,
    free_port,
    job_port,
    rank_failures,
)
from tuneup.errors import UsageError

SPEC = Path("/runs/probes/0003-ddp.json")
SLURM_2X4 = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "nid[001-003]",
    "SLURM_JOB_NUM_NODES": "3",
    "SLURM_GPUS_ON_NODE": "4",
    "SLURM_CPUS_PER_TASK": "32",
}

# Where the children's torch.compile caches go under TUNEUP_CACHE_DIR=/c.
COMPILE = {
    "TORCHINDUCTOR_CACHE_DIR": "/c/compile/inductor",
    "TRITON_CACHE_DIR": "/c/compile/triton",
    "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
    "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
}


def slurm_job(hostname: str = "nid001", **extra: str) -> JobEnv:
    return read_job_env({**SLURM_2X4, **extra}, affinity=range(128), hostname=hostname)


LOCAL_CPU = read_job_env({}, affinity=range(2), gpu_count=0, hostname="laptop")


def test_torchrun_runs_n_local_ranks_with_its_own_rendezvous() -> None:
    launcher = TorchrunLauncher(4, python="/py")

    assert launcher.command(SPEC) == [
        "/py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "4",
        "-m",
        "tuneup.worker",
        str(SPEC),
    ]
    # Rank variables the parent may carry would make the worker join the parent's job.
    env = launcher.env(
        {
            "PATH": "/bin",
            "TUNEUP_CACHE_DIR": "/c",
            "RANK": "3",
            "WORLD_SIZE": "8",
            "MASTER_PORT": "1",
        }
    )
    assert env == {"PATH": "/bin", "TUNEUP_CACHE_DIR": "/c", "PYTHONUNBUFFERED": "1", **COMPILE}


def test_srun_spans_nodes_with_the_first_node_as_master() -> None:
    launcher = SrunLauncher(
        nodes=2,
        tasks_per_node=4,
        cpus_per_task=32,
        gpus_per_task=1,
        master_addr="nid001",
        master_port=23456,
        nodelist=("nid001", "nid002"),
        python="/py",
    )

    assert launcher.command(SPEC) == [
        "srun",
        "--nodes",
        "2",
        "--ntasks",
        "8",
        "--ntasks-per-node",
        "4",
        "--cpus-per-task",
        "32",
        "--kill-on-bad-exit=1",
        "--gpus-per-task",
        "1",
        "--nodelist",
        "nid001,nid002",
        "/py",
        "-m",
        "tuneup.worker",
        str(SPEC),
    ]
    env = launcher.env({"PATH": "/bin", "TUNEUP_CACHE_DIR": "/c", "RANK": "0"})
    assert env == {
        "PATH": "/bin",
        "TUNEUP_CACHE_DIR": "/c",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "nid001",
        "MASTER_PORT": "23456",
        **COMPILE,
    }


def test_compiled_graphs_are_kept_in_tuneups_cache_unless_the_user_chose_a_place() -> None:
    env = LocalLauncher().env({"TUNEUP_CACHE_DIR": "/c", "TRITON_CACHE_DIR": "/mine/triton"})

    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/c/compile/inductor"
    assert env["TRITON_CACHE_DIR"] == "/mine/triton"
    assert env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1"


def test_srun_on_cpu_nodes_asks_for_no_gpus() -> None:
    launcher = SrunLauncher(
        nodes=2, tasks_per_node=1, cpus_per_task=8, master_addr="a", master_port=1
    )

    argv = launcher.command(SPEC)
    assert "--gpus-per-task" not in argv and "--nodelist" not in argv
    assert argv[argv.index("--ntasks") + 1] == "2"


def test_a_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("", port))  # raises if someone holds it
    assert 0 < port < 65536


def test_the_port_for_another_master_is_agreed_from_the_job_id() -> None:
    ports = {job_port(str(job_id)) for job_id in range(1000, 1200)}

    assert job_port("4242") == job_port("4242")
    assert all(JOB_PORT_LOW <= p < JOB_PORT_LOW + JOB_PORT_SPAN for p in ports)
    assert 29500 not in ports  # torchrun's default, busy on shared nodes
    assert len(ports) > 150  # spread out: two jobs rarely pick the same


@pytest.mark.parametrize(
    ("plan", "ranks", "kind", "nproc"),
    [
        (LaunchPlan(), None, LocalLauncher, None),
        (LaunchPlan(nproc=4), None, TorchrunLauncher, 4),
        (LaunchPlan(nproc=4), 2, TorchrunLauncher, 2),
        (LaunchPlan(nproc=4, nodes=2), 4, TorchrunLauncher, 4),
        (LaunchPlan(nproc=4, nodes=2), None, SrunLauncher, None),
        (LaunchPlan(nproc=4, nodes=2), 1, OneGpuLauncher, None),
    ],
)
def test_the_plan_picks_the_launcher_for_a_probe_s_ranks(
    plan: LaunchPlan, ranks: int | None, kind: type, nproc: int | None
) -> None:
    launcher = plan.launcher_for(ranks, slurm_job())

    assert isinstance(launcher, kind)
    if nproc is not None:
        assert launcher.nproc == nproc


def test_srun_probe_uses_the_allocation_s_first_nodes_and_a_free_port_here() -> None:
    launcher = LaunchPlan(nproc=4, nodes=2).launcher_for(None, slurm_job())

    assert isinstance(launcher, SrunLauncher)
    assert (launcher.nodes, launcher.tasks_per_node) == (2, 4)
    assert launcher.nodelist == ("nid001", "nid002")
    assert (launcher.cpus_per_task, launcher.gpus_per_task) == (32, 1)
    assert launcher.master_addr == "nid001"
    with socket.socket() as sock:
        sock.bind(("", launcher.master_port))


def test_srun_probe_from_another_node_uses_the_job_s_port() -> None:
    launcher = LaunchPlan(nproc=4, nodes=2).launcher_for(None, slurm_job(hostname="login07"))

    assert isinstance(launcher, SrunLauncher)
    assert launcher.master_addr == "nid001"
    assert launcher.master_port == job_port("4242")


def test_srun_without_cpus_per_task_shares_the_node_s_cpus() -> None:
    job = read_job_env(
        {**SLURM_2X4, "SLURM_CPUS_PER_TASK": "", "SLURM_CPUS_ON_NODE": "64"},
        affinity=range(64),
        hostname="nid001.cluster.example",  # gethostname() may add the domain
    )
    launcher = LaunchPlan(nproc=4, nodes=2).launcher_for(None, job)

    assert isinstance(launcher, SrunLauncher)
    assert launcher.cpus_per_task == 16
    with socket.socket() as sock:  # this host is the master: the port was checked here
        sock.bind(("", launcher.master_port))


def test_a_one_rank_reference_sees_only_the_first_gpu() -> None:
    launcher = LaunchPlan(nproc=4).launcher_for(1, slurm_job())

    assert launcher.command(SPEC)[-3:] == ["-m", "tuneup.worker", str(SPEC)]
    assert launcher.env({"CUDA_VISIBLE_DEVICES": "2,3,4,5"})["CUDA_VISIBLE_DEVICES"] == "2"
    assert launcher.env({})["CUDA_VISIBLE_DEVICES"] == "0"
    # A session of one rank, or a CPU-only machine, keeps the environment as it is.
    for plan, job in ((LaunchPlan(), slurm_job()), (LaunchPlan(nproc=2), LOCAL_CPU)):
        assert "CUDA_VISIBLE_DEVICES" not in plan.launcher_for(1, job).env({})


@pytest.mark.parametrize(
    ("plan", "ranks", "words"),
    [
        (LaunchPlan(nproc=4), 8, "raise --nproc/--nodes"),
        (LaunchPlan(nproc=4), 0, "0 ranks"),
        (LaunchPlan(nproc=4, nodes=2), 6, "multiple of --nproc"),
    ],
)
def test_ranks_the_plan_cannot_give_are_refused(plan: LaunchPlan, ranks: int, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        plan.launcher_for(ranks, slurm_job())


@pytest.mark.parametrize(
    ("plan", "job", "which", "words"),
    [
        (LaunchPlan(nproc=0), LOCAL_CPU, "/usr/bin/srun", "--nproc must be at least 1"),
        (LaunchPlan(nodes=0), LOCAL_CPU, "/usr/bin/srun", "--nodes must be at least 1"),
        (LaunchPlan(nodes=2), LOCAL_CPU, "/usr/bin/srun", "needs a SLURM allocation"),
        (LaunchPlan(nodes=4), slurm_job(), "/usr/bin/srun", "has 3 nodes: lower --nodes"),
        (LaunchPlan(nodes=2), slurm_job(), None, "srun, which is not on PATH"),
    ],
)
def test_layouts_the_job_cannot_run_are_refused_in_one_line(
    plan: LaunchPlan, job: JobEnv, which: str | None, words: str
) -> None:
    with pytest.raises(UsageError, match=words) as caught:
        check_plan(plan, job, which=lambda name: which)
    assert "\n" not in str(caught.value)


def test_layouts_the_job_can_run_pass() -> None:
    check_plan(LaunchPlan(nproc=2), LOCAL_CPU, which=lambda name: None)  # torchrun needs no srun
    check_plan(LaunchPlan(nproc=4, nodes=3), slurm_job(), which=lambda name: "/usr/bin/srun")


def test_local_launcher_uses_this_interpreter() -> None:
    assert LocalLauncher().command(SPEC)[0] == sys.executable


TORCHRUN_REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
tuneup.worker FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-21_21:24:12
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 17399)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 17399
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_21:24:12
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 17398)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 17398
=======================================================
"""


def test_torchrun_s_report_names_each_failed_rank() -> None:
    assert rank_failures(TORCHRUN_REPORT.splitlines()) == [
        RankFailure(rank=0, exitcode=-15),
        RankFailure(rank=1, exitcode=-9, root_cause=True),
    ]


def test_srun_s_error_lines_name_the_failed_tasks() -> None:
    lines = [
        "srun: error: nid002: task 5: Exited with exit code 3",
        "srun: error: nid001: tasks 0-1,3: Killed",
        "srun: error: nid002: task 6: Segmentation fault",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        "srun: error: nid002: task 7: Something new",
    ]
    failures = rank_failures(lines)

    assert [(f.rank, f.exitcode) for f in failures] == [(5, 3), (0, -9), (1, -9), (3, -9), (6, -11)]
    assert failures[0].signal is None and failures[1].signal == 9
