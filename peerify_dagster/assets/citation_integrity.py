"""Stage 6, the citation half's venue-scale view: the venue's submissions ranked by the references no metadata
source knows (`not_found`) and those a record contradicts (`suspicious`), for program chairs screening a venue for
fabricated references. The logic is in domain/citations/integrity.py; the web app's integrity page and its CSV show
the same ranking with every entry.

No `from __future__ import annotations` here, as in every asset module: Dagster reads the annotations of the
context and the inputs when the asset is defined."""

import dagster as dg
import polars as pl

from peerify_dagster.domain.citations.integrity import (
    NO_SOURCE_ASKED,
    UNREADABLE_EVIDENCE,
    integrity_markdown,
    venue_integrity,
)
from peerify_dagster.domain.citations.vocabulary import NOT_FOUND, REFERENCE_STATUSES, SUSPICIOUS
from peerify_dagster.partitions import venue_partitions

# The citation half's group (assets/citations.py's GROUP: asset modules do not import each other).
GROUP = "citations"


@dg.asset(partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"})
def citation_integrity(context: dg.AssetExecutionContext, bibliography: pl.DataFrame,
                       reference_checks: pl.DataFrame, submissions: pl.DataFrame) -> pl.DataFrame:
    """One row per submission of the venue with its reference entries counted by check status (not_found,
    suspicious, unvalidatable, validated), whether any metadata source was asked for it (`checked`), and its rank:
    most not_found first, then most suspicious, then paper id. The metadata gives the venue's counts and the top
    ten."""
    integrity = venue_integrity(context.partition_key, bibliography, reference_checks, submissions)
    ranking = integrity.ranking
    for answers in integrity.entries["answers"]:
        for answer in answers:
            if answer.startswith(UNREADABLE_EVIDENCE):
                context.log.warning(answer)
    if integrity.entries.height and not integrity.any_source_asked:
        context.log.warning(f"{context.partition_key}: {NO_SOURCE_ASKED}")
    context.add_output_metadata({
        "submissions": ranking.height,
        "entries": integrity.entries.height,
        "by_status": dg.MetadataValue.json({status: int(ranking[status].sum()) for status in REFERENCE_STATUSES}),
        "submissions_flagged": ranking.filter((pl.col(NOT_FOUND) > 0) | (pl.col(SUSPICIOUS) > 0)).height,
        "any_source_asked": integrity.any_source_asked,
        "top": dg.MetadataValue.md(integrity_markdown(ranking)),
    })
    return ranking
