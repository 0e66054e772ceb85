"""What every route module shares: rendering a template with the common context (the signed-in annotator, the CSRF
token, the navigation, the Dagster UI's address), the error page, the lake reader and the app's settings, and the
URL form of a venue key (venue keys hold slashes; URLs carry the lake's own partition slug instead)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from jinja2 import pass_context
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.templating import Jinja2Templates

from peerify_dagster.resources.lake import partition_slug
from peerify_dagster.web.data import LakeData, NotInLake
from peerify_dagster.web.security import CSRF_FIELD, CSRF_HEADER, csrf_token, current_annotator, visible_nav

TEMPLATES_DIR = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_DAGSTER_URL = "http://127.0.0.1:3000"


@dataclass(frozen=True)
class Settings:
    """The app's settings, as `create_app` was given them (request.app.state.settings)."""

    lake_root: Path
    token: str | None
    dagster_url: str
    max_pdf_bytes: int  # the upload limit (PEERIFY_MAX_PDF_MB, read once when the app is made)
    nav: tuple[tuple[str, str], ...]  # (label, path) of every route module's NAV, in ROUTE_MODULES order (an
    #                                     annotator's header shows only those of the annotator pages)


def settings(request: Request) -> Settings:
    return request.app.state.settings


def lake_data(request: Request) -> LakeData:
    return request.app.state.data


def is_htmx(request: Request) -> bool:
    """Whether htmx sent the request (it then wants a fragment, not a whole page)."""
    return request.headers.get("HX-Request") == "true"


# -- venues in URLs --------------------------------------------------------------------------------------------------
def venue_slug(venue: str) -> str:
    """A venue key as one URL path segment (the lake's partition slug: `/` -> `__`)."""
    return partition_slug(venue)


def venue_of(request: Request) -> str:
    """The venue the URL's `{venue}` segment names; NotInLake (404) when the lake has no data for it."""
    venue = request.path_params["venue"].replace("__", "/")
    if not lake_data(request).has_venue(venue):
        raise NotInLake(f"venue {venue!r} has no built data in this lake: build it with `peerify build {venue}`")
    return venue


def venue_url(venue: str, *parts: str) -> str:
    """The app's URL of a venue page: venue_url("sample", "claims") -> /venues/sample/claims."""
    return "/".join(["", "venues", quote(venue_slug(venue), safe=""), *(quote(p, safe="") for p in parts)])


# -- templates -------------------------------------------------------------------------------------------------------
def _common_context(request: Request) -> dict:
    config = settings(request)
    return {"annotator": current_annotator(request), "csrf_token": csrf_token(request),
            "nav": visible_nav(request, config.nav),
            "dagster_url": config.dagster_url.rstrip("/"), "csrf_header": CSRF_HEADER}


@pass_context
def csrf_field(context) -> Markup:  # noqa: ANN001 - Jinja's context
    """`{{ csrf_field() }}` in a form: the hidden field carrying the session's CSRF token."""
    return Markup(f'<input type="hidden" name="{CSRF_FIELD}" value="{escape(context["csrf_token"])}">')


@pass_context
def dagster_asset_url(context, asset_key: str) -> str:  # noqa: ANN001 - Jinja's context
    """The Dagster UI's page of an asset (its lineage, runs and partitions)."""
    return f"{context['dagster_url']}/assets/{quote(asset_key)}"


templates = Jinja2Templates(directory=str(TEMPLATES_DIR), context_processors=[_common_context])
templates.env.globals.update(csrf_field=csrf_field, dagster_asset_url=dagster_asset_url, venue_url=venue_url)
templates.env.filters["percent"] = lambda value: "-" if value is None else f"{100 * value:.1f}%"
templates.env.filters["score"] = lambda value: "-" if value is None else f"{value:.3f}"
templates.env.filters["short_id"] = lambda value: value if not value or len(value) <= 16 else f"{value[:12]}…"


def render(request: Request, name: str, context: dict | None = None, status_code: int = 200) -> HTMLResponse:
    """The template `name` rendered with `context` and the common context."""
    return templates.TemplateResponse(request, name, context or {}, status_code=status_code)


async def render_error(request: Request, status_code: int, message: str) -> HTMLResponse:
    """The refusal or error page (an htmx request gets the message alone, shown in the page's #flash area)."""
    return render(request, "_error.html" if is_htmx(request) else "error.html",
                  {"status_code": status_code, "message": message}, status_code=status_code)
