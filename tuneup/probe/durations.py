"""Durations as people write and read them: "10m", "1h30", SLURM's "HH:MM:SS" in; "3 min
20 s" out. Pure."""

from __future__ import annotations


def duration_text(seconds: float) -> str:
    """As people read it: "45 s", "3 min 20 s", "12 min", "2 h 05 min"."""
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    if seconds < 9.5 * 60:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s" if rest else f"{minutes} min"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in "90s", "10m", "1.5h", "1h30m", "1h30" (a number after a unit counts in
    the next smaller one, as a clock reads: 1 h 30 min; "2m30" is 2 min 30 s) or SLURM's
    "HH:MM:SS" / "MM:SS".

    Raises:
        ValueError: anything else, with what would be understood.
    """
    raw = text.strip().lower().replace(" ", "")
    fix = "give it with a unit (90s, 10m, 1h30m, 1h30) or as HH:MM:SS"
    if not raw:
        raise ValueError(f"an empty duration: {fix}")
    if ":" in raw:
        parts = raw.split(":")
        if len(parts) > 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"{text!r} is not a duration: {fix}")
        seconds = 0.0
        for part in parts:
            seconds = seconds * 60 + int(part)
        return _positive(seconds, text, fix)
    seconds, number, last = 0.0, "", ""
    for char in raw:
        if char.isdigit() or char == ".":
            number += char
        elif char in _UNITS and number:
            seconds += _amount(number, char, text, fix)
            number, last = "", char
        else:
            raise ValueError(f"{text!r} is not a duration: {fix}")
    if number:
        smaller = _NEXT_SMALLER.get(last)
        if smaller is None:
            raise ValueError(f"{text!r} has no unit: {fix}")
        seconds += _amount(number, smaller, text, fix)
    return _positive(seconds, text, fix)


_NEXT_SMALLER = {"h": "m", "m": "s"}  # "1h30" is 1 h 30 min, "2m30" 2 min 30 s


def _amount(number: str, unit: str, text: str, fix: str) -> float:
    try:
        return float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not a duration: {fix}") from None


def _positive(seconds: float, text: str, fix: str) -> float:
    if not seconds > 0:
        raise ValueError(f"{text!r} is no time at all: {fix}")
    return seconds
