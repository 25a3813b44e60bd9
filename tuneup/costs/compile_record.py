"""What a cold torch.compile cost, remembered for the probes its cache then spares.

Probes keep torch.compile's caches in tuneup's cache folder
(cluster.launch.compile_cache_env), so a graph is compiled once per machine
and later probes find it warm. The cost a user's own first run pays is the
cold one: this record keeps it, by configuration, and a warm probe reports it
as `compile_cold_s` beside its own (small) first-steps cost.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tuneup.bundled import read_cache_record, write_cache_record
from tuneup.probe.types import ProbeResult, probe_key

FILE = "cold-compile-costs.json"
MAX_COLD_S = 86_400.0  # a compile of a day is a damaged figure, never one to report


def _seconds(value: object) -> bool:
    """Whether a kept figure is a cold compile's seconds (a damaged one is left out)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return 0 <= value <= MAX_COLD_S


class ColdCompileCosts:
    """A JSON file of cold compile seconds by configuration; unreadable reads as empty."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / FILE

    def _read(self) -> dict[str, float]:
        data = read_cache_record(self.path)
        return {k: float(v) for k, v in data.items() if _seconds(v)}

    def cold_s(self, values: dict[str, Any], device: str) -> float | None:
        return self._read().get(_key(values, device))

    def remember(self, values: dict[str, Any], device: str, seconds: float) -> None:
        """Keep `seconds` as the cold cost of `values` on `device`."""
        known = self._read()
        known[_key(values, device)] = round(seconds, 3)
        write_cache_record(self.path, known)

    def apply(self, result: ProbeResult, values: dict[str, Any]) -> ProbeResult:
        """Remember a cold compile's cost; give a warm one the cold cost measured before."""
        if not result.ok:
            return result
        if result.compile_cache == "cold" and "first_steps" in result.one_time_s:
            self.remember(values, result.device, result.one_time_s["first_steps"])
            return result
        if result.compile_cache == "warm":
            return replace(result, compile_cold_s=self.cold_s(values, result.device))
        return result


def _key(values: dict[str, Any], device: str) -> str:
    """A graph's identity: the configuration, and the device it was compiled for (a home
    folder's cache may be shared by nodes of several kinds)."""
    return f"{probe_key(values)}|{device}"
