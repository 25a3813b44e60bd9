"""A worker that runs several probes in a row: ``python -m tuneup.worker --serve [--events-fd N]``.

Starting a process costs a probe more than its measurement on most machines
(interpreter and torch import, CUDA start, cuDNN autotuning, compile caches
warmed): a serving process pays that once for the probes of a stage. The
runner (tuneup.probe.resident) writes one spec path per line on stdin, each a JSON
string (so no character of a path can split it); each
probe runs exactly as in a process of its own (main.run: the config built
afresh from its fixed seed, a new model, optimizer and loader) and streams the
same events, its ``result`` (or ``error``) ending it. EOF on stdin ends the
process.

What a probe leaves behind is released before the next starts: torch.compile's
graphs (torch._dynamo.reset), the setup and its loader (whose worker processes
are joined), the CUDA caching allocator's blocks and its peak counter, DALI's
unused pools. What stays is what a process keeps by design: imported modules,
the CUDA context, compile caches on disk, and caches a later probe does read,
which is why the probes that share a process agree on what fills it
(config.process_kind): cuDNN's algorithm cache, consulted whatever
cudnn_benchmark says (a process benchmarks or does not). TorchScript's
compiled and profiled functions are forgotten (`forget_torchscript`), so each
probe scripts its model afresh. TF32 is switched by torch's backend flags only
(NVIDIA_TF32_OVERRIDE would hold for every later probe). The runner starts a
fresh process for what must not share one (the baseline, the confirmation,
several ranks).

After a failure (an exception, an OOM) the process writes the ``error``
event and exits with status 3: the next probe starts in a fresh process,
with nothing carried over. One failure is survived: torch.compile's own
machinery failing (``compile``: raised in Python, in tracing, in Inductor or
in its checks of a compiled step's tensors, not by a kernel). Then the failed
probe's state is released, the device must still run a kernel, and the error
event says ``kept``: the next probe is served here, so it does not pay a new
process and cuDNN's searches again (on an H200, 78 s after torch 2.11's
Inductor failed on bf16 + channels_last).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import IO

from tuneup.errors import ExitCode, UsageError
from tuneup.probe.events import EventWriter
from tuneup.unet.runtime import TF32_ENV
from tuneup.worker.main import load_spec, measure, open_events, process_start_time, trace_path

EXIT_RELEASE_FAILED = 4


def release_probe_state() -> None:
    """Drop what the last probe left in this process, so the next one starts clean.

    In this order: torch.compile's graphs and TorchScript's compiled functions first
    (they hold cycles and CUDA-graph pools), then a collection of what the probe made
    (the setup, its loader iterators and their worker processes), then the
    allocators' unused blocks.
    """
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()
    forget_torchscript()
    gc.collect()
    # What survives is the process's own (modules, caches): frozen, the next collection
    # scans only what the next probe makes (a full scan of torch's objects takes 0.1 s).
    gc.freeze()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    dali = sys.modules.get("nvidia.dali.backend")
    release = getattr(dali, "ReleaseUnusedMemory", None)
    if release is not None:  # DALI's device and pinned pools live as long as the process
        release()


SURVIVED_FAILURES = frozenset({"compile"})


def sound_after(kind: str) -> bool:
    """Whether this process may serve the next probe after one failed with `kind`."""
    if kind not in SURVIVED_FAILURES:
        return False
    try:
        release_probe_state()
        return device_runs()
    except Exception:
        print("tuneup worker: not sound after the failed probe:", file=sys.stderr)
        traceback.print_exc()
        return False


def device_runs() -> bool:
    """The device still runs a kernel and returns its answer (a CUDA error is sticky: the
    context that had one fails every later call), and no stream is left capturing."""
    torch = sys.modules.get("torch")
    if torch is None or not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return True
    if torch.cuda.is_current_stream_capturing():
        return False
    total = float((torch.ones(8, device="cuda") * 2).sum().item())
    torch.cuda.synchronize()
    return total == 16.0


def forget_torchscript() -> None:
    """Make the next torch.jit.script compile afresh: TorchScript keeps a module class's
    compiled type, and a function's compiled form, with its profiled and specialised
    plans, for the process's life; the next probe's scripted model gets new ones."""
    state = sys.modules.get("torch.jit._state")
    recursive = sys.modules.get("torch.jit._recursive")
    for cache in ("_jit_caching_layer", "_jit_function_overload_caching"):
        getattr(getattr(state, cache, None), "clear", lambda: None)()
    store = getattr(recursive, "concrete_type_store", None)
    for cache in ("type_store", "methods_compiled"):
        getattr(getattr(store, cache, None), "clear", lambda: None)()


def serve(control: IO[str], stream: IO[str], started: float) -> int:
    """Run the probes whose spec paths arrive on `control`, one by one, until EOF.

    Returns the process's exit status: 0 at EOF, 2 for a spec that cannot be
    read, 3 after a probe failed, 4 when releasing a finished probe's state
    failed, 130 when interrupted.
    """
    served = 0
    while True:
        line = control.readline()
        if not line:
            return ExitCode.OK
        if not line.strip():
            continue
        try:
            path = json.loads(line)  # a JSON string: a path may hold any character
        except ValueError:
            path = line.strip()  # a bare path (an older runner)
        began = started if served == 0 else time.time()
        events = EventWriter(stream)
        try:
            spec = load_spec(Path(path))
        except UsageError as exc:
            events.error("other", str(exc))
            print(f"tuneup worker: error: {exc}", file=sys.stderr)
            return ExitCode.USAGE
        code = measure(
            spec, events, began, served, trace=trace_path(Path(path)), recover=sound_after
        )
        if code != ExitCode.OK:
            return code
        served += 1
        try:
            release_probe_state()
        except Exception:
            # Before the next spec is read: the runner sees this process end between two
            # probes and starts the next in a fresh one; no probe is blamed.
            print("tuneup worker: releasing the last probe's state failed:", file=sys.stderr)
            traceback.print_exc()
            return EXIT_RELEASE_FAILED


def main(argv: list[str] | None = None) -> int:
    started = process_start_time()
    parser = argparse.ArgumentParser(
        prog="python -m tuneup.worker --serve",
        description="Run the probes whose spec paths arrive on stdin, one JSON string per line.",
    )
    parser.add_argument("--serve", action="store_true", required=True)
    parser.add_argument("--events-fd", type=int, default=None, metavar="N")
    args = parser.parse_args(argv)
    try:
        stream = open_events(args.events_fd)
    except OSError as exc:
        print(f"tuneup worker: error: events fd {args.events_fd}: {exc.strerror}", file=sys.stderr)
        return ExitCode.USAGE
    os.environ.pop(TF32_ENV, None)  # the backend flags switch TF32 here, probe by probe
    return serve(sys.stdin, stream, started)
