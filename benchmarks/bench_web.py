"""The web app's page render times over a built lake: per page kind, the first request a freshly started server
answers (cold: it reads the lake's tables, compiles the templates, renders the PDF page) and the median, p95 and
max of the requests after it (warm), one client on one kept-alive connection, as a browser tab sends them.

Each page kind gets a server of its own (`peerify serve` in a child process on a free loopback port), so every cold
figure is that of a server that has answered nothing yet, and the server's CPU time is never the client's. Kinds:
the venue overview, the claim browser (whole page, and a filter's htmx fragment), the claim page of every claim
(cold: the first claim; warm: every claim in turn, at least once each), and a manuscript page PNG at the claim
page's scale, first rendered (every page of the venue's manuscripts not in the lake's page cache yet) and cached.

Without `--lake`, the sample venue is built first into a temporary folder (`peerify build sample`, answered from
the shipped LLM recording, its own Dagster home), as the web tests build it. With `--lake`, that lake is served as
it is (its page-image cache is used and filled: pages rendered before count as cached).

    .venv/bin/python benchmarks/bench_web.py
    .venv/bin/python benchmarks/bench_web.py --lake data_lake --venue sample --requests 50
"""

from __future__ import annotations

import argparse
import http.client
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import polars as pl  # noqa: E402

from peerify_dagster.resources.lake import Lake  # noqa: E402
from peerify_dagster.web.data import PAGE_IMAGES_DIR  # noqa: E402
from peerify_dagster.web.pages import venue_url  # noqa: E402
from peerify_dagster.web.routes.claims import PAGE_SCALE  # noqa: E402
from peerify_dagster.web.security import WEB_DIR  # noqa: E402
from tests.fakes.cli import fresh_home, port_open, start_peerify  # noqa: E402
from tests.web_support import build_sample_lake  # noqa: E402

SERVER_START_S = 120  # a cold start on a busy 2-core machine imports polars, DuckDB, pypdfium2 and Starlette
HTMX = {"HX-Request": "true"}
# Variables of the caller that would point the server at another lake or Dagster home than the one benchmarked.
_CALLER_PREFIXES = ("PEERIFY_", "DAGSTER_")


@dataclass(frozen=True)
class PageKind:
    """A kind of page: its name, the paths its cold request and its warm requests ask for, the headers they send."""

    name: str
    cold: str
    warm: list[str]
    headers: dict[str, str]


@dataclass(frozen=True)
class Timing:
    kind: PageKind
    start_s: float
    cold_ms: float
    warm_ms: list[float]
    kib: float  # median size of the answers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(lake_root: Path, env: dict[str, str]) -> Iterator[tuple[int, float]]:
    """`peerify serve` over `lake_root` on a free loopback port until the block ends: (port, seconds it took to
    accept connections)."""
    port = _free_port()
    started = time.perf_counter()
    process = start_peerify("serve", "--lake", str(lake_root), "--port", str(port), env=env)
    try:
        while not port_open(port):
            if process.poll() is not None:
                raise SystemExit(f"peerify serve exited with {process.returncode}: {process.stderr.read()[-2000:]}")
            if time.perf_counter() - started > SERVER_START_S:
                raise SystemExit(f"peerify serve did not listen on port {port} within {SERVER_START_S} s")
            time.sleep(0.05)
        yield port, time.perf_counter() - started
    finally:
        process.terminate()
        process.communicate(timeout=30)


def timed_get(connection: http.client.HTTPConnection, path: str, headers: dict[str, str]) -> tuple[float, int]:
    """Milliseconds from sending the GET to having read the whole answer, and the answer's size; any answer but 200
    stops the benchmark (a page that fails is not fast)."""
    started = time.perf_counter()
    connection.request("GET", path, headers=headers)
    answer = connection.getresponse()
    body = answer.read()
    elapsed = 1000 * (time.perf_counter() - started)
    if answer.status != 200:
        raise SystemExit(f"GET {path} answered {answer.status}: {body[-500:].decode(errors='replace')}")
    return elapsed, len(body)


def measure(kind: PageKind, lake_root: Path, env: dict[str, str]) -> Timing:
    with serving(lake_root, env) as (port, start_s):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            answers = [timed_get(connection, path, kind.headers) for path in [kind.cold, *kind.warm]]
        finally:
            connection.close()
    return Timing(kind, start_s, answers[0][0], [ms for ms, _ in answers[1:]],
                  statistics.median(size for _, size in answers) / 1024)


