"""The `command` trainer: tune any training script by running it and reading its output."""
