"""Reading rows of a lake table that may not be built: the pages' shaping (claim_view, citation_view) asks each
table for the rows with some column values, and a table a venue lacks (None) has none."""

from __future__ import annotations

from typing import Any

import polars as pl


def rows_where(frame: pl.DataFrame | None, **equal: Any) -> list[dict]:
    """The rows whose columns equal the given values, as dicts; none of a table that is not built."""
    if frame is None:
        return []
    for column, value in equal.items():
        frame = frame.filter(pl.col(column) == value)
    return frame.to_dicts()


def one_where(frame: pl.DataFrame | None, **equal: Any) -> dict | None:
    """The first such row, None when there is none."""
    rows = rows_where(frame, **equal)
    return rows[0] if rows else None
