"""GPU telemetry without a screen: the sampler and its windows, the readings in words, and
the one-shot output of `tuneup monitor --once` / `--json`. The probes read it (a probe's
window), and so do the app's monitor screen and widgets (tuneup.tui)."""
