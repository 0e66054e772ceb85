"""The citation half's pages: the citance browser (`/venues/{venue}/citances`: every citing sentence with its markers,
how they resolved and each verifier's verdict; filtered by paper, verifier, verdict, marker resolution and cited-paper
resolution; htmx swaps the results in place) and the split view of one citance (`/venues/{venue}/citances/{id}`:
the citing manuscript's page with the citance's boxes, the claim card, and the cited paper's page with the evidence
passage's boxes; `.../citing` and `.../cited` are those panes alone, for htmx). Everything is read from the lake's
tables: no model is called."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
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
from peerify_dagster.domain.citations.integrity import NO_SOURCE_ASKED, VenueIntegrity, integrity_csv, venue_integrity
from peerify_dagster.domain.citations.vocabulary import CITATION_LABELS, REFERENCE_STATUSES
from peerify_dagster.web.data import NotInLake
from peerify_dagster.web.pages import is_htmx, lake_data, render, venue_of, venue_slug

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


# -- the citation-integrity view -------------------------------------------------------------------------------------
# `/venues/{venue}/citation-integrity`: the submissions ranked by not_found, then suspicious references, each opening
# its entries with every source's answer, filtered by status; `.../citation-integrity.csv`: those entries as CSV.
# Computed from the bibliography and reference checks (domain/citations/integrity.py), as the `citation_integrity`
# asset is. Like the citance browser they are the maintainer's: an annotator is refused them (web/security.py).
# The tables the view is computed from (its cache is dropped when one of them is rebuilt).
INTEGRITY_TABLES = ("bibliography", "reference_checks", "submissions")
_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")


def _integrity(request: Request) -> tuple[str, VenueIntegrity, str | None]:
    """The venue, its integrity view (NotInLake when its bibliography or reference checks are not built) and the
    status asked for (an unknown one matches nothing, as the browser's filters)."""
    venue = venue_of(request)
    data = lake_data(request)
    integrity = data.derived(("citation_integrity", venue), [(table, venue) for table in INTEGRITY_TABLES],
                             lambda: venue_integrity(venue, data.table("bibliography", venue),
                                                     data.table("reference_checks", venue),
                                                     data.optional_table("submissions", venue)))
    return venue, integrity, request.query_params.get("status") or None


async def integrity_page(request: Request):
    venue, integrity, status = _integrity(request)
    context = {"venue": venue, "integrity": integrity, "status": status, "statuses": REFERENCE_STATUSES,
               "rows": integrity.submission_rows(status), "no_source_asked": NO_SOURCE_ASKED}
    return render(request, "citations/_integrity_results.html" if is_htmx(request) else "citations/integrity.html",
                  context)


async def integrity_download(request: Request):
    venue, integrity, status = _integrity(request)
    name = _UNSAFE_FILENAME.sub("_", f"{venue_slug(venue)}-citation-integrity" + (f"-{status}" if status else ""))
    return Response(integrity_csv(integrity.entries_with(status)), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}.csv"'})


ROUTES = [
    Route("/venues/{venue}/citances", citance_browser, methods=["GET"], name="citances"),
    Route("/venues/{venue}/citances/{citance_id}", citance_page, methods=["GET"], name="citance"),
    Route("/venues/{venue}/citances/{citance_id}/citing", citing_pane, methods=["GET"], name="citing_pane"),
    Route("/venues/{venue}/citances/{citance_id}/cited", cited_pane, methods=["GET"], name="cited_pane"),
    Route("/venues/{venue}/citation-integrity", integrity_page, methods=["GET"], name="citation_integrity"),
    Route("/venues/{venue}/citation-integrity.csv", integrity_download, methods=["GET"],
          name="citation_integrity_csv"),
]
