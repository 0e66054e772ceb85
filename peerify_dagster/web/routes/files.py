"""Files, served by content hash only: a manuscript page as PNG (rendered lazily with pypdfium2, cached in the lake)
and a report figure. The hash is looked up in the lake's tables (`manuscript_pdfs`, `venue_report`); nothing from
the request becomes part of a path, so a traversal attempt or an unknown hash is a 404 with its reason."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import FileResponse
from starlette.routing import Route

from peerify_dagster.web.data import PAGE_SCALES, SHA256, NotInLake
from peerify_dagster.web.pages import lake_data

# Content-addressed: a URL's bytes never change, so the browser may keep them.
IMMUTABLE = {"Cache-Control": "private, max-age=31536000, immutable"}


def _sha256(request: Request) -> str:
    sha256 = request.path_params["sha256"]
    if not SHA256.match(sha256):
        raise NotInLake("files are named by their sha256 (64 lower-case hex digits); nothing else is served")
    return sha256


async def manuscript_page(request: Request):
    scale_text = request.query_params.get("scale", str(PAGE_SCALES[0]))
    try:
        scale = float(scale_text)
    except ValueError:
        raise NotInLake(f"scale {scale_text!r} is not a number") from None
    path = lake_data(request).page_image(_sha256(request), request.path_params["page"], scale)
    return FileResponse(path, media_type="image/png", headers=IMMUTABLE)


async def report_figure(request: Request):
    return FileResponse(lake_data(request).figure_path(_sha256(request)), media_type="image/png", headers=IMMUTABLE)


ROUTES = [
    Route("/pdf/{sha256}/page/{page:int}.png", manuscript_page, methods=["GET"], name="manuscript_page"),
    Route("/figures/{sha256}.png", report_figure, methods=["GET"], name="report_figure"),
]
