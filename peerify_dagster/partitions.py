"""Venues are dynamic partitions: registering a venue adds a partition without touching the others. Predictions
are partitioned by venue x configuration (configurations.yaml), both dynamic: adding a configuration adds a
partition without touching the others."""

import dagster as dg

venue_partitions = dg.DynamicPartitionsDefinition(name="venues")
configuration_partitions = dg.DynamicPartitionsDefinition(name="configurations")

VENUE_DIMENSION = "venue"
CONFIGURATION_DIMENSION = "configuration"
prediction_partitions = dg.MultiPartitionsDefinition(
    {VENUE_DIMENSION: venue_partitions, CONFIGURATION_DIMENSION: configuration_partitions})
# Each venue-partitioned input of a prediction partition is the partition of its venue.
FROM_VENUE = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name=VENUE_DIMENSION)


def prediction_key(venue: str, configuration: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({VENUE_DIMENSION: venue, CONFIGURATION_DIMENSION: configuration})
