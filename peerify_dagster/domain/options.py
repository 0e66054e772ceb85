"""The per-venue options of a pipeline stage (`chunking:`, `sampling:`, `labelling:`, `slices:` in venues.yaml), checked
the same way for every stage before the stage checks their values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any


def checked_options(config_class: type, raw: Any, error: type[ValueError]) -> dict[str, Any]:
    """`raw` as a dict ({} for None: the defaults), after checking that it is a mapping whose keys are fields of the
    stage's config dataclass; raises `error` naming the unknown options and the known ones."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise error(f"expected a mapping of options, got {raw!r}")
    known = sorted(item.name for item in fields(config_class))
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise error(f"unknown option(s) {unknown}; known: {known}")
    return dict(raw)
