"""tuneup.bounded: JSON, YAML and text read within bounds, each refusal fast and in words."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tuneup.bounded import (
    MAX_DEPTH,
    OutOfBounds,
    json_depth,
    loads,
    read_json,
    read_text,
    read_yaml,
    yaml_flow_depth,
    yaml_load,
)


def alias_bomb(levels: int = 9) -> str:
    """A few hundred bytes that stand for 10**levels values once their aliases expand."""
    lines = ['l0: &l0 ["x","x","x","x","x","x","x","x","x","x"]']
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * 10) + "]")
    return "\n".join([*lines, f"train:\n  levels: *l{levels - 1}\n"])


# The tutorial's own config shape: named blocks merged from a base with `<<: *anchor`.
TUTORIAL = """\
base: &base
  num_epochs: 4
  lr_schedule: {scaling: 'none', start_lr: 2.E-4}
  box_size: [1024, 512]
short: &short
  <<: *base
  num_epochs: 2
short_opt:
  <<: *short
  enable_jit: !!bool True
"""


@pytest.mark.parametrize("text", ["NaN", "[1, Infinity]", '{"a": -Infinity}', "[1e400]"])
def test_json_numbers_that_are_not_finite_are_refused(text: str) -> None:
    with pytest.raises(OutOfBounds):
        loads(text)


def test_plain_json_reads_as_json() -> None:
    assert loads('{"a": [1, 2.5, "x[{"], "b": null}') == {"a": [1, 2.5, "x[{"], "b": None}
    assert json_depth('{"a": ["[[[["]]}') == 2  # brackets in a string nest nothing


def test_json_nesting_is_refused_before_it_is_parsed() -> None:
    start = time.perf_counter()
    with pytest.raises(OutOfBounds, match="nests 200000 levels deep"):
        loads("[" * 200_000 + "]" * 200_000)
    assert time.perf_counter() - start < 0.5
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


def test_json_over_its_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OutOfBounds, match="over the 10 allowed"):
        loads("[" + "1," * 10 + "1]", max_bytes=10)
    path = tmp_path / "big.json"
    path.write_text("[" + "0," * 1000 + "0]")
    with pytest.raises(OutOfBounds, match="larger than 100 bytes"):
        read_json(path, max_bytes=100)


def test_a_binary_or_undecodable_file_is_no_text(tmp_path: Path) -> None:
    binary = tmp_path / "x.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(OutOfBounds, match="is a binary file, not text"):
        read_text(binary, max_bytes=1000)
    with pytest.raises(OutOfBounds, match="is a binary file, not text"):
        read_yaml(binary)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(OutOfBounds, match=r"is not UTF-8 text \(byte 9\)"):
        read_yaml(latin)


def test_an_alias_bomb_is_refused_fast_without_expanding_it() -> None:
    start = time.perf_counter()
    with pytest.raises(OutOfBounds, match="alias bomb"):
        yaml_load(alias_bomb())
    assert time.perf_counter() - start < 0.5


def test_an_alias_cycle_is_refused() -> None:
    with pytest.raises(OutOfBounds, match="refers to itself"):
        yaml_load("a: &a [1, *a]\n")


def test_the_tutorials_merge_keys_still_load() -> None:
    data = yaml_load(TUTORIAL)
    assert data["short"]["num_epochs"] == 2
    assert data["short"]["box_size"] == [1024, 512]  # from the base
    assert data["short_opt"] == {
        "num_epochs": 2,
        "lr_schedule": {"scaling": "none", "start_lr": 2e-4},
        "box_size": [1024, 512],
        "enable_jit": True,
    }


def test_a_few_shared_values_are_no_bomb() -> None:
    """An anchor used a few times over stays far below the cap."""
    text = "a: &a {x: 1, y: [1, 2, 3]}\n" + "".join(f"k{i}: *a\n" for i in range(1000))
    assert len(yaml_load(text)) == 1001


def test_yaml_flow_nesting_is_refused_before_pyyaml_reads_it() -> None:
    """PyYAML's scanner slows with the square of a flow collection's depth: 2,000 levels
    took it over a second to refuse; counted first, 200,000 take well under one."""
    start = time.perf_counter()
    with pytest.raises(OutOfBounds, match="nests 200000 levels deep"):
        yaml_load("[" * 200_000)
    assert time.perf_counter() - start < 0.5


def test_brackets_in_quotes_and_comments_nest_nothing() -> None:
    text = "run: 'python x.py --a " + "[" * 100 + "'\nb: \"" + "{" * 100 + '"\n# ' + "[" * 100
    assert yaml_flow_depth(text) == 0
    assert yaml_load(text)["run"].endswith("[" * 100)


def test_yaml_over_its_size_is_refused() -> None:
    with pytest.raises(OutOfBounds, match="characters long"):
        yaml_load("a: " + "x" * 2**21)


def test_deep_block_nesting_is_refused_in_words() -> None:
    start = time.perf_counter()
    with pytest.raises(OutOfBounds, match="nests too deep"):
        yaml_load("- " * 100_000 + "x")
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("text", "why"),
    [("a: " + "9" * 5000, "more than 4,300 digits"), ("when: 2026-13-45", "month must be in")],
)
def test_values_pyyaml_lets_out_bare_are_refused_in_words(text: str, why: str) -> None:
    with pytest.raises(OutOfBounds, match=f"holds a value that cannot be read .*{why}"):
        yaml_load(text)
