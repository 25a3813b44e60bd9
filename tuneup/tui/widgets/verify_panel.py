"""The results screen's verify box: what `tuneup verify` found, and the runs started from
the screen, in a worker thread whose lines appear as they come.

The runs are the CLI's (verify/session.verify_folder by default); the panel only posts
what they say to itself on the app's thread (call_from_thread), and asks the runs in
progress to end when it is taken off the screen: what finished is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.widgets import Static

from tuneup.errors import UsageError
from tuneup.tuning.results.journal import quoted
from tuneup.tuning.results.verified import Verified
from tuneup.tuning.results.verify_words import verified_lines
from tuneup.verify.session import verify_folder

# (folder, say, stop) -> what the real runs showed; tests pass a fake
Verifier = Callable[[Path, Callable[[str], None], Callable[[], str | None]], Verified]

SHOWN_LINES = 6  # of the runs' progress, the last ones
SIMULATED = "this session's probes were simulated: there is no real run to verify"


def verified_text(verified: Verified | None, folder: Path) -> str:
    """What a verify found, or how to run one."""
    if verified is not None:
        return "\n".join(verified_lines(verified))
    return (
        "not verified: v runs the baseline and the recommendation for real, each about "
        f"2 minutes after warm-up, twice (as tuneup verify {quoted(folder)})"
    )


class VerifyPanel(Static):
    """A session's verify: its last result, or its runs as they go.

    Args:
        verified: the summary's `verify` block, typed (None: none ran).
        folder: the session's results folder.
        simulated: its trainer's probes were simulated: nothing real to run (said).
        verifier: runs the real runs (verify/session.verify_folder by default).
    """

    def __init__(
        self,
        verified: Verified | None,
        folder: Path,
        *,
        simulated: bool = False,
        verifier: Verifier = verify_folder,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        shown = SIMULATED if simulated and verified is None else verified_text(verified, folder)
        super().__init__(shown, id=id, classes=classes)
        self.verified = verified
        self.folder = folder
        self.simulated = simulated
        self.verifier = verifier
        self.running = False
        self._stop_why: str | None = None

    def start(self) -> None:
        """Run the verify in a thread (once at a time)."""
        if self.running:
            return
        if self.simulated:
            self.update(SIMULATED)
            return
        self.running = True
        self.update("verifying: starting the runs ...")
        folder = self.folder
        self.run_worker(lambda: self._run(folder), thread=True, exit_on_error=False, name="verify")

    def _run(self, folder: Path) -> None:
        """On the worker's thread: the panel changes on the app's (call_from_thread)."""
        said: list[str] = []

        def say(line: str) -> None:
            said.append(line)
            self.app.call_from_thread(self._progress, said[-SHOWN_LINES:])

        try:
            verified = self.verifier(folder, say, lambda: self._stop_why)
        except (UsageError, OSError) as exc:
            self.app.call_from_thread(self._failed, str(exc))
            return
        self.app.call_from_thread(self._done, verified)

    def _progress(self, lines: list[str]) -> None:
        self.update("verifying:\n" + "\n".join(lines))

    def _failed(self, why: str) -> None:
        self.running = False
        self.update(f"verify failed: {why}")

    def _done(self, verified: Verified) -> None:
        self.running = False
        self.verified = verified
        self.update(verified_text(verified, self.folder))

    def on_unmount(self) -> None:
        self._stop_why = "the results screen closed"  # the run in progress ends; kept so far
