"""The venue overview: `/` lists the venues with built data; `/venues/{venue}` shows a venue's slices with their
sizes and label distributions, every configuration's metrics per slice beside the majority baseline (with the
report's plain warning when a verifier answered one label to everything), the report's figures, and links to the
Dagster UI's lineage of each table. These are the maintainer's pages (an annotator is refused them: web/security.py);
on a server with an access token the venues page gives the maintainer the annotator pass to hand out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from peerify_dagster.domain.claim_view import metric_rows, slice_rows
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.web.pages import lake_data, render, settings, venue_of
from peerify_dagster.web.security import annotator_pass

# The tables the overview links to in the Dagster UI, in the order of the flow.
LINEAGE_ASSETS = ("submissions", "reviews", "manuscript_pdfs", "chunks", "review_claims", "claim_labels",
                  "canonical_labels", "benchmark_slices", "retrieval_runs", "predictions", "metrics", "venue_report")


async def venues_page(request: Request):
    token = settings(request).token
    return render(request, "overview/index.html", {"venues": lake_data(request).venues(),
                                                   "annotator_pass": annotator_pass(token) if token else None})


async def venue_page(request: Request):
    venue = venue_of(request)
    data = lake_data(request)
    return render(request, "overview/venue.html", {
        "venue": venue, "labels": LABELS, "slices": slice_rows(data.optional_table("benchmark_slices", venue)),
        "metrics": metric_rows(data.optional_table("metrics", venue)), "figures": data.figures(venue),
        "lineage": LINEAGE_ASSETS})


ROUTES = [
    Route("/", venues_page, methods=["GET"], name="venues"),
    Route("/venues/{venue}", venue_page, methods=["GET"], name="venue"),
]
NAV = (("Venues", "/"),)
