"""Exports of a tuned configuration: tutorial YAML, flags, environment, sbatch, tuneup YAML."""

from __future__ import annotations

from tuneup.export.render import FORMATS, render

__all__ = ["FORMATS", "render"]
