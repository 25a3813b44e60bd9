"""`tuneup doctor`: the checks, then (unless --quick) the honesty check; exit 1 on a FAIL."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tuneup.doctor import facts  # a module, so tests can stand in for the machine
from tuneup.doctor.checks import failed, honesty_checks, run_checks
from tuneup.doctor.honesty import preset_case, run_honesty
from tuneup.doctor.render import report_dict, write_json, write_table
from tuneup.preset.autopick import auto_pick, gpu_inventory
from tuneup.preset.load import load_preset
from tuneup.preset.types import ProbePreset
from tuneup.probe.hostload import HostLoadSampler


def run_doctor_command(
    *,
    quick: bool,
    as_json: bool,
    cpu: bool,
    preset: str | None = None,
    out: TextIO | None = None,
) -> int:
    """The report, and the exit status.

    Args:
        preset: the preset whose baseline the honesty check times on the GPU (None: the
            one `tuneup probe` would pick here); one that does not load is a one-line error.
    """
    stream = sys.stdout if out is None else out
    chosen = load_preset(preset) if preset is not None else None  # bad input fails first
    found = facts.gather_facts()  # before anything can start CUDA
    checks = run_checks(found)
    case = None
    if not quick and not cpu and found.torch.cuda_available:
        case = _case(chosen, found)
    honesty, honesty_error = None, None
    if not quick:
        host = HostLoadSampler()  # what else ran while it was timed: the likely cause of a WARN
        host.sample()
        began = time.time()
        host.start()
        try:
            honesty = run_honesty(cpu=cpu, case=case)
        except Exception as exc:  # a failed row: the rest of the report stands
            honesty_error = f"{type(exc).__name__}: {exc}"
        finally:
            ended = time.time()
            host.stop()
            host.sample()
        load = host.contention(began, ended) or found.host_load
        checks += honesty_checks(honesty, honesty_error, load)
    if as_json:
        write_json(stream, report_dict(checks, honesty))
    else:
        write_table(stream, checks)
    return 1 if failed(checks) else 0  # 1: a check failed, as a test runner says


def _case(chosen: ProbePreset | None, found: Any) -> tuple[dict[str, Any], str]:
    """The preset's baseline to time: the chosen one, else the one the ladder would pick."""
    if chosen is None:
        chosen = load_preset(auto_pick(gpu_inventory(), found.cpus_usable, cuda=True).name)
    return preset_case(chosen)
