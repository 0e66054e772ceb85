"""Who may use the web app and how a request proves it: the access token a non-loopback bind needs, the signed
session each annotator gets, which pages an annotator may open, the per-session CSRF token every POST carries, the
Origin check, and the cap on request bodies. Kept apart from the routes so every route module gets the same rules
without repeating them.

Two roles. A session signed in with a name is an annotator's, and annotators work blind: they may open only the
routes named in ANNOTATOR_ROUTES (sign-in, arbitration, audit, consensus, agreement); every other route (the venue
overview with its metrics, the claim browser, the claim page, the page images and figures, verify) shows automated
labels, labellers' answers or claim ids, or leads to them, and answers an annotator 403. A new route is the
maintainer's until it is listed there. The maintainer is a session without a name: on a loopback server anyone who
reaches it (who can read the lake's files anyway); on a server with an access token, a session holding the token
itself. Annotators of a token server sign in with the annotator pass instead (`annotator_pass`, derived from the
token and shown to the maintainer on the venues page): it opens the annotator pages only, so the address the
maintainer hands out cannot unblind anyone, and signing out of it leaves nothing open.

The gate is one ASGI middleware (`AccessGate`) inside Starlette's SessionMiddleware, so no route can forget a check:
- with an access token, a request without it (or the annotator pass) in its session is sent to the sign-in page
  (GET) or refused with 403 (anything else); `?token=` on any URL signs the session in once and redirects to the same
  URL without it;
- an annotator's request for a maintainer's route is refused with 403 saying why (`/`, the venues, sends them to the
  arbitration page instead);
- every unsafe request (POST, PUT, PATCH, DELETE) must come from the app's own origin (an Origin header naming
  another is refused) and carry the session's CSRF token, in the form field `csrf_token` or the `X-CSRF-Token`
  header (htmx sends the header: `hx-headers` on <body>);
- a request body over the app's limit (derived from the upload limit: web/app.py) is refused with 413 before it is
  read, or once it grows past the limit; routes can ask for a smaller limit (`limited_body`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, urlencode

from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from peerify_dagster.resources.files import atomic_path

TOKEN_ENV = "PEERIFY_WEB_TOKEN"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
TOKEN_PARAMETER = "token"
SIGN_IN_PATH = "/signin"
STATIC_PREFIX = "/static/"
WEB_DIR = "web"  # the web app's own folder in the lake: its session secret and its page-image cache
SECRET_FILE = "session_secret"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The routes (by name) a signed-in annotator may open; every other route is the maintainer's (see the module doc).
ANNOTATOR_ROUTES = frozenset({
    "signin", "signin_submit", "signout", "static",
    "arbitration_venues", "arbitration_modes", "arbitration_next", "arbitration_undo", "arbitration_item",
    "arbitration_decide", "arbitration_skip", "arbitration_lease", "arbitration_leave", "agreement",
})
ANNOTATOR_HOME = "/arbitration"  # where `/` sends an annotator
_PASS_CONTEXT = b"peerify annotator pass"

# Session keys
_ACCESS = "access"  # a digest of the credential (token or annotator pass) the session signed in with: a new token
#                    signs every session out
_CSRF = "csrf"
_ANNOTATOR = "annotator"

RenderError = Callable[[Request, int, str], Awaitable[object]]


class SignInRequired(Exception):
    """Raised by `require_annotator` on a request without a signed-in annotator: the app redirects to sign-in."""


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server reachable from this machine only."""
    name = host.strip("[]")
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def annotator_pass(token: str) -> str:
    """What annotators of a server with an access token sign in with: it opens the annotator pages only (the token
    opens every page). Derived from the token, so it is stored nowhere and changes with it; the token cannot be
    worked out from it."""
    return base64.urlsafe_b64encode(hmac.new(token.encode(), _PASS_CONTEXT, hashlib.sha256).digest()[:18]).decode()


def session_secret(lake_root: Path) -> str:
    """The key that signs session cookies, kept in the lake (readable by its owner only) so sessions survive a
    restart; created on first use."""
    path = Path(lake_root) / WEB_DIR / SECRET_FILE
    if path.exists():
        return path.read_text().strip()
    secret = secrets.token_urlsafe(48)
    with atomic_path(path) as temporary:
        temporary.write_text(secret)
        os.chmod(temporary, 0o600)
    return path.read_text().strip()  # another server started at the same moment may have won: use what is on disk


# -- what routes use ---------------------------------------------------------------------------------------------------
def csrf_token(request: Request) -> str:
    """The session's CSRF token (created with the session): put it in every form (`csrf_field()` in templates)."""
    token = request.session.get(_CSRF)
    if not token:
        token = request.session[_CSRF] = secrets.token_urlsafe(32)
    return token


