"""Live GPU monitoring: the sampler, telemetry windows, the poller, the monitor screen and app."""
