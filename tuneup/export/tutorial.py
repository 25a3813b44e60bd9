"""Exports the tutorial's own train.py runs unchanged: its YAML block and its command line.

Facts (the NERSC tutorial, SC22 edition): its train.py takes `enable_apex`
and `enable_jit` only from its flags (their YAML values are overwritten),
`amp_mode` from the YAML unless `--amp_mode` says otherwise, turns on
`gradient_as_bucket_view` with `--disable_broadcast_buffers`, and trains at
`global_batch_size // world_size` per rank unless `--local_batch_size` is
given (then the global batch is that times the world size). SC21 spelt fp16
`--enable_amp` and had no bf16. Its YParams reads one named block of a YAML
file, so the block must hold every key its train.py reads.

Pure: a TrainConfig and what the session knew (ranks, data box) in, text out.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from tuneup.config import MAX_LEVELS, TrainConfig, build_config, knob_fields, loader
from tuneup.errors import UsageError
from tuneup.export.configs import scalar

# The formats the tutorial's train.py reads: they carry the tutorial's own answer.
TUTORIAL_FORMATS = ("yaml", "flags")

SC22 = "sc22"
SC21 = "sc21"
EDITIONS = (SC22, SC21)
YAML_BLOCK = "tuned"

# The real boxes of the tutorial's data (train, validation), when the session ran on
# tuneup's synthetic box: the user points the block at their files.
TUTORIAL_BOX = (1024, 512)
TUTORIAL_CROP = 64
SHORT_VAL_SAMPLES = 512  # the tutorial's `short` block, when the probes validated nothing
DEFAULT_EXPDIR = "./logs"

# The keys the tutorial's train.py reads from its block, in its config's order.
TUTORIAL_KEYS = (
    "weight_init",
    "lambda_rho",
    "full_scale",
    "global_batch_size",
    "base_batch_size",
    "Nsamples",
    "Nsamples_val",
    "num_epochs",
    "amp_mode",
    "enable_apex",
    "enable_benchy",
    "enable_jit",
    "expdir",
    "lr_schedule",
    "data_loader_config",
    "box_size",
    "data_size",
    "num_data_workers",
    "N_out_channels",
    "train_path",
    "val_path",
    "train_path_npy_data",
    "train_path_npy_label",
    "val_path_npy_data",
    "val_path_npy_label",
    "use_cache",
)
_NOT_KNOBS = {"N_out_channels"}
# Keys tuneup writes for itself; the tutorial neither reads nor needs them.
_SKIP = {"enable_amp", "expdir", "local_batch_size"}  # the block's global batch says it
# tuneup knobs the tutorial's train.py takes from a flag, not from its YAML.
_BY_FLAG = {
    "bucket_cap_mb": "--bucket_cap_mb",
    "broadcast_buffers": "--disable_broadcast_buffers",
    "gradient_as_bucket_view": "--disable_broadcast_buffers",
    "noddp": "--noddp",
}


# What the tutorial's command line carries (flag_tokens); the rest of its keys only its block.
_FLAGGED = {
    "amp_mode",
    "num_data_workers",
    "global_batch_size",
    "local_batch_size",
    "data_loader_config",
    "jit",
    "optimizer_impl",
    *_BY_FLAG,
}
# How to apply in the tutorial's train.py a tuned knob it has no key or flag for.
_HOW: dict[tuple[str, Any], str] = {
    ("jit", "compile"): "wrap the model once it is built: model = torch.compile(model)",
    ("optimizer_impl", "fused"): "build its Adam with fused=True: "
    "optim.Adam(model.parameters(), lr=..., fused=True)",
    ("channels_last", True): "move the model and each batch to channels-last: "
    ".to(memory_format=torch.channels_last_3d)",
    ("cuda_graphs", True): "capture the training step in a CUDA graph "
    "(torch.cuda.make_graphed_callables), or train with tuneup train",
    ("cudnn_benchmark", False): "set torch.backends.cudnn.benchmark = False in its train.py",
    ("tf32", False): "export NVIDIA_TF32_OVERRIDE=0 before training "
    "(tuneup export {dir} --format env)",
}
_TUNEUP_TRAIN = "train with tuneup train instead (tuneup export {dir} --format tuneup or sbatch)"


def tutorial_carries(key: str, value: Any, flags_only: bool) -> bool:
    """Whether the tutorial's train.py applies `key=value` from the export: from its
    command line when `flags_only` (`--format flags`), else from its YAML block with
    the flags beside it (`--format yaml`, as its usage line runs it)."""
    if key == "jit":
        return value in ("none", "script")
    if key == "optimizer_impl":
        return value in ("foreach", "apex")  # torch's Adam runs foreach by default
    if key == "data_loader_config":
        return loader(str(value)).tutorial
    if key in ("tf32", "cudnn_benchmark"):
        return bool(value)  # the tutorial's own behaviour: TF32 allowed, benchmark on
    if flags_only:
        return key in _FLAGGED
    return key in _FLAGGED or (key in TUTORIAL_KEYS and key not in _NOT_KNOBS)


def how_in_tutorial(key: str, value: Any, folder: str = "DIR") -> str:
    """How to apply `key=value` where the tutorial's train.py takes neither key nor flag
    (`folder`: the session's, for the export commands it names)."""
    if key == "data_loader_config":
        how = f"the tutorial has no {value} loader: {_TUNEUP_TRAIN}"
    elif key == "compile_mode":
        how = f"pass mode={value!r} to torch.compile"
    elif key == "intra_op_threads":
        how = f"export OMP_NUM_THREADS={value} before it starts (or torch.set_num_threads({value}))"
    else:
        how = _HOW.get(
            (key, value), f"the tutorial's train.py has no such setting: {_TUNEUP_TRAIN}"
        )
    return how.replace("{dir}", folder)


@dataclass(frozen=True)
class TutorialRun:
    """What the tutorial's run needs beside the knob values.

    Attributes:
        world_size: the ranks the recommendation was measured with.
        box_size: (train, validation) box sides read from the user's data files;
            None: the config's own.
        synthetic: the session ran on tuneup's synthetic box, not the user's data:
            the block names the tutorial's boxes and leaves the paths to set.
    """

    world_size: int = 1
    box_size: tuple[int, int] | None = None
    synthetic: bool = False


# Placeholders for the data files of a session probed on tuneup's synthetic box.
DATA_PLACEHOLDERS = {
    "train_path": "<your train.h5>",
    "val_path": "<your val.h5>",
    "train_path_npy_data": "<your train data .npy>",
    "train_path_npy_label": "<your train label .npy>",
    "val_path_npy_data": "<your val data .npy>",
    "val_path_npy_label": "<your val label .npy>",
}


def for_a_real_run(cfg: TrainConfig, run: TutorialRun) -> TrainConfig:
    """The tuned config as a real training run needs it (tuneup's own formats).

    Probes validate nothing (Nsamples_val 0) and may run on tuneup's synthetic
    box: a run validates (the tutorial's `short` block's count), trains on the
    user's files (placeholders to replace when the session was synthetic) and
    reads their box sides.
    """
    values = cfg.to_dict()
    if cfg.Nsamples_val <= 0:
        values["Nsamples_val"] = SHORT_VAL_SAMPLES
    if run.box_size is not None:
        values["box_size"] = list(run.box_size)
    elif run.synthetic:
        values["box_size"] = list(TUTORIAL_BOX)
        for key, placeholder in DATA_PLACEHOLDERS.items():
            if values.get(key) is not None or key in ("train_path", "val_path"):
                values[key] = placeholder
    return build_config(values, source="the exported config")


def per_rank_batch(cfg: TrainConfig, world_size: int) -> int:
    """The batch each rank trains with, as tuneup's trainer and the tutorial compute it."""
    return cfg.local_batch_size or max(1, cfg.global_batch_size // max(1, world_size))


def tutorial_levels(cfg: TrainConfig) -> int:
    """The depth the tutorial's model can have for `cfg`: 5 or 6 (full_scale)."""
    return 5 if cfg.unet_levels == 5 else MAX_LEVELS


def flag_tokens(cfg: TrainConfig, run: TutorialRun, edition: str = SC22) -> list[str]:
    """The tutorial's command-line flags for `cfg` (with --yaml_config FILE --config tuned)."""
    if edition not in EDITIONS:
        raise UsageError(f"--edition {edition}: choose one of {', '.join(EDITIONS)}")
    tokens: list[str] = []
    if edition == SC22:
        tokens += ["--amp_mode", cfg.amp_mode]
    elif cfg.amp_mode == "fp16":
        tokens.append("--enable_amp")
    elif cfg.amp_mode == "bf16":
        raise UsageError("the SC21 tutorial's train.py has no bf16: export with --edition sc22")
    if cfg.optimizer_impl == "apex":
        tokens.append("--enable_apex")
    if cfg.jit == "script":
        tokens.append("--enable_jit")
    if loader(cfg.data_loader_config).tutorial:
        tokens += ["--data_loader_config", cfg.data_loader_config]
    tokens += ["--num_data_workers", str(cfg.num_data_workers)]
    tokens += ["--local_batch_size", str(per_rank_batch(cfg, run.world_size))]
    tokens += ["--bucket_cap_mb", str(cfg.bucket_cap_mb)]
    if not cfg.broadcast_buffers:
        tokens.append("--disable_broadcast_buffers")
    if cfg.noddp:
        tokens.append("--noddp")
    return tokens


def render_flags(cfg: TrainConfig, run: TutorialRun, edition: str = SC22) -> str:
    """The flags as one shell-quoted line."""
    return shlex.join(flag_tokens(cfg, run, edition)) + "\n"


def block_values(cfg: TrainConfig, run: TutorialRun) -> dict[str, tuple[Any, str]]:
    """Every key of the `tuned` block: (value, comment), the tutorial's keys first."""
    values = cfg.to_dict()
    values["N_out_channels"] = 5
    levels = tutorial_levels(cfg)
    out: dict[str, tuple[Any, str]] = {}
    for key in TUTORIAL_KEYS:
        out[key] = (values.get(key), "")
    out["full_scale"] = (levels == MAX_LEVELS, "")
    if cfg.unet_levels != levels:
        out["full_scale"] = (True, f"tuneup probed a {cfg.unet_levels}-level model (levels below)")
    crop = cfg.data_size
    if crop % 2**levels:
        out["data_size"] = (TUTORIAL_CROP, f"tuneup probed {crop}^3 crops")
    world = max(1, run.world_size)
    out["global_batch_size"] = (
        per_rank_batch(cfg, world) * world,
        f"{per_rank_batch(cfg, world)} per rank x {world} rank(s), as measured",
    )
    if cfg.Nsamples_val <= 0:
        out["Nsamples_val"] = (SHORT_VAL_SAMPLES, "the probes did not validate")
    out["expdir"] = (cfg.expdir or DEFAULT_EXPDIR, "")
    out["enable_apex"] = (cfg.optimizer_impl == "apex", "the tutorial takes it from --enable_apex")
    out["enable_jit"] = (cfg.jit == "script", "the tutorial takes it from --enable_jit")
    if not loader(cfg.data_loader_config).tutorial:
        out["data_loader_config"] = ("lowmem", f"tuneup's {cfg.data_loader_config} loader below")
    if run.box_size is not None:
        out["box_size"] = (list(run.box_size), "read from the data files")
    elif run.synthetic:
        out["box_size"] = (list(TUTORIAL_BOX), "the tutorial's data; tuneup probed a synthetic box")
        for key in DATA_PLACEHOLDERS:
            out[key] = (None, "set this to your file")
    for key, value in _tuneup_only(cfg).items():
        flag = _BY_FLAG.get(key)
        note = (
            f"the tutorial takes it from {flag}"
            if flag
            else "tuneup only: the tutorial does not apply it"
        )
        out[key] = (value, note)
    return out


def render_yaml(cfg: TrainConfig, run: TutorialRun) -> str:
    """A `tuned: &tuned` block the tutorial's train.py and `tuneup train` both run."""
    lines = [
        "# tuneup: the tuned configuration as a block of the tutorial's config file.",
        f"#   python train.py --yaml_config FILE --config {YAML_BLOCK} $(tuneup export DIR "
        "--format flags)",
        f"#   tuneup train --yaml_config FILE --config {YAML_BLOCK}",
        f"{YAML_BLOCK}: &{YAML_BLOCK}",
    ]
    for key, (value, note) in block_values(cfg, run).items():
        lines.append(f"  {key}: {scalar(value)}" + (f"  # {note}" if note else ""))
    return "\n".join(lines) + "\n"


def _tuneup_only(cfg: TrainConfig) -> dict[str, Any]:
    """tuneup's knobs the tutorial has no key for, where they differ from the default."""
    base = TrainConfig().to_dict()
    values = cfg.to_dict()
    known = set(TUTORIAL_KEYS) | _SKIP
    out = {}
    for f in knob_fields():
        name = f.name
        if name in known or values[name] == base[name]:
            continue
        out[name] = values[name]
    if cfg.unet_levels != tutorial_levels(cfg) and "levels" not in out:
        out["levels"] = cfg.unet_levels
    return out
