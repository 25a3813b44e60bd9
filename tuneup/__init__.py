"""tuneup: a performance-tuning assistant for deep-learning training on NVIDIA GPU nodes."""

__version__ = "0.1.0"
