"""`peerify serve`: the web app over the lake (venues, claims with their evidence, arbitration, verify), served by
uvicorn. Loopback only by default; binding any other address needs an access token (PEERIFY_WEB_TOKEN, else one is
generated and printed), and every request must then carry it; annotators sign in with the annotator pass printed
beside it, which opens their pages only. Starting the server calls no model. The access log goes to stderr: one line
per request (time, method, path without the access token, status, duration; never a body or a cookie)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from peerify_dagster import paths
from peerify_dagster.cli.common import ConfigError, guarded, refuse_object_store_lake, say

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8400
MIN_TOKEN_LENGTH = 16


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("serve", help="the web app over the lake (loopback only unless given a token)",
                                  description="The web app over the lake. Its access log goes to stderr: one line per "
                                              "request (UTC time, method, path without the access token, status, "
                                              "duration); form bodies and cookies are never logged. PDFs uploaded "
                                              "to /verify are limited by PEERIFY_MAX_PDF_MB (default 50).")
    serve.add_argument("--host", default=DEFAULT_HOST,
                       help="address to bind (default 127.0.0.1; any other needs an access token: PEERIFY_WEB_TOKEN, "
                            "else one is generated)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--lake", help="the lake folder (default: PEERIFY_LAKE, else data_lake/)")
    serve.add_argument("--dagster-url", default=None,
                       help="the Dagster UI the pages link to for lineage (default http://127.0.0.1:3000)")
    serve.set_defaults(func=cmd_serve)


def access_token(host: str, configured: str | None) -> tuple[str | None, bool]:
    """(the token the server requires, whether it was generated now). A loopback server needs none unless one is
    configured; any other bind always has one. A configured token shorter than MIN_TOKEN_LENGTH is refused."""
    from peerify_dagster.web.security import TOKEN_ENV, is_loopback, new_token

    if configured is not None and len(configured) < MIN_TOKEN_LENGTH:
        raise ConfigError(f"{TOKEN_ENV} is {len(configured)} characters long: an access token has at least "
                          f"{MIN_TOKEN_LENGTH} (unset it to have one generated)")
    if configured is not None:
        return configured, False
    if is_loopback(host):
        return None, False
    return new_token(), True


def address(host: str, port: int, token: str | None) -> str:
    """The address to open: the bound host (this machine's name for a wildcard bind), with the token when needed."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


@guarded(ConfigError)
def cmd_serve(args: argparse.Namespace) -> int:
    from peerify_dagster.web.security import TOKEN_ENV, annotator_pass

    refuse_object_store_lake("`peerify serve`", args.lake or paths.lake_root())
    lake_root = Path(args.lake or paths.lake_root())
    if not lake_root.is_dir():
        raise ConfigError(f"no lake at {lake_root}: build a venue first (`make demo` builds the sample)")
    token, generated = access_token(args.host, os.environ.get(TOKEN_ENV))
    import uvicorn

    from peerify_dagster.domain.uploads import UploadError
    from peerify_dagster.web.app import create_app
    from peerify_dagster.web.pages import DEFAULT_DAGSTER_URL

    try:
        app = create_app(lake_root, token=token, dagster_url=args.dagster_url or DEFAULT_DAGSTER_URL,
                         access_log=sys.stderr)
    except UploadError as bad_limit:  # PEERIFY_MAX_PDF_MB that is no number
        raise ConfigError(str(bad_limit)) from None
    if generated:
        say(f"{args.host} is not a loopback address: every request needs this access token (generated now; set "
            f"{TOKEN_ENV} to choose one): {token}")
    print(f"Peerify web app over {lake_root}: open {address(args.host, args.port, token)}", flush=True)
    if token:
        print(f"Annotators sign in at {address(args.host, args.port, None)}signin with their name and the annotator "
              f"pass {annotator_pass(token)} (it opens the annotator pages only, never the maintainer's)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", server_header=False)
    return 0
