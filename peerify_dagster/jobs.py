"""The code location's jobs, selected by asset key so that nothing here imports an asset module.

A job runs one partitions definition (Dagster infers it from the selected assets), so a venue is built in three
steps (`peerify build` runs them in order): the venue's graph up to the predictions' inputs, the predictions of each
of its configurations (one run per `<configuration>|<venue>` partition), then the venue's results that read every
built configuration.
"""

import dagster as dg

PREDICTIONS = dg.AssetSelection.assets("predictions")
RELEASE = dg.AssetSelection.assets("label_release")  # not partitioned: a release is its own run

build_venue_job = dg.define_asset_job(
    "build_venue",
    selection=dg.AssetSelection.all() - PREDICTIONS.downstream() - RELEASE,
    description="Materialise the venue-partitioned asset graph for one venue, up to the predictions' inputs.",
)
predictions_job = dg.define_asset_job(
    "venue_predictions",
    selection=PREDICTIONS,
    description="Predictions of one configuration (configurations.yaml) for one venue.",
)
venue_results_job = dg.define_asset_job(
    "venue_results",
    selection=PREDICTIONS.downstream() - PREDICTIONS,
    description="The venue's results over every configuration built for it (reports).",
)
release_job = dg.define_asset_job(
    "publish_label_release", selection=RELEASE,
    description="Write a versioned label release of venues' benchmark slices (run config: version, venues).",
)

JOBS = [build_venue_job, predictions_job, venue_results_job, release_job]

REFRESH_RUN_CONFIG = {"ops": {"raw_openreview_notes": {"config": {"refetch": True}}}}
