"""Live GPU monitoring: backends (NVML, replay, none), the sampler, and the monitor screen."""
