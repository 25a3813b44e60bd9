"""What a verify is asked: the session's folder, how long, which train.py, which box."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuneup.quoting import shell_word

DEFAULT_SECONDS = 120.0
DEFAULT_ROUNDS = 2


@dataclass(frozen=True)
class VerifyRequest:
    """What to verify and how long.

    Attributes:
        seconds: each configuration's measured time after warm-up, over its rounds.
        rounds: A B B A blocks: 1 runs each configuration once, 2 twice.
        train_py: the tutorial's train.py; None: its target is not run.
        box: the synthetic training box side to run on; None: the real run's data.
        budget_s: the whole verify's wall-clock budget; None: none.
        command: the command line that reproduces this verify (for the record).
    """

    folder: Path
    seconds: float = DEFAULT_SECONDS
    rounds: int = DEFAULT_ROUNDS
    train_py: Path | None = None
    box: int | None = None
    budget_s: float | None = None
    command: str = ""

    def reproduce(self) -> str:
        """The command line that runs this verify again."""
        words = ["tuneup", "verify", shell_word(str(self.folder))]
        words += ["--seconds", f"{self.seconds:g}", "--rounds", str(self.rounds)]
        if self.train_py is not None:
            words += ["--train-py", shell_word(str(self.train_py))]
        if self.box is not None:
            words += ["--box", str(self.box)]
        if self.budget_s is not None:
            words += ["--budget", f"{self.budget_s:g}s"]
        return " ".join(words)