def page_kinds(lake_root: Path, venue: str, requests: int) -> tuple[list[PageKind], str]:
    """The page kinds to measure on the venue, and a note on the manuscript pages already rendered."""
    lake = Lake(lake_root)
    if venue not in lake.partition_keys("retrieval_queries"):
        raise SystemExit(f"venue {venue!r} has no claims in {lake_root}: build it through retrieval first")
    claims = lake.read_table("retrieval_queries", venue)["claim_id"].to_list()
    browser, fragment = venue_url(venue, "claims"), venue_url(venue, "claims") + "?disagreement=prediction"
    kinds = [
        PageKind("venue overview", venue_url(venue), [venue_url(venue)] * requests, {}),
        PageKind("claim browser", browser, [browser] * requests, {}),
        PageKind("claim browser, a filter's htmx fragment", fragment, [fragment] * requests, HTMX),
        PageKind(f"claim page, every claim ({len(claims)})", venue_url(venue, "claims", claims[0]),
                 [venue_url(venue, "claims", claim) for claim in claims] * math.ceil(requests / len(claims)), {}),
    ]
    pdfs = lake.read_table("manuscript_pdfs", venue).filter(pl.col("status") == "ok")
    pages = [(sha256, page) for sha256, count in pdfs.select("sha256", "pages").iter_rows()
             for page in range(1, count + 1)]
    # The app keeps a page rendered at `scale` as <lake>/web/page_images/<sha256>/<page>@<scale>.png.
    cache = lake_root / WEB_DIR / PAGE_IMAGES_DIR
    unrendered = [_page_url(*page) for page in pages if not (cache / page[0] / f"{page[1]}@{PAGE_SCALE}.png").exists()]
    if unrendered:
        kinds.append(PageKind(f"page PNG at scale {PAGE_SCALE}, first render ({len(unrendered)} pages)",
                              unrendered[0], unrendered[1:], {}))
    if pages:
        urls = [_page_url(*page) for page in pages]
        cached = (urls * math.ceil(requests / len(urls)))[:max(requests, len(urls))]
        kinds.append(PageKind(f"page PNG at scale {PAGE_SCALE}, cached ({len(urls)} pages)", urls[0], cached, {}))
    note = f"{len(pages) - len(unrendered)} of the {len(pages)} manuscript pages were in the page cache before the run"
    return kinds, note


def _page_url(sha256: str, page: int) -> str:
    return f"/pdf/{sha256}/page/{page}.png?scale={PAGE_SCALE}"


def table(timings: list[Timing]) -> str:
    lines = ["| page | server start (s) | cold first request (ms) | warm requests | warm median (ms) | warm p95 (ms) "
             "| warm max (ms) | warm pages/s | answer (KiB) |", "|---|---|---|---|---|---|---|---|---|"]
    for timing in timings:
        warm = timing.warm_ms
        if warm:
            p95 = statistics.quantiles(warm, n=20, method="inclusive")[18] if len(warm) > 1 else warm[0]
            figures = (f"{statistics.median(warm):.1f} | {p95:.1f} | {max(warm):.1f} "
                       f"| {1000 / statistics.mean(warm):.1f}")
        else:
            figures = "- | - | - | -"
        lines.append(f"| {timing.kind.name} | {timing.start_s:.1f} | {timing.cold_ms:.0f} | {len(warm)} | {figures} "
                     f"| {timing.kib:.0f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", help="a built lake to serve (default: build the sample venue into a temporary one)")
    parser.add_argument("--venue", default="sample")
    parser.add_argument("--requests", type=int, default=30,
                        help="warm requests per page kind (at least every claim, and every page for the cached PNG)")
    args = parser.parse_args()
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench_web_") as folder:
        env = {name: value for name, value in os.environ.items() if not name.startswith(_CALLER_PREFIXES)}
        if args.lake:
            lake_root = Path(args.lake).resolve()
        else:
            print("building the sample venue (peerify build sample, from its LLM recording) ...", file=sys.stderr)
            started = time.perf_counter()
            lake_root = build_sample_lake(Path(folder) / "sample")
            print(f"built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        env["DAGSTER_HOME"] = str(fresh_home(Path(folder) / "serve_home"))  # never the caller's instance
        kinds, note = page_kinds(lake_root, args.venue, args.requests)
        timings = []
        for kind in kinds:
            print(f"measuring: {kind.name} ...", file=sys.stderr)
            timings.append(measure(kind, lake_root, env))
    print(table(timings))
    print(f"\n{note}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
