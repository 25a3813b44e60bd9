"""The probe engine: stages, measurement in child processes, search, journal, verdicts."""
