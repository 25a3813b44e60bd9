"""`tuneup doctor`: the checks, then (unless --quick) the honesty check; exit 1 on a FAIL."""

from __future__ import annotations

import sys
from typing import TextIO

from tuneup.doctor import facts  # a module, so tests can stand in for the machine
from tuneup.doctor.checks import failed, honesty_checks, run_checks
from tuneup.doctor.honesty import run_honesty
from tuneup.doctor.render import report_dict, write_json, write_table


def run_doctor_command(*, quick: bool, as_json: bool, cpu: bool, out: TextIO | None = None) -> int:
    stream = sys.stdout if out is None else out
    checks = run_checks(facts.gather_facts())  # before anything can start CUDA
    honesty, honesty_error = None, None
    if not quick:
        try:
            honesty = run_honesty(cpu=cpu)
        except Exception as exc:  # a failed row: the rest of the report stands
            honesty_error = f"{type(exc).__name__}: {exc}"
        checks += honesty_checks(honesty, honesty_error)
    if as_json:
        write_json(stream, report_dict(checks, honesty))
    else:
        write_table(stream, checks)
    return 1 if failed(checks) else 0  # 1: a check failed, as a test runner says
