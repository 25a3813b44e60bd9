"""Exports of a tuned configuration: tutorial YAML, flags, environment, sbatch, tuneup YAML."""
