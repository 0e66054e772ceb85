"""The table a venue imported from a published release has beside the standard ones (`peerify import-release` writes
it and records it in the Dagster instance; no step computes it)."""

import dagster as dg

from peerify_dagster.partitions import venue_partitions

# An assets definition without a step (not executable), so the code location finds it like every other stage's.
release_rows = dg.AssetsDefinition(specs=[dg.AssetSpec(
    "release_rows", partitions_def=venue_partitions, group_name="release_import", kinds={"parquet"},
    description="Every row a release import took, one per JSONL line: file and line, the claim id it became, the "
                "labels as written and as mapped, the evidence quotes, and the line itself (peerify import-release).",
)])
