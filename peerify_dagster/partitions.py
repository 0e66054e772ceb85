"""Venues are dynamic partitions: registering a venue adds a partition without touching the others."""

import dagster as dg

venue_partitions = dg.DynamicPartitionsDefinition(name="venues")
