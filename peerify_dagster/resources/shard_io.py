"""The IO manager of the rows that pass between a sharded step's ops (a venue's shard plans and the shards' results).

They are Parquet tables in the lake (`_shards/<step>.<output>/<venue>/<shard>.parquet`), written and read through
the Lake API, so a worker on another machine reads what another wrote, and a re-execution from failure reads the
shards that succeeded from the run before it. Dagster's default IO manager would keep them under the local Dagster
home, out of other workers' reach. They are keyed by venue and shard, not by run: a rerun overwrites a shard's file
with its new rows, and only the shards of the run's own plan are ever read. `peerify clean-lake` may delete them
(what a build rebuilds).
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import polars as pl

from peerify_dagster import paths
from peerify_dagster.domain.shards import shard_count, shard_key, shard_rows
from peerify_dagster.resources.lake import Lake, UnreadablePartitionError, partition_slug

SHARDS_DIR = "_shards"
SHARD_IO_MANAGER = "shard_io_manager"  # the resource key sharded steps name in their ops' outputs
# What a shard's rows carry from the split to the assembly, which drops them: the shard, and the row's position in the
# venue table, by which the assembly restores the unsharded order.
SHARD = "shard"
POSITION = "position"
SHARD_SCHEMA = {SHARD: pl.Int64, POSITION: pl.Int64}


def split_into_shards(frame: pl.DataFrame, paper_ids: list[str], shards: int) -> Iterator[dg.DynamicOutput]:
    """The frame's rows as one DynamicOutput per non-empty shard (`paper_ids[i]` decides row i's shard), each row
    with its shard and position; no rows give one empty shard, so the assembly still runs."""
    indexed = frame.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(POSITION))
    for shard, positions in shard_rows(paper_ids, shards).items():
        rows = indexed[positions].with_columns(pl.lit(shard, dtype=pl.Int64).alias(SHARD))
        yield dg.DynamicOutput(rows, mapping_key=shard_key(shard))


def split_by_paper(frame: pl.DataFrame, configured_shards: int | None, log, what: str = "rows",  # noqa: ANN001
                   ) -> Iterator[dg.DynamicOutput]:
    """A split op's DynamicOutputs: `frame`'s rows in shards of their papers (its `paper_id` column; a paper's rows in
    the shard of its forum id, the shard every stage gives it), as many as the venue's `shards:` (`configured_shards`)
    or automatic (domain/shards.py); `log` (the op's context.log) says how many."""
    papers = frame["paper_id"].n_unique()
    shards = shard_count(papers, configured_shards)
    log.info(f"{frame.height} {what} of {papers} papers in {shards} shard(s)")
    yield from split_into_shards(frame, frame["paper_id"].to_list(), shards)


def assemble_shards(frames: list[pl.DataFrame]) -> tuple[pl.DataFrame, dict]:
    """The venue table from its shards' rows (every split yields at least one shard): in the venue table's order,
    without the shard columns; and the metadata saying how it was sharded."""
    whole = pl.concat(frames, how="vertical")
    per_shard = {shard_key(shard): rows for shard, rows in whole.group_by(SHARD).len().sort(SHARD).rows()}
    metadata = {"shards": len(frames), "rows_per_shard": dg.MetadataValue.json(per_shard)}
    # Stable: a row that became several (a pair's ranked passages) keeps their order.
    return whole.sort(POSITION, maintain_order=True).drop(SHARD, POSITION).rechunk(), metadata


def shard_location(step_key: str, output: str, mapping_key: str | None, venue: str | None) -> tuple[str, str]:
    """(lake table, shard) of one shard of an output: a dynamic output's shard is its mapping key, a mapped step's
    the key in its step key (`a.b[shard_0001]` is shard_0001 of `a.b`)."""
    step, _, mapped = step_key.partition("[")
    shard = mapping_key or mapped.rstrip("]")
    if not shard:
        raise dg.Failure(f"{step_key} output {output}: the shard IO manager stores the outputs of dynamic outputs "
                         "and mapped steps only (one per shard)")
    return f"{SHARDS_DIR}/{step}.{output}/{partition_slug(venue)}", shard


class ShardLakeIOManager(dg.ConfigurableIOManager):
    """Stores a mapped or dynamic op output (a polars DataFrame) as one Parquet table per shard in the lake."""

    root: str | None = None  # None: PEERIFY_LAKE when a step runs, else `data_lake/`

    def _lake(self) -> Lake:
        return Lake(self.root or paths.lake_root())

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        if not isinstance(obj, pl.DataFrame):
            raise dg.Failure(f"{context.step_key} output {context.name}: the shard IO manager stores polars "
                             f"DataFrames, got {type(obj).__name__}")
        venue = context.partition_key if context.has_partition_key else None
        table, shard = shard_location(context.step_key, context.name, context.mapping_key, venue)
        path = self._lake().write_table(table, shard, obj)
        context.add_output_metadata({"dagster/row_count": obj.height, "path": dg.MetadataValue.path(str(path))})

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        upstream = context.upstream_output
        venue = context.partition_key if context.has_partition_key else None
        table, shard = shard_location(upstream.step_key, upstream.name, upstream.mapping_key, venue)
        try:
            return self._lake().read_table(table, shard)
        except (FileNotFoundError, UnreadablePartitionError) as exc:
            raise dg.Failure(f"shard {shard} of {upstream.step_key} ({upstream.name}) for "
                             f"{venue!r} cannot be read: {exc}; re-execute the run from failure (or rebuild the "
                             "venue) to write it again") from exc
