"""A preset's trainer sections: a top-level key named after a trainer that reads one.

The `command` trainer reads ``command:``; any trainer may declare a section
of its own (`TrainerAdapter.section`) and check it (`check_section`). The
registry is asked only when a preset has a key beyond the core ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneup.errors import UsageError
from tuneup.preset.schema import PRESET_KEYS, type_name, unknown_keys
from tuneup.trainers.adapters import load_trainer, scan_trainers, trainer_names


def check_sections(data: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The trainers' own sections among a preset's top-level keys, each checked by its adapter.

    A key that is not one of PRESET_KEYS is a trainer's section when it names a
    registered trainer that declares one (``command:``); any other is unknown.
    The registry is asked only when such a key is there.

    Returns:
        The sections by trainer name, and one problem per line.
    """
    extra = [key for key in data if key not in PRESET_KEYS]
    if not extra:
        return {}, []
    names = set(trainer_names())
    sections: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for key in extra:
        if key not in names:
            problems += unknown_keys({key: None}, (*PRESET_KEYS, *_section_trainers()), "")
            continue
        try:
            adapter = load_trainer(key)
        except UsageError as exc:
            problems.append(f"{key}: {exc}")
            continue
        raw = data[key]
        if not adapter.section:
            problems.append(f"{key}: the {key} trainer reads no section of the preset")
        elif raw is None:  # an empty section: none at all
            continue
        elif not isinstance(raw, Mapping):
            problems.append(f"{key}: must be a mapping, got {type_name(raw)}")
        else:
            problems += adapter.check_section(raw)
            sections[key] = dict(raw)
    return sections, problems


def _section_trainers() -> list[str]:
    """The trainers that read a section of the preset (imports every trainer plugin)."""
    adapters, _broken = scan_trainers()  # a broken plugin is reported where it is used
    return [name for name, adapter in adapters.items() if adapter.section]
