"""The search decides from values: stages, pairs, composition, confirmation, verdicts."""
