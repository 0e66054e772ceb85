"""Data-quality gates: great-expectations (GX 1.x) expectations run on polars frames inside Dagster asset checks.

A gate is one asset check made of one or more `Expect`s (a GX expectation by class name, its arguments, the frame
it runs on and the columns that name a failing row). Every expectation used here is row-level, so a failing gate
lists the failing rows' ids in its metadata (`failing_ids`, capped; `failing_count`). Table-level facts (a slice's
size, a label's share) are expressed the same way by validating a small derived frame with one row per thing
judged (one row per slice, per slice and label), so their ids are the slices or labels that fail.

GX runs in an ephemeral context (nothing written to disk, no usage statistics) with one pandas datasource; it is
imported on first use, because importing it takes seconds and most processes that load the code location
(the CLI, the UI, sensors) never run a check.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import polars as pl

MAX_FAILING_IDS = 200


@dataclass(frozen=True)
class Expect:
    """One GX expectation (`expectation`: a class name of `great_expectations.expectations`, e.g.
    "ExpectColumnValuesToBeInSet") with its keyword arguments, run on `frame`; `id_columns` name a failing row."""

    frame: pl.DataFrame
    expectation: str
    id_columns: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    expectation: str
    kwargs: dict[str, Any]
    success: bool
    failing_ids: list[str]
    observed: dict[str, Any]


@functools.cache
def _batch_definition():
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # GX would otherwise try to send usage statistics
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas("peerify_frames").add_dataframe_asset("frame")
    return asset.add_batch_definition_whole_dataframe("whole_frame")


def _expectation(name: str, kwargs: dict[str, Any]):
    import great_expectations as gx

    cls = getattr(gx.expectations, name, None)
    if cls is None:
        raise ValueError(f"{name!r} is not a great-expectations expectation")
    return cls(**kwargs)


def _row_id(row: dict[str, Any], id_columns: Sequence[str]) -> str:
    return ":".join(str(row.get(column)) for column in id_columns)


def _columns_named(kwargs: dict[str, Any]) -> set[str]:
    """The columns an expectation reads: those it names, and every word of its pandas `row_condition` (the frame's
    columns among them are kept)."""
    named = {kwargs.get("column"), kwargs.get("column_A"), kwargs.get("column_B")}
    in_condition = set(re.findall(r"\w+", kwargs.get("row_condition") or ""))
    return {c for c in named if c} | set(kwargs.get("column_list") or []) | in_condition


def run_expectation(expect: Expect) -> Outcome:
    """Validate `expect.frame` against the expectation; the failing rows' ids, deduplicated and sorted."""
    needed = [c for c in expect.frame.columns
              if c in expect.id_columns or c in _columns_named(expect.kwargs)]
    frame = expect.frame.select(needed).to_pandas()
    batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(_expectation(expect.expectation, expect.kwargs), result_format={
        "result_format": "COMPLETE", "unexpected_index_column_names": list(expect.id_columns)})
    if result.exception_info.get("raised_exception"):
        raise RuntimeError(f"{expect.expectation}{expect.kwargs}: {result.exception_info['exception_message']}")
    details = result.result or {}
    failing = sorted({_row_id(row, expect.id_columns) for row in details.get("unexpected_index_list") or []})
    if not result.success and not failing:  # a failure GX reports without rows: name the expectation itself
        failing = [expect.expectation]
    observed = {k: details[k] for k in ("element_count", "unexpected_count", "missing_count", "observed_value")
                if k in details}
    observed = json.loads(json.dumps(observed, default=str))  # GX reports numpy scalars; metadata must be JSON
    return Outcome(expect.expectation, expect.kwargs, bool(result.success), failing, observed)


def gate(check_name: str, expects: Sequence[Expect], blocking: bool,
         asset_key: dg.AssetKey | str | None = None, metadata: dict | None = None) -> dg.AssetCheckResult:
    """Run every expectation of one gate and turn them into one AssetCheckResult: passed when all pass; ERROR
    severity for a blocking gate (its spec must be declared `blocking=True`), WARN otherwise. `metadata` is added
    to the result's own (what the gate judged, say)."""
    outcomes = [run_expectation(expect) for expect in expects]
    failing = sorted({i for outcome in outcomes for i in outcome.failing_ids})
    first = next((shown for expect, outcome in zip(expects, outcomes) if (shown := first_failure(expect, outcome))), {})
    return dg.AssetCheckResult(
        check_name=check_name, asset_key=asset_key, passed=not failing,
        severity=dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN,
        description=(f"{len(failing)} failing: first " + ", ".join(f"{k} {v}" for k, v in first.items())
                     if first else None),
        metadata={
            **first,
            "failing_ids": dg.MetadataValue.json(failing[:MAX_FAILING_IDS]),
            "failing_count": len(failing),
            "expectations": dg.MetadataValue.json([
                {"expectation": o.expectation, "kwargs": o.kwargs, "success": o.success, **o.observed}
                for o in outcomes]),
            **(metadata or {}),
        },
    )


def first_failure(expect: Expect, outcome: Outcome) -> dict[str, str | int | float]:
    """The first failing row of an expectation as plain top-level check metadata, so the UI shows it without
    opening the JSON: its ids (`failing_<column>`: failing_slice, ...), the values judged (share, size, ...) and the
    `bound` it broke."""
    if outcome.success or not outcome.failing_ids:
        return {}
    row = next((row for row in expect.frame.iter_rows(named=True)
                if _row_id(row, expect.id_columns) == outcome.failing_ids[0]), None)
    if row is None:  # a failure without rows (a table-level one): the failing ids name the expectation
        return {}
    judged = [expect.kwargs[key] for key in ("column", "column_A", "column_B") if key in expect.kwargs]
    entries = {**{f"failing_{column}": _plain(row[column]) for column in expect.id_columns},
               **{column: _plain(row[column]) for column in judged if column not in expect.id_columns}}
    bound = expect.kwargs.get("max_value", expect.kwargs.get("min_value"))
    return {**entries, "bound": _plain(bound)} if bound is not None else entries


def _plain(value: Any) -> str | int | float:
    if isinstance(value, float):
        return round(value, 4)
    return value if isinstance(value, int) else str(value)
