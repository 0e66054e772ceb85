"""Signing in and out: each annotator gives a name (and, on a server with an access token, the token or the annotator
pass) and gets a session of their own, signed with the lake's session secret so it survives a restart. A signed-in
session is an annotator's and works blind (web/security.py): the maintainer's pages are closed to it until it signs
out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Route

from peerify_dagster.web.pages import render, settings
from peerify_dagster.web.security import (
    credential_matches,
    has_access,
    is_maintainer,
    safe_next,
    sign_in,
    sign_out,
)

MAX_NAME_LENGTH = 80


async def sign_in_page(request: Request):
    return render(request, "signin.html", {"next": safe_next(request.query_params.get("next")),
                                           "needs_token": not has_access(request, settings(request).token)})


async def sign_in_submit(request: Request):
    form = await request.form()
    name = " ".join(str(form.get("name", "")).split())
    target = safe_next(str(form.get("next", "")))
    token = settings(request).token
    needs_token = not has_access(request, token)
    given = str(form.get("token", "")) or None
    status, problem = 200, None
    if needs_token and not credential_matches(given, token):
        status, problem = 403, ("That is not this server's access token, nor its annotator pass: annotators ask "
                                "the maintainer for the pass.")
    elif not name:
        status, problem = 400, "Give your name: decisions are recorded under it."
    elif len(name) > MAX_NAME_LENGTH:
        status, problem = 400, f"A name of at most {MAX_NAME_LENGTH} characters, please."
    if problem:
        return render(request, "signin.html", {"next": target, "needs_token": needs_token, "problem": problem,
                                               "name": name}, status_code=status)
    sign_in(request, name, given if needs_token else None)
    return RedirectResponse(target, status_code=303)


async def sign_out_submit(request: Request):
    token = settings(request).token
    sign_out(request, token)
    return RedirectResponse("/" if is_maintainer(request, token) else "/signin", status_code=303)


ROUTES = [
    Route("/signin", sign_in_page, methods=["GET"], name="signin"),
    Route("/signin", sign_in_submit, methods=["POST"], name="signin_submit"),
    Route("/signout", sign_out_submit, methods=["POST"], name="signout"),
]