def current_annotator(request: Request) -> str | None:
    return request.session.get(_ANNOTATOR)


def require_annotator(request: Request) -> str:
    """The signed-in annotator's name; raises SignInRequired (-> redirect to the sign-in page) when there is none."""
    name = current_annotator(request)
    if not name:
        raise SignInRequired
    return name


def sign_in(request: Request, annotator: str, credential: str | None) -> None:
    """Start the annotator's own session: a fresh CSRF token, the name, and the mark of the credential (the access
    token or the annotator pass given, else the one the session already had)."""
    access = _digest(credential) if credential is not None else request.session.get(_ACCESS)
    request.session.clear()
    request.session[_ANNOTATOR] = annotator
    request.session[_CSRF] = secrets.token_urlsafe(32)
    if access:
        request.session[_ACCESS] = access


def sign_out(request: Request, token: str | None) -> None:
    """End the annotator's session. A session that holds the access token keeps it (the maintainer who signed in to
    arbitrate is the maintainer again); one that holds the annotator pass is left with nothing."""
    kept = _holds_token(request, token)
    request.session.clear()
    if kept:
        request.session[_ACCESS] = _digest(token)


def token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def credential_matches(given: str | None, token: str) -> bool:
    """Whether `given` signs an annotator in on a server with this access token: the token or the annotator pass."""
    return token_matches(given, token) or token_matches(given, annotator_pass(token))


