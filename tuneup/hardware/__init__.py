"""The GPUs and the machine: GPU backends (NVML, replay, none), the visible devices,
machine detection."""
