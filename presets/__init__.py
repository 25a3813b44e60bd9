"""Bundled machine presets (YAML), installed as the import package ``tuneup_presets``."""