def _holds_token(request: Request, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(request.session.get(_ACCESS, ""), _digest(token))


def has_access(request: Request, token: str | None) -> bool:
    """Whether the request may see pages: always without a token; with one, when its session signed in with it or
    with the annotator pass (which opens the annotator pages only: see `is_maintainer`)."""
    return token is None or _holds_token(request, token) or hmac.compare_digest(
        request.session.get(_ACCESS, ""), _digest(annotator_pass(token)))


def is_maintainer(request: Request, token: str | None) -> bool:
    """Whether the request sees the maintainer's pages: not signed in as an annotator, and (with a token) holding the
    token itself."""
    return current_annotator(request) is None and (token is None or _holds_token(request, token))


def route_name(app: ASGIApp, scope: Scope) -> str | None:
    """The name of the app's route that will answer `scope` (as the router picks it: a full match first, else one
    whose path matches but not its method); None when no route matches (the router's 404)."""
    partial = None
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route.name
        if match is Match.PARTIAL and partial is None:
            partial = route.name
    return partial


def open_to_annotators(app: ASGIApp, path: str) -> bool:
    """Whether a GET of `path` is one of the annotator's pages."""
    return route_name(app, {"type": "http", "path": path, "method": "GET", "root_path": ""}) in ANNOTATOR_ROUTES


def visible_nav(request: Request, nav: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The header links the request's role may follow: all for the maintainer, the annotator pages' for others."""
    token = request.app.state.settings.token
    if is_maintainer(request, token):
        return nav
    return tuple(link for link in nav if open_to_annotators(request.app, link[1]))


async def limited_body(request: Request, max_bytes: int) -> bytes:
    """The request body, or 413 naming the limit when it is larger than `max_bytes` (uploads: use before parsing)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise HTTPException(413, _too_large(max_bytes))
    body = await request.body()
    if len(body) > max_bytes:
        raise HTTPException(413, _too_large(max_bytes))
    return body


def _too_large(max_bytes: int) -> str:
    return f"The request is larger than this page accepts ({max_bytes / 1024 / 1024:.1f} MiB at most)."


# -- the gate ----------------------------------------------------------------------------------------------------------
BLIND_MESSAGE = ("Annotators work blind: these pages show the automated labels. Sign out to open the maintainer's "
                 "views.")
PASS_ONLY_MESSAGE = (" The annotator pass opens the annotator pages only; the maintainer's views need the server's "
                     "access token.")
NO_TOKEN_MESSAGE = ("This server needs its access token: open the address `peerify serve` printed (it carries "
                    "?token=...) or sign in with the token. Request refused.")
CSRF_MESSAGE = ("The form's security token (CSRF) is missing or does not match your session: reload the page and "
                "send it again. Request refused.")
CROSS_ORIGIN_MESSAGE = ("A request from another site ({origin}) is refused: forms of this app are sent from its own "
                        "pages.")
HOST_MESSAGE = ("Host {host!r} is not this server's address: a loopback server answers only requests addressed to "
                "localhost or 127.0.0.1. Request refused.")


class AccessGate:
    """The ASGI middleware that applies the module's rules to every HTTP request (see the module doc). Runs inside
    SessionMiddleware; `render_error(request, status, message)` makes the refusal page; `too_large` is what a body
    over `max_body_bytes` is told."""

    def __init__(self, app: ASGIApp, *, token: str | None, render_error: RenderError,
                 allowed_hosts: frozenset[str] | None, max_body_bytes: int, too_large: str):
        self.app, self.token, self.render_error = app, token, render_error
        self.allowed_hosts, self.max_body_bytes, self.too_large = allowed_hosts, max_body_bytes, too_large

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self._refusal_before_body(request)
        if refusal is not None:
            await self._refuse(request, *refusal, scope, receive, send)
            return
        if self.token is not None and not _holds_token(request, self.token) \
                and token_matches(request.query_params.get(TOKEN_PARAMETER), self.token):
            request.session[_ACCESS] = _digest(self.token)
            if request.method in ("GET", "HEAD"):
                await _redirect(without_token(request.url), scope, receive, send)
                return
        elif self.token is not None and not has_access(request, self.token):
            if request.url.path != SIGN_IN_PATH and not request.url.path.startswith(STATIC_PREFIX):
                if request.method in ("GET", "HEAD"):
                    target = URL(SIGN_IN_PATH).include_query_params(next=_local_target(request.url))
                    await _redirect(str(target), scope, receive, send)
                else:
                    await self._refuse(request, 403, NO_TOKEN_MESSAGE, scope, receive, send)
                return
        if not is_maintainer(request, self.token):
            name = route_name(scope["app"], scope)
            if name == "venues" and request.method in ("GET", "HEAD"):
                await _redirect(ANNOTATOR_HOME, scope, receive, send)
                return
            if name is not None and name not in ANNOTATOR_ROUTES:
                message = BLIND_MESSAGE + ("" if self.token is None or _holds_token(request, self.token)
                                           else PASS_ONLY_MESSAGE)
                await self._refuse(request, 403, message, scope, receive, send)
                return
        if request.method not in UNSAFE_METHODS:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive, self.max_body_bytes)
        if body is None:
            await self._refuse(request, 413, self.too_large, scope, receive, send)
            return
        replay = _replayer(body)
        if not await _csrf_ok(Request(scope, replay()), body):
            await self._refuse(request, 403, CSRF_MESSAGE, scope, receive, send)
            return
        await self.app(scope, replay(), send)

    def _refusal_before_body(self, request: Request) -> tuple[int, str] | None:
        host = (request.url.hostname or "").lower()
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            return 400, HOST_MESSAGE.format(host=host)
        if request.method in UNSAFE_METHODS:
            origin = request.headers.get("origin")
            if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
                return 403, CROSS_ORIGIN_MESSAGE.format(origin=origin)
            declared = request.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                return 413, self.too_large
        return None

    async def _refuse(self, request: Request, status: int, message: str, scope: Scope, receive: Receive,
                      send: Send) -> None:
        response = await self.render_error(request, status, message)
        await response(scope, receive, send)


async def _read_body(receive: Receive, max_bytes: int) -> bytes | None:
    """The whole request body, or None once it grows past `max_bytes` (a body without Content-Length)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replayer(body: bytes) -> Callable[[], Receive]:
    """Fresh `receive` callables that each hand the buffered body over once, as the server would have."""
    def make() -> Receive:
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return receive
    return make


async def _csrf_ok(request: Request, body: bytes) -> bool:
    expected = request.session.get(_CSRF)
    if not expected:
        return False
    given = request.headers.get(CSRF_HEADER)
    if given is None:
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("application/x-www-form-urlencoded"):
            given = (parse_qs(body.decode("latin-1")).get(CSRF_FIELD) or [None])[0]
        elif content_type.startswith("multipart/form-data"):
            try:  # a part may be as large as the body the gate let through (a pasted review over Starlette's 1 MB)
                form = await request.form(max_part_size=max(len(body), 1))
            except HTTPException:  # Starlette's answer to a form it cannot read: it carries no token
                return False
            value = form.get(CSRF_FIELD)
            given = value if isinstance(value, str) else None
            await form.close()
    return token_matches(given, expected)


def without_token(url: URL) -> str:
    """The URL's path and query without the access token."""
    return url.path + query_without_token(url.query)


def query_without_token(query: str) -> str:
    """`?query` without the access token ("" when nothing is left)."""
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != TOKEN_PARAMETER]
    return f"?{urlencode(kept)}" if kept else ""


def _local_target(url: URL) -> str:
    return url.path + (f"?{url.query}" if url.query else "")


def safe_next(target: str | None) -> str:
    """A post-sign-in target that stays on this site (a path, never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


async def _redirect(location: str, scope: Scope, receive: Receive, send: Send) -> None:
    await RedirectResponse(location, status_code=303)(scope, receive, send)
