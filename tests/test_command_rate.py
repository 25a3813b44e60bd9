"""A script that prints no samples/s is tuned by a rate tuneup takes itself: plugins/README's
mnist walk-through, run as written on a stand-in of pytorch/examples' mnist (its progress
lines, no throughput), with nothing in the script changed."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml
from tuneup_plugins.command.output import timed_measurements
from tuneup_plugins.command.section import RateRule, check_command_section

from tuneup.cli import main

ROOT = Path(__file__).resolve().parents[1]

# pytorch/examples' mnist, as far as tuneup sees it: a progress line every 10 batches, its
# running sample count and loss, and no throughput. A batch takes 2 ms per 64 samples on
# one thread and a little less per sample at batch 128.
MNIST = """
import argparse, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
per_sample = 0.002 / 64 * (0.8 if args.batch_size >= 128 else 1.0)
if os.environ.get("OMP_NUM_THREADS") == "0":
    raise SystemExit("OMP_NUM_THREADS=0 is no thread count")
n = 12800
for epoch in range(1, args.epochs + 1):
    for i in range(n // args.batch_size):
        time.sleep(per_sample * args.batch_size)
        if i % 10 == 0:
            seen = i * args.batch_size
            loss = 1.0 / (i + 1)
            print(f"Train Epoch: {epoch} [{seen}/{n} ({100 * seen // n}%)]\\tLoss: {loss:.6f}")
"""


def walkthrough() -> dict:
    """The YAML block that follows the walk-through's marker in plugins/README.md."""
    text = (ROOT / "plugins" / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- mnist walk-through[^>]*-->\s*```yaml\n(.*?)```", text, re.DOTALL)
    assert found, "plugins/README.md lost its mnist walk-through"
    return yaml.safe_load(found.group(1))


def test_the_walkthrough_section_is_sound():
    assert check_command_section(walkthrough()["command"], "mnist.yaml") == []


def test_the_mnist_walkthrough_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = walkthrough()
    work = tmp_path / "mnist"
    work.mkdir()
    (work / "main.py").write_text(textwrap.dedent(MNIST).lstrip(), encoding="utf-8")
    path = work / "mnist.yaml"
    path.write_text(yaml.safe_dump(preset), encoding="utf-8")
    monkeypatch.chdir(work)  # as the walk-through runs it: in examples/mnist
    out = tmp_path / "run"
    code = main(["probe", "--trainer", "command", "--preset", str(path), "--out", str(out)])
    said = capsys.readouterr()
    # an answer, or on a machine others load in bursts the ladder's own stop (exit 4)
    assert code in (0, 4), said.err
    # a measured rate, about 32,000 samples/s a batch of 64 at 2 ms, from its own lines
    base = re.search(r"baseline\s+([\d,.]+) samples/s", said.out + said.err)
    assert base, said.out
    assert 10_000 < float(base.group(1).replace(",", "")) < 40_000
    assert "OMP_NUM_THREADS=0" not in said.err  # torch's own thread count: left unset
    if code == 0:
        assert "batch x2" in said.out


def test_intervals_of_a_running_count_are_the_trials_and_a_new_epoch_starts_over():
    rule = RateRule(re.compile(r"Train Epoch: \d+ \[(?P<samples>\d+)/"))
    lines = [
        (0.0, "Train Epoch: 1 [0/1280 (0%)]"),
        (0.5, "Train Epoch: 1 [640/1280 (50%)]"),  # 640 in 0.5 s: warm-up, skipped
        (0.7, "Train Epoch: 1 [1280/1280 (100%)]"),  # 640 in 0.2 s
        (0.8, "Train Epoch: 2 [0/1280 (0%)]"),  # a new epoch: that interval is left out
        (1.0, "Train Epoch: 2 [640/1280 (50%)]"),  # 640 in 0.2 s
    ]
    fields = timed_measurements(lines, rule, skip=1)
    assert fields["full_sps_trials"] == pytest.approx([3200.0, 3200.0])
    assert fields["full_sps"] == pytest.approx(3200.0)
    per_line = RateRule(re.compile(r"step"), samples=64)
    assert timed_measurements([(0.0, "step"), (0.1, "step")], per_line, 0)["full_sps"] == (
        pytest.approx(640.0)
    )
    assert timed_measurements([(0.0, "step")], per_line, 0) == {}
