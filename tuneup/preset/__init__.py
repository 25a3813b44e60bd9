"""Presets: loading (bundled, user folder, path), the strict schema, and the auto-pick by GPU."""
