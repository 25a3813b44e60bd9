"""Input read within bounds: JSON that is finite, shallow and small; YAML whose aliases
cannot explode; text files that are text.

Files tuneup reads back (journals, summary.json, session.json, ladder-costs.json,
presets, the tutorial's YAML) may be damaged or come from someone else. Python's json
takes `NaN`, `Infinity` and `1e400` (an infinite float) and recurses once per nesting
level; PyYAML shares an alias's node, so a few lines that alias aliases stand for
billions of values once anything walks them. Each reader here checks its bound before
the costly step and raises `OutOfBounds` (a ValueError) saying which bound and why, for
the caller to word as its own damaged input.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

# Deeper than anything tuneup writes (a journal line nests 5 levels) and far below
# Python's recursion limit.
MAX_DEPTH = 64
MAX_JSON_BYTES = 64 * 2**20  # summary.json of a long ladder with profiles: under 1 MiB
MAX_YAML_BYTES = 2**20  # a preset or a training config: a few KiB
# Values a YAML document stands for once its aliases are expanded (the tutorial's
# UNet.yaml: under 500).
MAX_YAML_VALUES = 100_000

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
# YAML's quoted scalars within a line, and its comments (a # after a space or at a line's
# start): brackets in them nest nothing.
_YAML_QUOTED = re.compile(r"'[^'\n]*'|\"(?:[^\"\\\n]|\\.)*\"")
_YAML_COMMENTS = re.compile(r"(?:^|(?<=\s))#[^\n]*", re.MULTILINE)


class OutOfBounds(ValueError):
    """Input past a bound (too deep, too large, not finite, not text): one line, why."""


def json_depth(text: str) -> int:
    """How deep `text`'s arrays and objects nest, read without parsing it."""
    return _bracket_depth(_STRINGS.sub('""', text))


def yaml_flow_depth(text: str) -> int:
    """How deep `text`'s flow collections ([...], {...}) nest, estimated without parsing it
    (quoted text and comments left out). PyYAML's scanner takes time growing with the
    square of this depth (2,000 levels: over a second before it gives up), so it is
    checked first."""
    return _bracket_depth(_YAML_COMMENTS.sub("", _YAML_QUOTED.sub("''", text)))


def _bracket_depth(text: str) -> int:
    depth = deepest = 0
    for match in _BRACKETS.finditer(text):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _refuse_constant(name: str) -> Any:
    raise OutOfBounds(f"holds {name}, which is no JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise OutOfBounds(f"holds {text}, a number too large to be finite")
    return value


def loads(
    text: str, *, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH, finite: bool = True
) -> Any:
    """`json.loads` within bounds: at most `max_bytes` long and `max_depth` deep, every
    number finite (`finite=False` lets NaN and the infinities through, as Python's json
    reads them: a worker's event line writes a diverged loss so).

    Raises:
        OutOfBounds: a bound crossed, said in words.
        ValueError: not JSON (json.JSONDecodeError).
    """
    if len(text) > max_bytes:
        raise OutOfBounds(f"is {len(text):,} characters long, over the {max_bytes:,} allowed")
    depth = json_depth(text)
    if depth > max_depth:
        raise OutOfBounds(f"nests {depth} levels deep, over the {max_depth} allowed")
    if not finite:
        try:
            return json.loads(text)
        except RecursionError as exc:
            raise OutOfBounds("nests too deep to read") from exc
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as exc:  # bounded above; a guard all the same
        raise OutOfBounds("nests too deep to read") from exc
    except ValueError as exc:
        if isinstance(exc, OutOfBounds) or isinstance(exc.__context__, OutOfBounds):
            raise OutOfBounds(str(exc.__context__ or exc)) from exc
        raise


def read_json(path: Path, *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file read within bounds (its size checked before it is read).

    Raises:
        OSError: it cannot be read.
        OutOfBounds: a bound crossed, or not UTF-8 text.
        ValueError: not JSON.
    """
    return loads(read_text(path, max_bytes=max_bytes), max_bytes=max_bytes)


def read_text(path: Path, *, max_bytes: int) -> str:
    """A text file read whole, if it is at most `max_bytes` long and UTF-8 text.

    Raises:
        OSError: it cannot be read.
        OutOfBounds: too large, binary (a NUL byte) or not UTF-8.
    """
    with path.open("rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OutOfBounds(f"is larger than {max_bytes:,} bytes")
    if b"\0" in data:
        raise OutOfBounds("is a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OutOfBounds(f"is not UTF-8 text (byte {exc.start})") from exc


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int], limit: int) -> int:
    """The values `node` stands for once every alias is expanded, counting each shared
    node once per use (memoised, so a bomb is counted without being expanded)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise OutOfBounds("refers to itself through an alias")
    open_.add(key)
    total = 1
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    for child in children:
        total += _expanded_size(child, sizes, open_, limit)
        if total > limit:
            raise OutOfBounds(
                f"stands for over {limit:,} values once its aliases are expanded (an alias bomb?)"
            )
    open_.discard(key)
    sizes[key] = total
    return total


def yaml_load(text: str, *, max_values: int = MAX_YAML_VALUES) -> Any:
    """`yaml.safe_load` of one document within bounds: aliases allowed (the tutorial's
    config merges blocks with them) while what they expand to stays under `max_values`.

    Raises:
        OutOfBounds: too many values, nested too deep (flow collections checked before
            parsing), an alias cycle, or a value past what Python reads (a 5,000-digit
            integer, a date of month 13).
        yaml.YAMLError: not YAML.
    """
    if len(text) > MAX_YAML_BYTES:
        raise OutOfBounds(f"is {len(text):,} characters long, over the {MAX_YAML_BYTES:,} allowed")
    depth = yaml_flow_depth(text)
    if depth > MAX_DEPTH:
        raise OutOfBounds(f"nests {depth} levels deep, over the {MAX_DEPTH} allowed")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set(), max_values)
        return loader.construct_document(node)
    except RecursionError as exc:
        raise OutOfBounds("nests too deep to read") from exc
    except ValueError as exc:
        if isinstance(exc, OutOfBounds):
            raise
        # PyYAML lets these out bare: an integer of 5,000 digits (int() refuses over 4,300),
        # a date of month 13
        digits = "integer string conversion" in str(exc)
        why = "a number of more than 4,300 digits" if digits else str(exc)
        raise OutOfBounds(f"holds a value that cannot be read ({why})") from exc
    finally:
        loader.dispose()


def read_yaml(path: Path, *, max_values: int = MAX_YAML_VALUES) -> Any:
    """A YAML file read within bounds (`read_text`, then `yaml_load`).

    Raises:
        OSError: it cannot be read.
        OutOfBounds: a bound crossed, binary, or not UTF-8.
        yaml.YAMLError: not YAML.
    """
    return yaml_load(read_text(path, max_bytes=MAX_YAML_BYTES), max_values=max_values)
