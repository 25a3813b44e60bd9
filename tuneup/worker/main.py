"""The probe worker: ``python -m tuneup.worker SPEC.json [--events-fd N]``.

Runs one probe (:class:`~tuneup.probe.types.ProbeSpec`) in this process and
streams its events as JSON lines (:mod:`tuneup.probe.events`): to stdout, or
to the inherited file descriptor N. When events go to stdout, everything
else written to stdout (the trainer's prints, C libraries, loader workers)
is sent to stderr at the file-descriptor level, so the stream stays clean.

The measurement itself is :func:`tuneup.worker.phases.run_probe`. Seeds: the
spec's ``seed`` replaces the config's, so all probes of a session train the
same weights on the same crops. Validation is skipped (the validation box is
not even loaded): a probe measures training only.

Exit status: 0 after ``result``; 2 when the spec file cannot be read (one
line on stderr, no events); 3 after an ``error`` event; 130 on Ctrl-C.

Test hook: when ``TUNEUP_WORKER_FAULT`` is ``oom``, ``hang``, ``kill``,
``crash`` or ``compile``, the worker fakes that failure right after the
``start`` event (raises ``torch.OutOfMemoryError``, sleeps forever, sends
itself SIGKILL, raises ``RuntimeError``, raises an ``AssertionError`` from a
torch.compile frame), so the parent's handling can be tested without a
GPU. ``NAME:knob=value`` limits the fault to probes whose config has that
value, so one rung of a ladder fails and the rest run; ``NAME:rank=N`` to
rank N of a multi-rank probe, so one rank fails and the others see it;
``NAME:once=FILE`` to the first probe that creates FILE (a fault that does
not come back). It is for tests only.

Several ranks (torchrun or srun): rank 0 speaks for the job; every rank
writes its own ``error`` event, tagged with its rank. Each trial edge
gathers every rank's seconds (one all_gather), so the slowest rank sets the
job's rate and the result names each rank's own rate and the stragglers
(:mod:`tuneup.worker.phases`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tuneup import __version__
from tuneup.config import INPUT_CHANNELS, TrainConfig, build_config, loader_round
from tuneup.errors import ExitCode, UsageError
from tuneup.probe.events import EventWriter, classify_error, describe_error
from tuneup.probe.plan import ProbeSpec
from tuneup.unet.distributed import destroy_process_group, dist_env_from, exit_skipping_teardown
from tuneup.unet.flops import flops_per_sample, math_mode, peak_tflops
from tuneup.unet.runtime import TF32_ENV, set_tf32_env
from tuneup.worker.compile_cache import compile_cache_folders, mend_compile_cache, said
from tuneup.worker.phases import Profiler, run_probe
from tuneup.worker.profile import OFF_ENV as PROFILE_OFF_ENV
from tuneup.worker.profile import STEPS as PROFILE_STEPS
from tuneup.worker.profile import profile_steps, take_profile
from tuneup.worker.workload import DeviceTimer, SetupWorkload

FAULT_ENV = "TUNEUP_WORKER_FAULT"
FAULTS = ("oom", "hang", "kill", "crash", "compile")
EXIT_PROBE_FAILED = ExitCode.PROBE_FAILED


def process_start_time() -> float:
    """Wall-clock time this process was forked (Linux /proc, 10 ms ticks); else now.

    Measured from the fork, so interpreter start-up and imports count as spawn cost.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rpartition(")")[2].split()
        start_ticks = int(fields[19])  # field 22 of stat(5); fields[0] is field 3
        ticks = os.sysconf("SC_CLK_TCK")
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / ticks
        return time.time() - max(age, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


def load_spec(path: Path) -> ProbeSpec:
    """Read and check a spec file; every problem is a UsageError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read probe spec {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"probe spec {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise UsageError(f"probe spec {path} must be a JSON object with a 'config' mapping")
    try:
        spec = ProbeSpec.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"probe spec {path} has a bad field: {exc}") from None
    spec.plan.check()
    return spec


def open_events(events_fd: int | None) -> IO[str]:
    """The event stream; without a descriptor, stdout's, with fd 1 pointed at stderr."""
    if events_fd is not None:
        os.set_inheritable(events_fd, False)
        return os.fdopen(events_fd, "w", encoding="utf-8")
    sys.stdout.flush()
    events = os.dup(1)
    os.dup2(2, 1)  # prints, C libraries and loader workers now write to stderr
    return os.fdopen(events, "w", encoding="utf-8")


def fault_for(setting: str, config: dict[str, object], rank: int = 0) -> str | None:
    """Which fault the test hook asks of this probe (and this rank).

    `NAME` hits every probe; `NAME:knob=value` only probes whose config has that
    value, so one rung of a ladder fails; `NAME:rank=N` only rank N;
    `NAME:once=FILE` only the first probe to create FILE (a transient fault);
    several rules are joined with commas.
    """
    for rule in filter(None, (part.strip() for part in setting.split(","))):
        name, _, condition = rule.partition(":")
        knob, _, wanted = condition.partition("=")
        if knob == "once":
            try:
                Path(wanted).open("x").close()
            except FileExistsError:
                continue
            return name
        value = rank if knob == "rank" else config.get(knob)
        if not condition or str(value) == wanted:
            return name
    return None


def simulate_fault(name: str) -> None:
    """The test hook (see the module docstring)."""
    if name == "oom":
        import torch  # torch: only after the spec is read and TF32 is set

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    if name == "hang":
        while True:
            time.sleep(3600)
    if name == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if name == "crash":
        raise RuntimeError(f"simulated crash ({FAULT_ENV}=crash)")
    if name == "compile":  # as torch 2.11's Inductor failed on a channels_last_3d backward
        raised_in = {"__name__": "torch._functorch._aot_autograd.simulated"}
        exec(f"raise AssertionError('simulated compile failure ({FAULT_ENV}=compile)')", raised_in)
    print(
        f"tuneup worker: ignoring {FAULT_ENV}={name!r} (known: {', '.join(FAULTS)})",
        file=sys.stderr,
    )


def _gather_ranks(device: Any, world_size: int) -> Callable[[float], list[float]]:
    """Every rank's seconds, in rank order: one all_gather per trial edge.

    The tensors live on the training device, as NCCL requires; all_gather
    (not all_gather_into_tensor) so gloo serves CPU ranks too.
    """
    import torch  # torch: only after the spec is read and TF32 is set
    import torch.distributed as dist  # torch: only after the spec is read and TF32 is set

    def gather(seconds: float) -> list[float]:
        mine = torch.tensor([seconds], dtype=torch.float64, device=device)
        every = [torch.empty_like(mine) for _ in range(world_size)]
        dist.all_gather(every, mine)
        return [float(value) for value in torch.cat(every).cpu().tolist()]

    return gather


def _mend_before_compile(jit: str, local_rank: int) -> str:
    """Rid the compile caches of what a killed compile left (one rank a node), said in
    the probe's log; returns the line for the start event, "" when nothing was removed."""
    if jit != "compile" or local_rank != 0:
        return ""
    removed = mend_compile_cache(compile_cache_folders(os.environ))
    if not removed:
        return ""
    line = said(removed)
    print(f"tuneup worker: {line}", file=sys.stderr, flush=True)
    return line


def run(
    spec: ProbeSpec,
    events: EventWriter,
    started: float,
    *,
    served: int | None = None,
    trace: Path | None = None,
) -> None:
    """Build the trainer and measure; raises whatever goes wrong (main classifies it).

    Args:
        spec: the probe.
        events: where its events go.
        started: when starting this probe began: the process start for the
            first probe of a process, else the moment its spec arrived.
        served: None in a process of its own; in a serving process
            (serve.py), the probes it ran before this one.
        trace: where a profile's trace goes (the plan says whether one is taken).
    """
    cfg = build_config({**spec.config, "seed": spec.seed}, source="the probe spec")
    rounds = loader_round(cfg.data_loader_config, cfg.num_data_workers)
    plan = dataclasses.replace(spec.plan, loader_round=rounds)
    if served is None:
        set_tf32_env(cfg.tf32)
    # torch, and the modules that import it, only now: NVIDIA_TF32_OVERRIDE is read
    # when CUDA starts, so it is set first. A serving process never sets it (it would
    # hold for every later probe): TF32 is switched by torch's backend flags there.
    import torch

    # torch: only after the spec is read and TF32 is set
    from tuneup.unet.build import build_training, preflight

    cfg = _under_cap(cfg, spec.threads_cap)

    env = dist_env_from(os.environ)
    events.enabled = env.is_main
    if env.distributed:
        events.context["rank"] = env.rank  # errors come from every rank
    device = preflight(cfg, env)
    name = torch.cuda.get_device_name(device.index) if device.type == "cuda" else "cpu"
    mended = _mend_before_compile(cfg.jit, env.local_rank)
    events.emit(
        "start",
        tuneup=__version__,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        device=name,
        device_type=device.type,
        world_size=env.world_size,
        pid=os.getpid(),
        startup_s=time.time() - started,
        config=cfg.to_dict(),
        plan=plan.to_dict(),
        seed=spec.seed,
        served=served or 0,
        mended=mended,  # said on the console too (the session's reporter)
    )
    fault = fault_for(os.environ.get(FAULT_ENV, ""), cfg.to_dict(), env.rank)
    if fault:
        simulate_fault(fault)
    try:
        with warnings.catch_warnings():
            if served is not None:  # TF32 off by the flags alone is this process's way
                warnings.filterwarnings("ignore", message=f"CUDA started before {TF32_ENV}")
            setup = build_training(dataclasses.replace(cfg, Nsamples_val=0), env)
        start_costs = {"setup" if served else "spawn": time.time() - started}
        timer = DeviceTimer(setup.device)
        workload = SetupWorkload(setup, timer)
        run_probe(
            workload,
            plan,
            samples_per_batch=setup.global_batch,
            timer=timer,
            emit=events.emit,
            start_costs=start_costs,
            gather=_gather_ranks(setup.device, env.world_size) if env.distributed else one_rank,
            profile=_profiler(workload, cfg, name, trace if env.is_main else None, env.distributed),
        )
    finally:
        destroy_process_group()


def _profiler(
    workload: SetupWorkload, cfg: Any, device_name: str, trace: Path | None, ranks: bool
) -> Profiler | None:
    """The probe's profile (worker/profile.py), with the model's FLOPs and the GPU's peak for
    its MFU. Every rank of several profiles the same fixed steps (DDP steps them together);
    the first writes the trace."""
    if os.environ.get(PROFILE_OFF_ENV, "1") == "0":
        return None
    peak = peak_tflops(device_name, math_mode(cfg.amp_mode, cfg.tf32))

    def profile(steps: int, steady_step_s: float | None) -> dict[str, Any]:
        count = PROFILE_STEPS[0] * 2 if ranks else profile_steps(steps)
        return take_profile(
            workload,
            count,
            trace,
            flops_per_sample=flops_per_sample(
                cfg.data_size, cfg.width, cfg.unet_levels, INPUT_CHANNELS, cfg.N_out_channels
            ),
            peak_tflops=peak,
            steady_step_s=steady_step_s,
        )

    return profile


def one_rank(seconds: float) -> list[float]:
    return [seconds]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tuneup.worker",
        description="Run one probe and stream its events as JSON lines.",
    )
    parser.add_argument("spec", type=Path, help="probe spec (JSON of a ProbeSpec)")
    parser.add_argument(
        "--events-fd",
        type=int,
        default=None,
        metavar="N",
        help="write events to inherited file descriptor N instead of stdout",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    started = process_start_time()
    args = _parse_args(argv)
    try:
        spec = load_spec(args.spec)
        stream = open_events(args.events_fd)
    except UsageError as exc:
        print(f"tuneup worker: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except OSError as exc:
        print(f"tuneup worker: error: events fd {args.events_fd}: {exc.strerror}", file=sys.stderr)
        return ExitCode.USAGE
    return measure(spec, EventWriter(stream), started, trace=trace_path(args.spec))


def trace_path(spec: Path) -> Path:
    """A profile's trace beside the probe's spec: NNNN-stage.trace.json.gz."""
    return spec.with_name(f"{spec.stem}.trace.json.gz")


def measure(
    spec: ProbeSpec,
    events: EventWriter,
    started: float,
    served: int | None = None,
    trace: Path | None = None,
    recover: Callable[[str], bool] | None = None,
) -> int:
    """Run one probe (`run`); its exit status, a failure told as an `error` event first.

    `recover` (a serving worker's) is asked, with the failure's kind, whether this
    process is sound to serve on; the error event says so (``kept``) and the status is
    then 0. It runs after the exception is gone, so what the failed probe held is freed.
    """
    try:
        run(spec, events, started, served=served, trace=trace)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except Exception as exc:
        failure = (classify_error(exc), describe_error(exc))
        traceback.print_exc()  # stderr is the probe's diagnostic log
    else:
        return ExitCode.OK
    kind, message = failure
    if recover is not None and recover(kind):
        events.error(kind, message, kept=True)
        return ExitCode.OK
    events.error(kind, message)
    return EXIT_PROBE_FAILED


def exit_with(code: int) -> None:
    """Exit with `code`; a rank of several skips the interpreter's teardown (gloo's
    abort after every event was written); the runner reaps what is left."""
    if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):
        exit_skipping_teardown(code)
    sys.exit(code)


def _under_cap(cfg: TrainConfig, cap: int | None) -> TrainConfig:
    """Under others' load: the config on the lesser of the cap and torch's own count (the
    start event's config says which ran). Imports torch: call it once torch may start."""
    from tuneup.unet.runtime import capped_threads

    return dataclasses.replace(cfg, intra_op_threads=capped_threads(cfg.intra_op_threads, cap))
