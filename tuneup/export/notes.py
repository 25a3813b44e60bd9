"""What an export leaves out, said where the user reads it: on stderr, and as comments in
the file where its format takes them.

A tuned knob the target cannot carry (the tutorial's train.py has no torch.compile,
neither as a key nor as a flag; an environment file holds no config keys) is named with
how to apply it; a session that recommends no change says that its export is the
baseline, unchanged. Pure: the recommendation's changes in, lines out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneup.export.configs import scalar
from tuneup.export.tutorial import how_in_tutorial, tutorial_carries
from tuneup.quoting import one_line
from tuneup.tuning.results.summary import TargetAnswer

# Formats whose files take `#` comments (flags is one line a shell splices into a command:
# a comment there would become arguments, so its notes go to stderr alone).
COMMENTED = ("yaml", "env", "sbatch", "tuneup")


def export_notes(
    fmt: str,
    changes: Mapping[str, Any],
    headline: str,
    *,
    own_format: bool = False,
    folder: str = "DIR",
) -> list[str]:
    """One line per thing the export of `changes` (the recommendation over the baseline)
    as `fmt` leaves out or is.

    Args:
        fmt: the export format.
        changes: the recommended knob values that differ from the baseline's.
        headline: the session's headline (says whether it recommends anything at all).
        own_format: a trainer's own export (the command trainer's), which carries its
            knobs itself: only the baseline's note applies.
        folder: the session's folder, for the commands the notes name.
    """
    if not changes:
        nothing = headline.startswith("no recommendation")
        why = "it has no recommendation" if nothing else "it recommends keeping the baseline"
        return [f"{why}: this export is the session's baseline configuration, unchanged"]
    if own_format:
        return []
    if fmt in ("yaml", "flags"):
        return _tutorial_notes(fmt, changes, folder)
    if fmt == "env":
        # TF32 off is NVIDIA_TF32_OVERRIDE=0, the threads OMP_NUM_THREADS: both carried
        config = [k for k in changes if k not in ("tf32", "intra_op_threads")]
        if config:
            return [
                f"config keys, not environment, left out of this file: {', '.join(config)}; "
                f"pair it with tuneup export {folder} --format tuneup (tuneup train) or yaml "
                "(the tutorial's train.py)"
            ]
    return []


def answer_notes(
    answer: TargetAnswer | None, answers: tuple[TargetAnswer, ...], folder: str = "DIR"
) -> list[str]:
    """Which target's answer an export carries where the targets' answers differ: its own
    tuned values and factor (or, for a session that did not tune it, what is left
    untuned), and where the others' are."""
    if answer is None or not answers:
        return []
    own, others = answers[0], [a for a in answers[1:] if not a.same]
    if answer is own:
        return [
            f"this is {own.label}'s answer ({_factor(own)}); {other.label} cannot run "
            f"{', '.join(other.left_out)} and has its own ({_factor(other)}): tuneup export "
            f"{folder} --format yaml"
            for other in others
        ]
    if answer.same:
        return []
    if not answer.tuned:
        return [answer.note]
    left = ", ".join(f"{k} ({why})" for k, why in answer.left_out.items())
    head = f"this is {answer.label}'s own answer, {_factor(answer)}"
    return [f"{head}; it cannot run {left}, which {own.label} runs ({_factor(own)})"]


def _factor(answer: TargetAnswer) -> str:
    """ "measured at 6.00x the baseline (likely 5.8-6.2x)", or why there is none."""
    if not answer.tuned:
        return "untuned"
    if answer.factor is None or answer.upheld is False:
        return answer.note or "not confirmed against the baseline"
    text = f"measured at {answer.factor:.2f}x the baseline"
    if answer.low is not None and answer.high is not None:
        text += f" (likely {answer.low:.2f}-{answer.high:.2f}x)"
    return text


def _tutorial_notes(fmt: str, changes: Mapping[str, Any], folder: str) -> list[str]:
    lines = [
        f"{key}={scalar(value)} is left out (the tutorial's train.py takes no key or flag "
        f"for it): {how_in_tutorial(key, value, folder)}"
        for key, value in changes.items()
        if not tutorial_carries(key, value, flags_only=False)
    ]
    if fmt == "flags":
        in_block = [
            key
            for key, value in changes.items()
            if tutorial_carries(key, value, flags_only=False)
            and not tutorial_carries(key, value, flags_only=True)
        ]
        if in_block:
            lines.append(
                f"not on the command line, only in the YAML block: {', '.join(in_block)}; give "
                f"these flags with the block of tuneup export {folder} --format yaml"
            )
    return lines


def with_comments(text: str, fmt: str, notes: list[str]) -> str:
    """`text` with `notes` as `# tuneup: note:` lines at its top (after a script's `#!`
    line); unchanged for a format that takes no comments."""
    if not notes or fmt not in COMMENTED:
        return text
    # a note names a folder or a value: one_line keeps whatever it holds inside the comment
    comments = "".join(f"# tuneup: note: {one_line(line)}\n" for line in notes)
    if text.startswith("#!"):
        first, _, rest = text.partition("\n")
        return f"{first}\n{comments}{rest}"
    return comments + text
