"""Which of a venue's papers go in which shard of its heavy steps (parsing, embedding), so many workers share a venue.

A paper's shard is a hash of its forum id modulo the shard count: the same paper lands in the same shard on every
rerun and on every machine, whatever order the papers come in. The count is the venue's registry entry `shards: N`,
or automatic: one shard per PAPERS_PER_SHARD papers. A shard's rows keep their position in the venue table, so the
venue table assembled from the shards is the unsharded one, row for row.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

# About 3 minutes of parsing (30 pages a paper at 18 pages/s) and 8 of embedding (100 passages at 20/s) per shard on
# one core: long enough that a step's start-up is noise, short enough that a failed shard costs little to rerun.
PAPERS_PER_SHARD = 100
SHARD_KEY_PREFIX = "shard_"


class ShardCountError(ValueError):
    """A configured shard count is not a positive integer."""


def check_shard_count(shards: object) -> None:
    """Raise ShardCountError unless `shards` is a positive integer or None (automatic)."""
    if shards is not None and (not isinstance(shards, int) or isinstance(shards, bool) or shards < 1):
        raise ShardCountError(f"must be a positive integer or null (automatic), got {shards!r}")


def shard_count(papers: int, configured: int | None = None) -> int:
    """The number of shards for a venue of `papers` papers: the configured count, else one per PAPERS_PER_SHARD
    papers (at least one)."""
    check_shard_count(configured)
    return configured or max(1, math.ceil(papers / PAPERS_PER_SHARD))


def shard_of(paper_id: str, shards: int) -> int:
    """The shard (0 .. shards - 1) of a paper: its forum id's SHA-256 modulo the count, the same on every machine."""
    return int.from_bytes(hashlib.sha256(paper_id.encode("utf-8")).digest()[:8], "big") % shards


def shard_key(shard: int) -> str:
    """The shard's name in step keys and shard files (`shard_0003`), sorting in shard order."""
    return f"{SHARD_KEY_PREFIX}{shard:04d}"


def shard_rows(paper_ids: Sequence[str], shards: int) -> dict[int, list[int]]:
    """The row positions of each non-empty shard's papers, in shard order and, inside a shard, in row order. A
    paper with several rows (a paper's chunks) keeps all of them in its one shard. No rows at all give one empty
    shard 0, so the venue table is still assembled (empty) from it."""
    rows: dict[int, list[int]] = {}
    for position, paper_id in enumerate(paper_ids):
        rows.setdefault(shard_of(paper_id, shards), []).append(position)
    return dict(sorted(rows.items())) or {0: []}
