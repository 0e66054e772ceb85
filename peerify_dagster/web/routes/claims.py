"""The claim browser (`/venues/{venue}/claims`: filter by slice, gold label, configuration and its predicted label,
disagreement; paginated; htmx swaps the results without a full reload) and the claim page
(`/venues/{venue}/claims/{claim_id}`: the review text with the claim's span, what each labeller saw and answered,
the gold label with its provenance, every configuration's passages and verdict, and the manuscript page with the
passage outlined; `.../manuscript` is that pane alone, for htmx)."""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.routing import Route

from peerify_dagster.domain.claim_view import (
    DISAGREEMENTS,
    ClaimFilter,
    claim_call_ids,
    claim_detail,
    filter_claims,
    page_view,
)
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.web.data import NotInLake
from peerify_dagster.web.pages import is_htmx, lake_data, render, venue_of

PAGE_SCALE = 1.5  # pixels per PDF point of the manuscript page shown (one of data.PAGE_SCALES)
# The works a claim's review cites and their verdicts (assets/review_citations.py), read when built.
REVIEW_CITATION_TABLES = ("review_citations", "review_citation_verdicts")
LEDGER_UNREADABLE = ("A segment of the LLM call ledger cannot be read (the next build sets it aside and makes its "
                     "calls again): justifications are left out until then.")


async def claim_browser(request: Request):
    venue = venue_of(request)
    index = lake_data(request).claim_index(venue)
    wanted = ClaimFilter.from_query(request.query_params)
    context = {"venue": venue, "index": index, "wanted": wanted, "result": filter_claims(index, wanted),
               "labels": LABELS, "disagreements": DISAGREEMENTS}
    return render(request, "claims/_results.html" if is_htmx(request) else "claims/browser.html", context)


def _detail(request: Request):
    venue = venue_of(request)
    data = lake_data(request)
    tables = replace(data.claim_tables(venue),
                     **{name: data.optional_table(name, venue) for name in REVIEW_CITATION_TABLES})
    claim_id = request.path_params["claim_id"]
    answers = data.ledger_answers(claim_call_ids(tables, claim_id))
    detail = claim_detail(tables, claim_id, answers or {})
    if detail is None:
        raise NotInLake(f"venue {venue!r} has no claim {claim_id!r}")
    if answers is None:
        detail.notes.append(LEDGER_UNREADABLE)
    return venue, detail


def _pane(request: Request, detail) -> dict | None:  # noqa: ANN001 - a ClaimDetail
    page = request.query_params.get("page", "")
    return page_view(detail, request.query_params.get("chunk") or detail.default_chunk_id,
                     int(page) if page.isdigit() else None)


async def claim_page(request: Request):
    venue, detail = _detail(request)
    return render(request, "claims/claim.html", {"venue": venue, "detail": detail, "pane": _pane(request, detail),
                                                 "scale": PAGE_SCALE})


async def manuscript_pane(request: Request):
    venue, detail = _detail(request)
    return render(request, "claims/_manuscript.html", {"venue": venue, "detail": detail,
                                                       "pane": _pane(request, detail), "scale": PAGE_SCALE})


ROUTES = [
    Route("/venues/{venue}/claims", claim_browser, methods=["GET"], name="claims"),
    Route("/venues/{venue}/claims/{claim_id}", claim_page, methods=["GET"], name="claim"),
    Route("/venues/{venue}/claims/{claim_id}/manuscript", manuscript_pane, methods=["GET"], name="manuscript_pane"),
]
