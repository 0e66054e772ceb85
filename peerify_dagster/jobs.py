"""The code location's jobs, selected by asset key so that nothing here imports an asset module.

A job runs one partitions definition (Dagster infers it from the selected assets), so a venue is built in three
steps (`peerify build` runs them in order): the venue's graph up to the predictions' inputs, the predictions of each
of its configurations (one run per `<configuration>|<venue>` partition), then the venue's results that read every
built configuration.
"""

import dagster as dg

from peerify_dagster.domain.predictions import INPUT_TABLES, THREAD_TABLE

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
# `peerify verify`: an upload venue's graph up to what its predictions read (every mode's inputs), not the labellers,
# arbitration, slices or results, which need a benchmark. PaperSourced claims (LLM-written from the manuscript, for
# the retrieval metrics) are not drawn: an upload's claims are its review's.
VERIFY_INPUTS = dg.AssetSelection.assets(*INPUT_TABLES, THREAD_TABLE).upstream().required_multi_asset_neighbors()
# Passed by each of its runs as well: a run's own config replaces the job's default.
VERIFY_RUN_CONFIG = {"ops": {"paper_claims": {"config": {"paragraphs_per_paper": 0}}}}
verify_upload_job = dg.define_asset_job(
    "verify_upload",
    selection=VERIFY_INPUTS,
    config=VERIFY_RUN_CONFIG,
    description="One upload venue of `peerify verify` (a paper and its reviews) up to its predictions' inputs: "
                "forums, manuscript, chunks, review claims, retrieval.",
)
# `peerify verify --citations`: the citation half of one upload venue (its manuscript's citances, bibliography,
# reference checks, cited papers, evidence, verdicts, figures and the venue's citation-integrity ranking) and what
# it reads, with the forum tables (the paper's title on the pages); no review is needed.
# The reviews are there (forum_tables is one step), so the works its reviews cite are checked too, where it has any.
CITATION_RESULTS = ("citation_verdicts", "citation_metrics", "citation_integrity", "review_citation_verdicts")
VERIFY_CITATIONS = dg.AssetSelection.assets(*CITATION_RESULTS, "submissions").upstream() \
    .required_multi_asset_neighbors()
verify_citations_job = dg.define_asset_job(
    "verify_citations",
    selection=VERIFY_CITATIONS,
    description="The citation half of one upload venue of `peerify verify --citations` (or any venue): citances, "
                "bibliography, reference checks, cited papers, evidence, verdicts, figures, the citation-integrity "
                "ranking and the works its reviews cite.",
)
release_job = dg.define_asset_job(
    "publish_label_release", selection=RELEASE,
    description="Write a versioned label release of venues' benchmark slices (run config: version, venues).",
)

JOBS = [build_venue_job, predictions_job, venue_results_job, verify_upload_job, verify_citations_job, release_job]

REFRESH_RUN_CONFIG = {"ops": {"raw_openreview_notes": {"config": {"refetch": True}}}}
