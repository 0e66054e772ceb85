"""Screenshots of the web app's main pages over a built lake, taken in the real browser (Debian's chromium driven
by Playwright), for the README: the maintainer's views (a venue's overview, the claim browser and a claim page with
its evidence outlined on the manuscript page) and an annotator's (an arbitration item and the agreement page, signed
in as an annotator, who works blind). Every screenshot in the README comes from here. Also prints how long the claim
page takes to render, warm.

The arbitration item is leased to the annotator while it is on screen and left at once (`q`, the lease released), so
nothing is decided; the lake keeps the venue's item id secret, made on first use as by any arbitration.

    make demo && .venv/bin/python benchmarks/screenshots.py            # the repository's lake -> docs/screenshots/
    .venv/bin/python benchmarks/screenshots.py --lake PATH --venue sample --out docs/screenshots
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playwright.sync_api import sync_playwright  # noqa: E402

from peerify_dagster import paths  # noqa: E402
from peerify_dagster.domain.claim_view import claim_call_ids, claim_detail, page_view  # noqa: E402
from peerify_dagster.domain.predictions import SOURCE_REVIEW  # noqa: E402
from peerify_dagster.web.data import LakeData  # noqa: E402
from peerify_dagster.web.pages import venue_url  # noqa: E402
from tests.web_support import CHROMIUM_MISSING, live_server, sign_in_page  # noqa: E402

VIEWPORT = {"width": 1400, "height": 1000}
ANNOTATOR = "Ann"


def showcase_claim(data: LakeData, venue: str) -> str:
    """The review claim that shows most: its span found in the review, predicted, and its passage outlined on the
    page (when the lake records positions); failing that, the first claim."""
    tables = data.claim_tables(venue)
    index = data.claim_index(venue)
    first = None
    for claim_id in index.claims.filter(index.claims["kind"] == SOURCE_REVIEW)["claim_id"]:
        detail = claim_detail(tables, claim_id, data.ledger_answers(claim_call_ids(tables, claim_id)) or {})
        pane = page_view(detail, detail.default_chunk_id)
        first = first or claim_id
        if detail.source_text and detail.source_text.how == "exact" and detail.configurations and pane \
                and (pane["boxes"] or not detail.has_positions):
            return claim_id
    return first or index.claims["claim_id"][0]


def shoot(page, url: str, path: Path, whole: bool = False) -> None:  # noqa: ANN001 - a Playwright Page
    """Open `url`, following where it leads, and save what the browser shows (`whole`: in a window as tall as the
    page, so that a bar kept at the window's bottom sits below the content instead of over it)."""
    page.goto(url)
    page.wait_for_load_state("networkidle")
    if whole:
        page.set_viewport_size({**VIEWPORT, "height": page.evaluate("document.documentElement.scrollHeight")})
    page.screenshot(path=str(path))
    page.set_viewport_size(VIEWPORT)
    print(f"{path}: {urlsplit(page.url).path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", default=paths.lake_root())
    parser.add_argument("--venue", default="sample")
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print(CHROMIUM_MISSING, file=sys.stderr)
        return 2
    data = LakeData(args.lake)
    if not data.has_venue(args.venue):
        print(f"venue {args.venue!r} is not built in {args.lake}: run `make demo` first", file=sys.stderr)
        return 2
    claim_id = showcase_claim(data, args.venue)
    pages = {
        "venue_overview.png": venue_url(args.venue),
        "claim_browser.png": venue_url(args.venue, "claims") + "?disagreement=prediction",
        "claim_page.png": venue_url(args.venue, "claims", claim_id),
    }
    annotator_pages = {  # each path is followed to where it leads: the next open item of the arbitration queue
        "arbitration_item.png": venue_url(args.venue, "arbitration", "arbitration"),
        "agreement.png": venue_url(args.venue, "agreement"),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with live_server(Path(args.lake)) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        for name, path in pages.items():
            shoot(page, server.url + path, out / name)
        annotator = browser.new_page(viewport=VIEWPORT)  # a browser context of its own: the annotator's session
        sign_in_page(annotator, server, ANNOTATOR)
        for name, path in annotator_pages.items():
            shoot(annotator, server.url + path, out / name, whole=name == "arbitration_item.png")  # the raw answers too
            if annotator.locator("[data-key=q]").count():  # an item on screen: leave it, giving its lease up
                with annotator.expect_navigation():
                    annotator.keyboard.press("q")
        client = server.client()
        claim_path = pages["claim_page.png"]
        client.get(claim_path)  # warm: the tables are read once, then cached per file version
        times = []
        for _ in range(20):
            started = time.perf_counter()
            assert client.get(claim_path).status_code == 200
            times.append(time.perf_counter() - started)
        print(f"claim page {claim_path}: median {1000 * statistics.median(times):.0f} ms, "
              f"max {1000 * max(times):.0f} ms over {len(times)} warm requests")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
