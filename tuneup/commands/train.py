"""`tuneup train`: resolve the config (or the embedded default), then train on this rank."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tuneup.bundled import DEFAULT_PRESET, cache_dir, read_bundled_preset
from tuneup.config import TrainConfig, load_config, loader
from tuneup.errors import ExitCode, UsageError
from tuneup.paths import output_file
from tuneup.unet.datacache import ensure_synthetic_data
from tuneup.unet.datacheck import check_data
from tuneup.unet.distributed import (
    DistEnv,
    destroy_process_group,
    dist_env_from,
    exit_skipping_teardown,
)
from tuneup.unet.expdir import (
    DEFAULT_RUN_NUM,
    RunLog,
    config_file_label,
    config_name,
    configuration_lines,
    experiment_dir,
    make_experiment_dir,
    outputs_line,
)
from tuneup.unet.metrics import FanOut, MetricsSink, MetricsWriter
from tuneup.unet.runtime import set_tf32_env
from tuneup.unet.scalars import open_tensorboard


def _default_values() -> tuple[dict[str, Any], dict[str, Any]]:
    preset = read_bundled_preset(DEFAULT_PRESET)
    return dict(preset.get("train") or {}), dict(preset.get("synthetic_data") or {})


def resolve_config(
    config: str | None, yaml_config: Path | None, overrides: list[str]
) -> tuple[TrainConfig, dict[str, Any] | None]:
    """The config to train, and the synthetic data to make first when it is the default."""
    if yaml_config is not None:
        return load_config(yaml_config, config, overrides), None
    if config is not None:
        path = Path(config)
        if not path.exists() and path.suffix not in (".yaml", ".yml"):
            raise UsageError(
                f"config file not found: {config} (a block name needs --yaml_config FILE)"
            )
        return load_config(path, None, overrides), None
    base, synth = _default_values()
    return load_config(None, None, overrides, base=base), synth


def _with_default_data(cfg: TrainConfig, synth: dict[str, Any], announce: bool) -> TrainConfig:
    """Point the default run at its synthetic box, making it once in the cache."""
    if not loader(cfg.data_loader_config).reads_files or (cfg.train_path and cfg.val_path):
        return cfg
    box, val_box, seed = synth["box"], synth["val_box"], synth.get("seed", 0)
    train, val, made = ensure_synthetic_data(
        box,
        val_box,
        seed,
        cache_dir(),
        npy=loader(cfg.data_loader_config).reads == "npy",
        say=lambda line: print(f"tuneup: {line}", file=sys.stderr),
    )
    if made and announce:
        print(f"tuneup: made a synthetic {box}^3 box in {train.parent}", file=sys.stderr)
    cfg.train_path = cfg.train_path or str(train)
    cfg.val_path = cfg.val_path or str(val)
    return cfg


def _open_outputs(
    cfg: TrainConfig, env: DistEnv, name: str, run_num: str, closing: ExitStack
) -> tuple[RunLog, list[MetricsSink]]:
    """Rank 0 with expdir set: out.log and TensorBoard scalars in the tutorial's folder.

    Everything opened is registered on `closing`, so every exit path closes it.
    """
    if not (env.is_main and cfg.expdir):
        return RunLog(None), []
    folder = make_experiment_dir(experiment_dir(cfg.expdir, name, env.world_size, run_num))
    run_log = closing.enter_context(contextlib.closing(RunLog(folder / "out.log")))

    board = open_tensorboard(folder / "logs")
    if board is not None:
        closing.enter_context(contextlib.closing(board))
    print(outputs_line(folder, board is not None), file=sys.stderr)
    return run_log, [board] if board is not None else []


def run_train_command(
    *,
    config: str | None,
    yaml_config: Path | None,
    overrides: list[str],
    metrics_path: Path | None,
    run_num: str = DEFAULT_RUN_NUM,
) -> int:
    cfg, synth = resolve_config(config, yaml_config, overrides)
    # TF32 off must reach the environment before CUDA starts.

    set_tf32_env(cfg.tf32)

    env = dist_env_from(os.environ)
    if metrics_path is not None and env.is_main:
        output_file(metrics_path, "--metrics", "the metrics file")  # before any work
    check_data(cfg, only_set=synth is not None)  # the user's own files, before any work
    # torch: after the config is checked, so bad input fails fast
    from tuneup.unet.build import preflight

    preflight(cfg, env)
    with ExitStack() as closing:
        name = config_name(config, yaml_config, DEFAULT_PRESET)
        run_log, boards = _open_outputs(cfg, env, name, run_num, closing)

        def log(message: str) -> None:
            print(message, flush=True)
            run_log.write(message)

        if synth is not None:
            if env.is_main:
                print(
                    f"tuneup: no config given: training the {DEFAULT_PRESET} preset "
                    "(see `tuneup train --help` to give your own)",
                    file=sys.stderr,
                )
            # every rank may make the box: files are written under unique names and renamed
            cfg = _with_default_data(cfg, synth, announce=env.is_main)
            check_data(cfg)
        if cfg.expdir and env.is_main:  # the tutorial's dump, before anything else it logs
            label = config_file_label(config, yaml_config, DEFAULT_PRESET)
            for line in configuration_lines(cfg.to_dict(), label, name):
                log(line)
        code = _train(cfg, env, log, boards, metrics_path)
    if env.distributed:  # everything is written and closed by now
        exit_skipping_teardown(code)
    return code


def _train(
    cfg: TrainConfig,
    env: DistEnv,
    log: Callable[[str], None],
    boards: list[MetricsSink],
    metrics_path: Path | None,
) -> int:
    """Build and run the training on this rank; the exit status from how it ended."""
    from tuneup.unet.build import build_training
    from tuneup.unet.loop import StopFlag, run_training, stop_on_interrupt

    stop = StopFlag()
    metrics = FanOut([MetricsWriter(metrics_path if env.is_main else None), *boards])
    try:
        with stop_on_interrupt(stop, log):
            setup = build_training(cfg, env)
            result = run_training(setup, metrics=metrics, log=log, stop=stop)
    finally:
        metrics.close()
        destroy_process_group()
    if result.interrupted:
        log(f"Stopped by Ctrl-C after {result.steps} steps")
        return ExitCode.INTERRUPTED
    if result.ranks_in_sync is False and not cfg.noddp:
        print("tuneup: error: DDP ranks ended with different weights", file=sys.stderr)
        return ExitCode.INTERNAL
    return ExitCode.OK
