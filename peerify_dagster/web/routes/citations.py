"""The citation half's pages: the citance browser (`/venues/{venue}/citances`: every citing sentence with its markers,
how they resolved and each verifier's verdict; filtered by paper, verifier, verdict, marker resolution and cited-paper
resolution; htmx swaps the results in place) and the split view of one citance (`/venues/{venue}/citances/{id}`:
the citing manuscript's page with the citance's boxes, the claim card, and the cited paper's page with the evidence
passage's boxes; `.../citing` and `.../cited` are those panes alone, for htmx). Everything is read from the lake's
tables: no model is called."""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from peerify_dagster.domain.citation_view import (
    CITED_STATUSES,
    MARKER_RESOLUTIONS,
    NO_VERDICT,
    CitanceFilter,
    citance_detail,
    cited_page_view,
    citing_page_view,
    filter_citances,
)
from peerify_dagster.domain.citations.vocabulary import CITATION_LABELS
from peerify_dagster.web.data import NotInLake
from peerify_dagster.web.pages import is_htmx, lake_data, render, venue_of

PAGE_SCALE = 1.5  # pixels per PDF point of the pages shown (one of data.PAGE_SCALES)
VERDICT_CHOICES = {**{label: label for label in CITATION_LABELS}, NO_VERDICT: "no verdict"}


async def citance_browser(request: Request):
    venue = venue_of(request)
    index = lake_data(request).citance_index(venue)
    wanted = CitanceFilter.from_query(request.query_params)
    context = {"venue": venue, "index": index, "wanted": wanted, "result": filter_citances(index, wanted),
               "verdicts": VERDICT_CHOICES, "resolutions": MARKER_RESOLUTIONS, "cited_statuses": CITED_STATUSES}
    return render(request, "citations/_results.html" if is_htmx(request) else "citations/browser.html", context)


def _number(request: Request, name: str) -> int | None:
    value = request.query_params.get(name, "")
    return int(value) if value.isdigit() else None


def _detail(request: Request):
    venue = venue_of(request)
    citance_id = request.path_params["citance_id"]
    detail = citance_detail(lake_data(request).citation_tables(venue), citance_id)
    if detail is None:
        raise NotInLake(f"venue {venue!r} has no citance {citance_id!r}")
    return venue, detail


def _context(request: Request, venue: str, detail, which: str) -> dict:  # noqa: ANN001 - a CitanceDetail
    """The template context of the page or of one pane (`which`: page, citing or cited). Each pane has its own query
    parameters (citing: citing_page; cited: entry, passage, cited_page), so the page's URL names both panes' state
    and a pane swapped in leaves the other as it is."""
    query = request.query_params
    context = {"venue": venue, "detail": detail, "scale": PAGE_SCALE}
    if which in ("page", "citing"):
        context["citing"] = citing_page_view(detail, _number(request, "citing_page"))
    if which in ("page", "cited"):
        context["cited"] = cited_page_view(detail, query.get("entry"), query.get("passage"),
                                           _number(request, "cited_page"))
    return context


async def citance_page(request: Request):
    venue, detail = _detail(request)
    return render(request, "citations/citance.html", _context(request, venue, detail, "page"))


async def citing_pane(request: Request):
    venue, detail = _detail(request)
    return render(request, "citations/_citing.html", _context(request, venue, detail, "citing"))


async def cited_pane(request: Request):
    venue, detail = _detail(request)
    return render(request, "citations/_cited.html", _context(request, venue, detail, "cited"))


ROUTES = [
    Route("/venues/{venue}/citances", citance_browser, methods=["GET"], name="citances"),
    Route("/venues/{venue}/citances/{citance_id}", citance_page, methods=["GET"], name="citance"),
    Route("/venues/{venue}/citances/{citance_id}/citing", citing_pane, methods=["GET"], name="citing_pane"),
    Route("/venues/{venue}/citances/{citance_id}/cited", cited_pane, methods=["GET"], name="cited_pane"),
]
