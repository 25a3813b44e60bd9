"""Reading decoded JSON by type, for the parsers of worker events and summary.json.

A value of the wrong type reads as missing (None, an empty text, list or
mapping): a worker's bug, a stray line or an older file costs that field,
never the reader.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

EMPTY: Mapping[str, Any] = MappingProxyType({})


def empty() -> Mapping[str, Any]:
    """A read-only empty mapping: the default of mapping fields (a dataclass default must
    be hashable, a mapping proxy is not)."""
    return EMPTY


def number(value: Any) -> float | None:
    """A JSON number as float; anything else (missing, text, bool) as None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def finite(value: Any) -> float | None:
    """A finite JSON number as float; NaN, an infinity or anything else as None (a figure
    that is not one: a trial timed at 0 s has an infinite rate, which decides nothing)."""
    found = number(value)
    return found if found is not None and math.isfinite(found) else None


def count(value: Any) -> int | None:
    """A JSON integer (not a bool) as int; anything else as None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def texts(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in as_list(value))


def numbers(value: Any) -> tuple[float, ...]:
    """The numbers of a JSON list, in order (anything else in it dropped); () for a non-list."""
    return tuple(v for v in map(number, as_list(value)) if v is not None)


def finite_numbers(value: Any) -> tuple[float, ...]:
    """The numbers of a JSON list, in order, a NaN or an infinity as NaN (the journal writes
    both as null and reads a NaN back: the trial ran, its figure is none)."""
    return tuple(v if math.isfinite(v) else math.nan for v in numbers(value))


def finite_map(value: Any) -> Mapping[str, float]:
    """A JSON object's finite numeric values under their names; other values dropped."""
    found = {k: v for k, v in number_map(value).items() if math.isfinite(v)}
    return MappingProxyType(found)


def number_map(value: Any) -> Mapping[str, float]:
    """A JSON object's numeric values under their names; other values dropped."""
    if not isinstance(value, dict):
        return EMPTY
    found = {str(k): n for k, n in ((k, number(v)) for k, v in value.items()) if n is not None}
    return MappingProxyType(found)


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else EMPTY


def frozen_map(value: Any) -> Mapping[str, Any]:
    """A read-only copy of a JSON object; the empty mapping for anything else."""
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else EMPTY
