"""The web app over the lake (`peerify serve`): server-rendered pages (Starlette + Jinja2, htmx shipped as a static
file, no build step). Each area is one route module under web/routes/ exposing ROUTES (and optionally NAV, its
(label, path) links in the page header, and `lifespan(app)`, an async context manager run while the app serves);
ROUTE_MODULES lists them once.

Access rules (web/security.py) wrap every route: the access token when the server has one, a signed session per
annotator, a CSRF token on every POST, an Origin check, and a cap on request bodies derived from the upload limit
(PEERIFY_MAX_PDF_MB). Outside them, the access log: one line per request (`AccessLog`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from peerify_dagster.domain import uploads
from peerify_dagster.web.data import LakeData, NotInLake
from peerify_dagster.web.pages import DEFAULT_DAGSTER_URL, STATIC_DIR, Settings, is_htmx, render_error
from peerify_dagster.web.routes import arbitration, citations, claims, files, overview, references, session, verify
from peerify_dagster.web.security import (
    LOOPBACK_NAMES,
    SIGN_IN_PATH,
    AccessGate,
    SignInRequired,
    query_without_token,
    session_secret,
)

ROUTE_MODULES = (session, files, overview, claims, citations, arbitration, verify, references)
SESSION_COOKIE = "peerify_session"
SESSION_MAX_AGE_S = 14 * 24 * 3600


def create_app(lake_root: str | Path, *, token: str | None, secret_key: str | None = None,
               dagster_url: str = DEFAULT_DAGSTER_URL, allowed_hosts: frozenset[str] | None = None,
               max_pdf_bytes: int | None = None, max_body_bytes: int | None = None,
               access_log: TextIO | None = None) -> Starlette:
    """The app serving the lake at `lake_root`. `token`: the access token every request must carry (None: a
    loopback server, which then answers only requests addressed to a loopback name, against DNS rebinding).
    `secret_key` signs session cookies (default: the lake's persisted secret). `allowed_hosts`: the Host names
    answered (default: loopback names without a token, any with one). `max_pdf_bytes`: the upload limit (default:
    PEERIFY_MAX_PDF_MB, else 50 MB; UploadError when the variable is no number); `max_body_bytes`: the cap on a
    request body (default: derived from the upload limit). `access_log`: where the access log is written (None:
    nowhere)."""
    data = LakeData(lake_root)
    hosts = allowed_hosts if allowed_hosts is not None else (LOOPBACK_NAMES if token is None else None)
    max_pdf = max_pdf_bytes if max_pdf_bytes is not None else uploads.max_pdf_bytes()
    middleware = [
        Middleware(SessionMiddleware, secret_key=secret_key or session_secret(data.root),
                   session_cookie=SESSION_COOKIE, max_age=SESSION_MAX_AGE_S, same_site="lax"),
        Middleware(AccessGate, token=token, render_error=render_error, allowed_hosts=hosts,
                   max_body_bytes=max_body_bytes or uploads.max_request_bytes(max_pdf),
                   too_large=uploads.over_upload_limit("the request", max_pdf)
                   + ": go back, the form keeps what you typed"),  # refused unread: the browser still has it
    ]
    if access_log is not None:  # outermost: it sees every answer, the gate's refusals too
        middleware.insert(0, Middleware(AccessLog, stream=access_log))
    routes = [route for module in ROUTE_MODULES for route in module.ROUTES]
    routes.append(Mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static"))
    app = Starlette(routes=routes, middleware=middleware, lifespan=_lifespan, exception_handlers={
        HTTPException: _http_error, NotInLake: _not_in_lake, SignInRequired: _sign_in_required})
    app.state.data = data
    app.state.settings = Settings(lake_root=data.root, token=token, dagster_url=dagster_url, max_pdf_bytes=max_pdf,
                                  nav=tuple(link for module in ROUTE_MODULES for link in getattr(module, "NAV", ())))
    return app


class AccessLog:
    """The access log: one line per HTTP request once it is answered: when (UTC), the method, the path with its query
    (the access token taken out; characters that could fake a line escaped), the status and the duration. Never a
    body, a header or a cookie."""

    def __init__(self, app: ASGIApp, *, stream: TextIO):
        self.app, self.stream = app, stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.monotonic(), 500  # an exception before any answer: the server answers 500

        async def answered(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, answered)
        finally:
            at = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            target = quote(scope["path"], safe="/:@!$&'()*+,;=-._~") + query_without_token(
                scope["query_string"].decode("latin-1"))
            self.stream.write(f"{at} {scope['method']} {target} {status} "
                              f"{(time.monotonic() - started) * 1000:.0f}ms\n")
            self.stream.flush()


@contextlib.asynccontextmanager
async def _lifespan(app: ASGIApp) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for module in ROUTE_MODULES:
            if hasattr(module, "lifespan"):
                await stack.enter_async_context(module.lifespan(app))
        yield


async def _http_error(request: Request, exc: HTTPException):
    if exc.status_code in (404, 405) and exc.detail in ("Not Found", "Method Not Allowed"):  # the router's own
        what = "page" if exc.status_code == 404 else f"{request.method} route"
        return await render_error(request, exc.status_code, f"There is no {what} at {request.url.path}.")
    return await render_error(request, exc.status_code, str(exc.detail))


async def _not_in_lake(request: Request, exc: NotInLake):
    return await render_error(request, 404, str(exc))


async def _sign_in_required(request: Request, exc: SignInRequired):
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    location = str(URL(SIGN_IN_PATH).include_query_params(next=target))
    if is_htmx(request):  # htmx would follow a redirect inside the fragment: have it load the sign-in page instead
        return Response(status_code=204, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)
