"""Venues are dynamic partitions: registering a venue adds a partition without touching the others. Predictions
have one partition per configuration a venue uses (`<configuration>|<venue>`), added when the venue is built.

Why predictions are not a MultiPartitionsDefinition(venue x configuration): two dynamic dimensions are always their
full cross product, so every configuration meant for one venue (configurations.yaml `venues:`) showed in the UI as
missing work of every other venue. A single dynamic definition of pair keys holds only the pairs
`Configurations.for_venue` gives (the same string a MultiPartitionKey printed, so partition files and the history of
earlier materialisations keep their names). Dagster 1.13 has no built-in partition mapping from a pair key to its
venue (a custom PartitionMapping is deprecated and the UI ignores it), so the venue-partitioned inputs are declared
as deps with every partition mapped (EVERY_PARTITION: lineage is kept, and the UI's staleness errs on the safe side, a
venue's rebuild marking other venues' predictions as possibly stale) and read through the lake for the pair's
venue; the exact staleness, per venue and configuration, is `freshness.stale_predictions` (the sensor and the CLI).
"""

import dagster as dg

from peerify_dagster.domain.predictions import prediction_key

venue_partitions = dg.DynamicPartitionsDefinition(name="venues")
prediction_partitions = dg.DynamicPartitionsDefinition(name="predictions")

# A prediction partition's venue-partitioned deps, and the predictions a venue's results read: see the module doc.
EVERY_PARTITION = dg.AllPartitionMapping()
VENUE_PREDICTIONS = dg.AssetDep("predictions", partition_mapping=EVERY_PARTITION)  # read from the lake by venue


def add_venue_partitions(instance: dg.DagsterInstance, venue: str, configurations: list[str]) -> None:
    """Register the venue and its predictions partitions (one per configuration it uses) not registered yet."""
    if not instance.has_dynamic_partition(venue_partitions.name, venue):
        instance.add_dynamic_partitions(venue_partitions.name, [venue])
    known = set(instance.get_dynamic_partitions(prediction_partitions.name))
    if new := [key for name in configurations if (key := prediction_key(venue, name)) not in known]:
        instance.add_dynamic_partitions(prediction_partitions.name, new)
