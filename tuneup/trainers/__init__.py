"""The trainer-adapter API (what measures a probe) and the backends a session measures with."""
