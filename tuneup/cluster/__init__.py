"""The cluster a probe runs on: the SLURM job, launch commands (local, torchrun, srun), scaling."""
