"""One probe: its typed values and events, the stage API, the runner that judges a child
process, its telemetry and host load, robust statistics, the ladder-time estimate."""
