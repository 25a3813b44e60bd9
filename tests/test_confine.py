"""Under others' load, tuneup runs its probes on the threads the load leaves: torch's own
count fights a busy loop (on a 2-core machine the cpu-smoke baseline ran 85 samples/s on
2 threads beside one, 340-410 on 1), and every figure then measures the load. The choice
is made once, after the first probe, said once, held on both sides of every pair, and
the threads stage, whose knob it holds fixed, is left out and says why."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
from test_hostload import steady_script
from tuneup_plugins.sim import sim_backend

from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.conditions import same_load, unlike
from tuneup.probe.confine import threads_for_load
from tuneup.probe.events import TrialEvent
from tuneup.probe.hostload import HostLoadSampler
from tuneup.probe.load_watch import ContentionWatch
from tuneup.probe.types import Candidate, Contention, ProbeResult, Status
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.stage_rows import stage_rows
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.control import SilentReporter
from tuneup.tuning.session.probe_session import ProbeSession


@pytest.mark.parametrize(
    ("others", "usable", "running", "threads"),
    [
        (0.8, 2, 2, 1),  # a busy loop on a 2-core machine: one core left
        (2.0, 2, 2, 1),  # two of them: still one thread, never none
        (0.5, 2, 2, None),  # half a core: rounded away, nothing to confine
        (4.0, 16, 16, 12),
        (0.8, 2, 1, None),  # already on one thread
    ],
)
def test_the_threads_left_are_the_cores_the_load_does_not_hold(others, usable, running, threads):
    assert threads_for_load(others, usable, running) == threads


def test_the_cap_lowers_only_torchs_own_count_and_never_raises_it(monkeypatch):
    """A config's own count holds; torch's own is lowered to the cap, never raised to it
    (a node whose torch runs fewer threads than its CPUs, or torchrun's one a rank)."""
    from tuneup.unet import runtime

    monkeypatch.setattr(runtime, "_TORCH_THREADS", [8])
    assert runtime.capped_threads(0, 2) == 2
    assert runtime.capped_threads(0, 12) == 0  # torch's own 8 is under the cap: kept
    assert runtime.capped_threads(4, 2) == 4  # the knob's own count
    assert runtime.capped_threads(0, None) == 0


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="torch runs one thread here already")
def test_a_real_probe_runs_on_the_confined_count_and_says_so(tmp_path: Path, monkeypatch):
    """The U-Net worker runs a probe under the cap, its start event says the count it ran,
    and the result is stamped with it; the config journaled is the one searched."""
    from tuneup.probe.events import StartEvent
    from tuneup.probe.types import ProbeBudget
    from tuneup.trainers.backends import WorkerBackend
    from tuneup.unet.datacache import ensure_synthetic_data

    monkeypatch.setenv("TUNEUP_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    train, val, _ = ensure_synthetic_data(32, 16, 0, tmp_path / "cache", npy=False)
    base = {
        "device": "cpu", "levels": 3, "width": 4, "data_size": 8, "global_batch_size": 4,
        "base_batch_size": 4, "data_loader_config": "inmem", "num_data_workers": 0,
        "train_path": str(train), "val_path": str(val),
    }  # fmt: skip
    budget = ProbeBudget(
        trial_s=0.02, min_trials=2, max_trials=2, warmup_cap_s=0.3, loss_steps=4, limit_s=30
    )
    backend = WorkerBackend(tmp_path / "probes", budget, 0)
    assert backend.confine_threads(1)
    result = backend("baseline", Candidate("baseline", {}), dict(base))
    backend.close()
    assert result.ok, result.reason
    (start,) = [e for e in backend.runner.last_run.events if isinstance(e, StartEvent)]
    assert start.config["intra_op_threads"] == 1
    assert result.contention is not None and result.contention.confined_threads == 1
    assert "intra_op_threads" not in result.config


class Confinable(ProbeBackend):
    """A backend that can confine: it runs each probe over the scripted FULL window."""

    def __init__(self, windows: list[tuple[float, float]]) -> None:
        self.windows = iter(windows)
        self.asked: list[int] = []
        self.watch: ContentionWatch | None = None

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        start, end = next(self.windows)
        assert self.watch is not None
        self.watch.on_event(TrialEvent(phase="full", time=end, seconds=end - start))
        held = Contention(confined_threads=self.asked[-1]) if self.asked else None
        return ProbeResult(stage, {}, values, Status.OK, full_sps=10.0, contention=held)

    def confine_threads(self, threads: int) -> bool:
        self.asked.append(threads)
        return True


def watch_over(others: list[float], windows: list[tuple[float, float]]) -> tuple:
    sampler = HostLoadSampler(read=lambda: None)
    sampler.readings.extend(steady_script(others))
    sampler.usable, sampler.hz = 2, 100.0
    backend = Confinable(windows)
    watch = ContentionWatch(backend, sampler, running_threads=2)
    backend.watch = watch
    results = [watch("baseline", Candidate("baseline", {}), {}) for _ in windows]
    return backend, watch, results


def test_a_load_as_the_ladder_begins_confines_the_later_probes_and_the_first_is_measured_again():
    windows = [(101.0, 104.0), (105.0, 106.0), (107.0, 108.0), (109.0, 110.0)]
    backend, watch, results = watch_over([0.8] * 26, windows)
    assert backend.asked == [1] and watch.confined == 1
    first, *later = results
    assert first.contended  # it ran on torch's count: never paired with the rest
    assert "measured before tuneup confined its probes to 1 thread" in first.contention.note
    assert all(r.contention.confined_threads == 1 for r in later)
    # probes of a second each are judged steady on the seconds around them
    assert later[-1].under_load and not later[-1].contended


def test_a_quiet_start_confines_nothing():
    backend, watch, results = watch_over([0.1] * 26, [(101.0, 104.0), (105.0, 108.0)])
    assert backend.asked == [] and watch.confined is None
    assert not any(r.contended for r in results)


def test_sides_on_different_thread_counts_never_pair_and_a_lighter_share_of_one_load_does():
    loaded = Contention(other_cpus=0.7, usable_cpus=2, note="others 0.7", under_load=True)
    on_one = ProbeResult("s", {}, {}, Status.OK, full_sps=10.0, contention=loaded)
    on_own = dataclasses.replace(on_one, contention=dataclasses.replace(loaded, confined_threads=1))
    assert unlike(on_one, on_own) == (
        "one side ran on 1 thread(s) (confined under load), the other on torch's own thread count"
    )
    # a loader's threads took a share of the same loop: 0.45 read, under the contention line
    lighter = dataclasses.replace(on_one, contention=Contention(other_cpus=0.45, usable_cpus=2))
    assert same_load(on_one, lighter)
    quiet = dataclasses.replace(on_one, contention=Contention(other_cpus=0.0, usable_cpus=2))
    assert not same_load(on_one, quiet)


class ConfinedSim(ProbeBackend):
    """The sim, as the watch would hand it back on a busy 2-core machine: the first probe
    on torch's count (contended), the rest confined to 1 thread under a steady load."""

    def __init__(self) -> None:
        self.sim = sim_backend(0, noise=0.0)
        self.calls = 0

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        self.calls += 1
        result = self.sim(stage, candidate, values)
        load = Contention(other_cpus=0.8, usable_cpus=2, note="others used 0.8 of 2 CPUs")
        if self.calls == 1:
            held = dataclasses.replace(load, note=load.note + "; measured before tuneup confined")
        else:
            held = dataclasses.replace(load, under_load=True, confined_threads=1)
        return dataclasses.replace(result, contention=held)


class Notes(SilentReporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)


def test_the_session_says_it_once_and_leaves_the_threads_stage_out(tmp_path: Path):
    machine = MachineInfo(cuda=False, cpus_usable=2)
    preset = load_preset("cpu-smoke")
    plans = [
        StagePlan("threads", [Candidate("1 thread", {"intra_op_threads": 1})], judged="full"),
        StagePlan("optimizer", [Candidate("fused", {"optimizer_impl": "fused"})]),
    ]
    reporter = Notes()
    session = ProbeSession(
        preset=preset,
        adapter=load_trainer("sim"),
        backend=ConfinedSim(),
        results=ResultsDir(tmp_path),
        machine=machine,
        base_values=dict(preset.train),
        plans=plans,
        reporter=reporter,
    )
    session.start(resume=False)
    outcome = session.run()
    said = [line for line in reporter.lines if "runs its probes on 1 thread" in line]
    assert len(said) == 1 and "0.8 of 2 CPUs" in said[0] and "threads stage is left out" in said[0]
    rows = {row.stage: row for row in stage_rows(outcome)}
    assert rows["threads"].result == "not measured: left out under load"
    assert "intra_op_threads" not in outcome.best_values or not outcome.best_values.get(
        "intra_op_threads"
    )
    assert all(p.stage != "threads" or not p.ok for p in outcome.probes)


def test_a_script_is_confined_through_omp_num_threads_unless_someone_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The command trainer cannot call torch.set_num_threads in the user's script: it sets
    OMP_NUM_THREADS for it, never over the user's own or the section's."""
    import sys

    from tuneup_plugins.command.run import CommandBackend
    from tuneup_plugins.command.section import parse_command_section

    from tuneup.probe.types import ProbeBudget

    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys\n"
        "open(sys.argv[1], 'a').write(os.environ.get('OMP_NUM_THREADS', '-') + '\\n')\n"
        "for e in (1, 2, 3):\n"
        "    print(f'INFO - Time taken for epoch {e} is 1.0 sec, avg 50.0 samples/sec')\n",
        encoding="utf-8",
    )
    seen = tmp_path / "seen.txt"
    section = {"run": [sys.executable, str(script), str(seen)], "cwd": str(tmp_path)}
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    backend = CommandBackend(
        parse_command_section(section, "test"), tmp_path / "probes", ProbeBudget(limit_s=30)
    )
    plain = backend("baseline", Candidate("baseline", {}), {})
    assert backend.confine_threads(1)
    confined = backend("baseline", Candidate("baseline", {}), {})
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    users = backend("baseline", Candidate("baseline", {}), {})
    assert seen.read_text().split() == ["-", "1", "4"]
    assert plain.ok and confined.ok and users.ok
    assert plain.contention is None and users.contention is None
    assert confined.contention is not None and confined.contention.confined_threads == 1
    # set before the ladder (OMP_NUM_THREADS, or MKL_NUM_THREADS which torch reads too):
    # the backend declines, so the watch confines nothing and re-measures nothing
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    declines = CommandBackend(
        parse_command_section(section, "test"), tmp_path / "probes2", ProbeBudget(limit_s=30)
    )
    assert not declines.confine_threads(1)


def test_a_resume_on_a_quiet_node_measures_the_threads_stage_a_busy_one_left_out():
    """The remedy the busy run names (`--resume DIR --retry-failed` on a quiet node) must
    work: probes replayed from the journal ran confined, this run's do not, and the threads
    stage runs."""
    from tuneup.tuning.search.staged import staged_search

    confined = Contention(
        other_cpus=0.8, usable_cpus=2, note="others", under_load=True, confined_threads=1
    )

    def measure(stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        rate = 100.0 if values.get("intra_op_threads") == 1 else 90.0
        trials = [rate * (1 + d) for d in (-0.002, 0.0, 0.002)]
        result = ProbeResult(
            stage, dict(candidate.values), dict(values), Status.OK, full_sps=rate,
            full_sps_trials=trials, losses=[0.1, 0.09],
        )  # fmt: skip
        if stage == "baseline" and measure.replays:  # the journal's, as a resume serves them
            measure.replays -= 1
            return dataclasses.replace(result, contention=confined, replayed=True)
        return result

    measure.replays = 2  # type: ignore[attr-defined]
    plan = StagePlan("threads", [Candidate("1 thread", {"intra_op_threads": 1})], judged="full")
    outcome = staged_search({}, [plan], measure, confirm_pairs=0, baseline_repeats=2)
    (decision,) = outcome.stage_decisions
    assert decision.cause != "confined" and any(p.stage == "threads" for p in outcome.probes)


def test_a_plugins_backend_confines_when_it_offers_to_and_not_otherwise():
    """A plugin may hand over a plain callable: it is asked to confine where it has the
    method (typed once, as_backend), and refuses by default."""
    from tuneup.probe.backend import as_backend

    class Offers:
        def __init__(self) -> None:
            self.asked: list[int] = []

        def __call__(self, stage: str, candidate: Candidate, values: dict) -> ProbeResult:
            return ProbeResult(stage, {}, values, Status.OK)

        def confine_threads(self, threads: int) -> bool:
            self.asked.append(threads)
            return True

    offers = Offers()
    assert as_backend(offers).confine_threads(1) and offers.asked == [1]
    plain = as_backend(lambda stage, candidate, values: ProbeResult(stage, {}, values, Status.OK))
    assert not plain.confine_threads(1)


def test_the_grid_leaves_a_thread_count_out_while_probes_are_confined():
    from tuneup.tuning.search.grid import grid_search

    confined = Contention(
        other_cpus=0.8, usable_cpus=2, note="others", under_load=True, confined_threads=1
    )

    def measure(stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        rate = 200.0 if values.get("intra_op_threads") == 2 else 100.0
        return ProbeResult(
            stage, dict(candidate.values), dict(values), Status.OK, full_sps=rate,
            full_sps_trials=[rate] * 3, losses=[0.1, 0.09], contention=confined,
        )  # fmt: skip

    plans = [
        StagePlan("threads", [Candidate("2 threads", {"intra_op_threads": 2})]),
        StagePlan("optimizer", [Candidate("fused", {"optimizer_impl": "fused"})]),
    ]
    outcome = grid_search({}, plans, measure)
    assert "intra_op_threads" not in outcome.best_values
    assert not any(p.config.get("intra_op_threads") for p in outcome.probes)
    threads = next(d for d in outcome.stage_decisions if d.stage == "threads")
    assert "tuneup ran its probes on 1 thread" in threads.reason
