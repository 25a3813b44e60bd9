"""The monitor's widgets, one per module, each with its default CSS.

Import them from their modules: this package imports nothing, so the
Textual-free `readings` helpers stay importable by `--once` and `--json`.
"""
