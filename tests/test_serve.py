"""The real serving worker: a probe in a reused process trains exactly as in a fresh one,
and a failure inside one (an exception, an OOM, a killed worker) costs that probe alone."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

from tuneup.cluster.launch import LocalLauncher
from tuneup.probe.events import Event, StartEvent
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import ProbeBudget, ProbeResult, Status
from tuneup.worker.serve import serve

BUDGET = ProbeBudget(
    trial_s=0.01, min_trials=2, max_trials=2, warmup_cap_s=0.2, loss_steps=3, limit_s=120
)


class Pids:
    def __init__(self) -> None:
        self.pids: list[int | None] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, StartEvent):
            self.pids.append(event.pid)


def probe(runner: ProbeRunner, values: dict[str, Any], *, key: str | None = "cpu") -> ProbeResult:
    spec = ProbeSpec(config={**values, "Nsamples": 256}, plan=plan_probe(BUDGET))
    return runner.run("stage", {}, spec, reuse=key)


def around_a_failure(
    tmp_path, values: dict[str, Any], monkeypatch, fault: str
) -> tuple[Pids, tuple[ProbeResult, ProbeResult, ProbeResult]]:
    """A served probe, one that fails with `fault` (set off by bf16), and the probe after."""
    monkeypatch.setenv("TUNEUP_WORKER_FAULT", f"{fault}:amp_mode=bf16")
    pids = Pids()
    runner = ProbeRunner(LocalLauncher(), tmp_path, on_event=pids, grace_s=2.0)
    try:
        first = probe(runner, values)
        failed = probe(runner, {**values, "amp_mode": "bf16"})
        after = probe(runner, values)
    finally:
        runner.close()
    return pids, (first, failed, after)


@pytest.mark.slow
def test_a_served_probe_trains_exactly_as_in_a_fresh_process(tmp_path, tiny_values):
    pids = Pids()
    runner = ProbeRunner(LocalLauncher(), tmp_path, on_event=pids)
    try:
        alone = probe(runner, tiny_values, key=None)
        other = probe(runner, {**tiny_values, "optimizer_impl": "fused", "global_batch_size": 8})
        served = probe(runner, tiny_values)
    finally:
        runner.close()

    assert [r.status for r in (alone, other, served)] == [Status.OK] * 3
    assert (alone.served_before, other.served_before, served.served_before) == (0, 0, 1)
    assert pids.pids[1] == pids.pids[2] != pids.pids[0]
    # The same fixed-seed losses, step for step: nothing the other probe did carried over.
    assert served.losses == pytest.approx(alone.losses, rel=1e-6)
    assert "setup" in served.one_time_s and "spawn" not in served.one_time_s
    assert "spawn" in alone.one_time_s


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "status", "words"),
    [
        ("crash", Status.CRASH, "simulated crash"),
        ("oom", Status.OOM, "out of memory"),
        ("kill", Status.CRASH, "SIGKILL"),
    ],
)
def test_a_failure_in_a_served_process_costs_that_probe_alone(
    tmp_path, tiny_values, monkeypatch, fault, status, words
):
    pids, (first, failed, after) = around_a_failure(tmp_path, tiny_values, monkeypatch, fault)

    assert first.status is Status.OK
    assert failed.status is status and words in failed.reason
    assert failed.served_before == 1
    # The next probe starts a fresh process, and measures as the first did.
    assert after.status is Status.OK and after.served_before == 0
    assert pids.pids[0] == pids.pids[1] != pids.pids[2]
    assert after.losses == pytest.approx(first.losses, rel=1e-6)
    assert failed.transient is (fault == "kill")


@pytest.mark.slow
def test_a_compile_failure_is_survived_and_the_next_probe_is_served_as_if_fresh(
    tmp_path, tiny_values, monkeypatch
):
    # On the H200 a respawn after torch.compile failed cost 78 s (a new process, cuDNN's
    # searches again): the worker checks itself sound and serves on instead.
    pids, (first, failed, after) = around_a_failure(tmp_path, tiny_values, monkeypatch, "compile")

    assert failed.status is Status.CRASH
    assert failed.reason.startswith("compile error: AssertionError: simulated compile failure")
    assert (first.served_before, failed.served_before, after.served_before) == (0, 1, 2)
    assert pids.pids[0] == pids.pids[1] == pids.pids[2]
    assert after.status is Status.OK and "spawn" not in after.one_time_s
    assert after.losses == pytest.approx(first.losses, rel=1e-6)


@pytest.mark.slow
def test_serve_reads_spec_paths_until_eof_and_stops_after_a_failure(tmp_path, tiny_values):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(ProbeSpec(config=tiny_values, plan=plan_probe(BUDGET)).to_dict()))
    bad = tmp_path / "bad.json"
    refused = {**tiny_values, "cuda_graphs": True, "amp_mode": "fp16"}  # refused anywhere
    bad.write_text(json.dumps(ProbeSpec(config=refused, plan=plan_probe(BUDGET)).to_dict()))

    done = subprocess.run(
        [sys.executable, "-m", "tuneup.worker", "--serve"],
        input=f"{good}\n\n{good}\n{bad}\n{good}\n",
        capture_output=True,
        text=True,
        timeout=300,
    )

    lines = [json.loads(line) for line in done.stdout.splitlines()]
    # Two probes served, the third refused, and nothing after it: the process ended.
    assert [e["served"] for e in lines if e["event"] == "start"] == [0, 1]
    assert [e["event"] for e in lines].count("result") == 2
    assert lines[-1]["event"] == "error" and lines[-1]["kind"] == "unsupported"
    assert done.returncode == 3


def test_serve_ends_at_eof_and_refuses_a_spec_it_cannot_read(tmp_path):
    events = io.StringIO()
    assert serve(io.StringIO(""), events, 0.0) == 0
    assert events.getvalue() == ""

    code = serve(io.StringIO(f"{tmp_path / 'missing.json'}\n"), events, 0.0)

    line = json.loads(events.getvalue())
    assert code == 2 and line["event"] == "error" and "missing.json" in line["message"]


def test_the_serving_worker_is_python_m_tuneup_worker_serve():
    launcher = LocalLauncher(python="/opt/py/bin/python")
    assert launcher.serve_command() == ["/opt/py/bin/python", "-m", "tuneup.worker", "--serve"]


@pytest.mark.slow
def test_each_probe_in_a_shared_process_scripts_its_model_afresh() -> None:
    script = """
import warnings
import torch
from tuneup.unet.model import UNet, l1_rho_loss
from tuneup.worker.serve import release_probe_state
warnings.simplefilter("ignore")
def scripted():
    return torch.jit.script(UNet(4, 5, 4, 3)), torch.jit.script(l1_rho_loss)
def same(a, b):
    return a[0]._c._type() == b[0]._c._type(), a[1].qualified_name == b[1].qualified_name
first, again = scripted(), scripted()
release_probe_state()
after = scripted()
print(*same(first, again))
print(*same(first, after))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    kept, released = done.stdout.split("\n")[:2]
    assert kept == "True True"  # TorchScript's own cache, within a probe
    assert released == "False False"  # a new compiled type and function for the next
