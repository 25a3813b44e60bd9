"""The tutorial's experiment folder: EXPDIR/<config>/<N>GPU/<run_num>/ with out.log
(every log line, after a dump of the configuration) and TensorBoard scalars in logs/.

Paths and lines are computed by pure functions; only `RunLog` and
`make_experiment_dir` touch the disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tuneup.errors import UsageError
from tuneup.paths import output_folder

DEFAULT_RUN_NUM = "00"  # the tutorial's --run_num default
CONFIG_RULE = "------------------ Configuration ------------------"
END_RULE = "---------------------------------------------------"


def config_name(config: str | None, yaml_config: Path | None, default: str) -> str:
    """The name the tutorial files a run under: the YAML block, else the file's stem."""
    if config is None:
        return default
    if yaml_config is not None:
        return config
    return Path(config).stem


def config_file_label(config: str | None, yaml_config: Path | None, default: str) -> str:
    """What the dump's 'Configuration file:' names: the YAML file, or the bundled preset."""
    if yaml_config is not None:
        return str(yaml_config)
    return config if config is not None else f"{default} (bundled preset)"


def check_run_num(run_num: str) -> str:
    """A run number names one folder: no separators, not '.' or '..'."""
    if not run_num or "/" in run_num or "\\" in run_num or run_num in (".", ".."):
        raise UsageError(f"--run_num {run_num!r}: expected a folder name such as 00 or 07")
    return run_num


def experiment_dir(expdir: str, name: str, world_size: int, run_num: str) -> Path:
    """EXPDIR/<name>/<world_size>GPU/<run_num>, as the tutorial's train.py makes it."""
    return Path(expdir).expanduser() / name / f"{world_size}GPU" / check_run_num(run_num)


def configuration_lines(values: dict[str, Any], file: str, name: str) -> list[str]:
    """The tutorial's configuration dump (YParams.log): file, name, then 'key value'."""
    return [
        CONFIG_RULE,
        f"Configuration file: {file}",
        f"Configuration name: {name}",
        *(f"{key} {value}" for key, value in values.items()),
        END_RULE,
    ]


def timestamped(message: str, when: float) -> str:
    """One out.log line in the tutorial's logging format ('%(asctime)s - root - INFO - ')."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    millis = int((when % 1) * 1000)
    return f"{stamp},{millis:03d} - root - INFO - {message}"


def make_experiment_dir(path: Path) -> Path:
    """Create the run's folder and its logs/; a folder that cannot be made is a usage error."""
    output_folder(path / "logs", "expdir", "the run's log folder")
    return path


class RunLog:
    """out.log: each line written and flushed as it is logged; a no-op without a path."""

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._file: IO[str] | None = None
        if path is not None:
            try:
                self._file = path.open("a", encoding="utf-8", buffering=1)
            except OSError as exc:
                raise UsageError(
                    f"expdir {path.parent}: cannot write out.log: {exc.strerror or exc}; "
                    "set expdir to a writable folder"
                ) from None

    def write(self, message: str) -> None:
        if self._file is not None:
            self._file.write(timestamped(message, self._clock()) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def outputs_line(folder: Path, tensorboard: bool) -> str:
    """The one stderr line saying where this run's logs go."""
    out_log, logs = folder / "out.log", folder / "logs"
    if tensorboard:
        return f"tuneup: logging to {out_log} and TensorBoard scalars to {logs}"
    return (
        f"tuneup: logging to {out_log}; TensorBoard scalars: not written (pip install tensorboard)"
    )
