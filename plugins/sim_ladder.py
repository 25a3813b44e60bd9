"""The `sim` trainer's demo ladder: a tutorial-like list of stages for tests, demos and the
repeatability bench, so they need not load the real stage plugins.
"""

from __future__ import annotations

from tuneup.hardware.types import MachineInfo
from tuneup.probe.types import Candidate
from tuneup.tuning.search.search_records import StagePlan


def sim_stage_plans(machine: MachineInfo) -> list[StagePlan]:
    """A tutorial-like ladder of stages for tests and demos (the real stages are plugins)."""
    no_gpu = None if machine.cuda else "needs a CUDA GPU"
    workers = [
        Candidate(f"workers={w}", {"num_data_workers": w})
        for w in (4, 8, 16, 32)
        if w <= max(machine.cpus_usable, 4)
    ]
    loaders = [Candidate("loader=inmem", {"data_loader_config": "inmem"})]
    if machine.cuda and machine.dali:
        loaders.append(Candidate("loader=dali-lowmem", {"data_loader_config": "dali-lowmem"}))
    optimizers = [Candidate("optimizer=fused", {"optimizer_impl": "fused"})]
    if machine.cuda and machine.apex:
        optimizers.append(Candidate("optimizer=apex", {"optimizer_impl": "apex"}))
    # Judged as the built-in stages are (plugins/stages/): the loader on IO, the model's
    # arithmetic on SYNTHETIC, the batch on FULL.
    io, syn = "io", "synthetic"
    return [
        StagePlan("workers", workers, judged=io),
        StagePlan("loader", loaders, judged=io),
        StagePlan("tf32", [Candidate("tf32=off", {"tf32": False})], no_gpu, judged=syn),
        StagePlan(
            "amp",
            [
                Candidate("amp=fp16", {"amp_mode": "fp16"}),
                Candidate("amp=bf16", {"amp_mode": "bf16"}),
            ],
            judged=syn,
        ),
        StagePlan("optimizer", optimizers, judged=syn),
        StagePlan(
            "jit",
            [
                Candidate("jit=script", {"jit": "script"}),
                Candidate("jit=compile", {"jit": "compile"}),
            ],
            judged=syn,
        ),
        StagePlan(
            "cuda_graphs", [Candidate("cuda_graphs=on", {"cuda_graphs": True})], no_gpu, judged=syn
        ),
        StagePlan(
            "channels_last", [Candidate("channels_last=on", {"channels_last": True})], judged=syn
        ),
        StagePlan(
            "batch_size",
            [
                Candidate("batch=128", {"global_batch_size": 128}),
                Candidate("batch=256", {"global_batch_size": 256}),
            ],
        ),
    ]
