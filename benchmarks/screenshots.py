"""Screenshots of the web app's main pages over a built lake, taken in the real browser (Debian's chromium driven
by Playwright), for the docs (docs/verify.md, docs/annotator.md): the maintainer's views (a venue's overview, the claim
browser, a claim page with its
evidence outlined on the manuscript page, the citance browser and one citance's split view (the citing page, the
claim card, the cited paper's page with the evidence outlined), and the verify page: its form filled in, the finished
job and its one-page
result) and an annotator's (an arbitration item and the agreement page, signed in as an annotator, who works blind).
Every screenshot in the docs comes from here; it takes screenshots only (page render times: bench_web.py).

The verification is the claim page's review against its paper's PDF, submitted through the form and run by the
server's worker as any verify job is: the venue was built from them, so every call is answered from the ledger
(the job's usage line, printed, says `0 made live`); it adds an upload venue to the lake. The arbitration item is
leased to the annotator while it is on screen and left at once (`q`, the lease released), so nothing is decided; the
lake keeps the venue's item id secret, made on first use as by any arbitration.

    make demo && .venv/bin/python benchmarks/screenshots.py            # the repository's lake -> docs/screenshots/
    .venv/bin/python benchmarks/screenshots.py --lake PATH --venue sample --out docs/screenshots
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]

import polars as pl  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from peerify_dagster import paths  # noqa: E402
from peerify_dagster.domain.claim_view import claim_call_ids, claim_detail, page_view  # noqa: E402
from peerify_dagster.domain.predictions import SOURCE_REVIEW  # noqa: E402
from peerify_dagster.resources.lake import Lake  # noqa: E402
from peerify_dagster.web.data import LakeData  # noqa: E402
from peerify_dagster.web.pages import venue_url  # noqa: E402
from tests.web_support import CHROMIUM_MISSING, live_server, sign_in_page  # noqa: E402

VIEWPORT = {"width": 1400, "height": 1000}
ANNOTATOR = "Ann"
VERIFY_TIMEOUT_MS = 900_000  # a verification on 2 busy cores, its calls answered from the ledger
FINISHED = '[data-testid="job-status"][data-status="done"], [data-testid="job-status"][data-status="failed"]'


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


def showcase_citance(lake: Path, venue: str) -> str:
    """A citance the verifier judged (its cited paper found), for the split view."""
    verdicts = Lake(lake).read_table("citation_verdicts", venue).filter(pl.col("status") == "ok")
    return verdicts.sort("citance_id")["citance_id"][0]


def verification_input(data: LakeData, venue: str, claim_id: str) -> tuple[str, bytes, str]:
    """(file name, bytes) of the PDF of the claim's paper and the text of the review the claim comes from."""
    claim = data.table("review_claims", venue).filter(pl.col("claim_id") == claim_id).row(0, named=True)
    pdf = data.table("manuscript_pdfs", venue).filter(
        (pl.col("paper_id") == claim["paper_id"]) & pl.col("sha256").is_not_null()).row(0, named=True)
    review = data.table("reviews", venue).filter(pl.col("review_id") == claim["review_id"])["review_text"][0]
    return f"{claim['paper_id']}.pdf", data.pdf_path(pdf["sha256"]).read_bytes(), review


def save(page, path: Path, whole: bool = False) -> None:  # noqa: ANN001 - a Playwright Page
    """Save what the browser shows (`whole`: in a window as tall as the page, so that a bar kept at the window's
    bottom sits below the content instead of over it)."""
    if whole:
        page.set_viewport_size({**VIEWPORT, "height": page.evaluate("document.documentElement.scrollHeight")})
    page.screenshot(path=str(path))
    page.set_viewport_size(VIEWPORT)
    print(f"{path}: {urlsplit(page.url).path}")


def shoot(page, url: str, path: Path, whole: bool = False) -> None:  # noqa: ANN001 - a Playwright Page
    """Open `url`, following where it leads, and save what the browser shows."""
    page.goto(url)
    page.wait_for_load_state("networkidle")
    save(page, path, whole)


def verify(page, base_url: str, pdf_name: str, pdf: bytes, review: str, out: Path) -> bool:  # noqa: ANN001 - a Page
    """The verify form filled in, the job it queues once finished, and its one-page result; False when the job
    failed (its error printed)."""
    page.goto(base_url + "/verify")
    page.set_input_files('input[name="pdf"]', files=[{"name": pdf_name, "mimeType": "application/pdf", "buffer": pdf}])
    review_field = page.locator('textarea[name="review_text"]')
    review_field.fill(review)
    review_field.evaluate("field => { field.scrollTop = 0; field.blur(); }")  # the review from its first line
    save(page, out / "verify_form.png")
    with page.expect_navigation():
        page.click('form[data-testid="verify-form"] button[type="submit"]')
    status = page.wait_for_selector(FINISHED, timeout=VERIFY_TIMEOUT_MS)
    if status.get_attribute("data-status") != "done":
        print(f"the verify job failed: {page.locator('[data-testid=job-error]').inner_text()}", file=sys.stderr)
        return False
    print(f"verify job {urlsplit(page.url).path}: {page.locator('[data-testid=job-status] .hint').inner_text()}")
    save(page, out / "verify.png")
    shoot(page, base_url + page.locator('[data-testid="result-link"]').get_attribute("href"),
          out / "verify_result.png")
    return True


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
    pdf_name, pdf, review = verification_input(data, args.venue, claim_id)
    pages = {
        "venue_overview.png": venue_url(args.venue),
        "claim_browser.png": venue_url(args.venue, "claims") + "?disagreement=prediction",
        "claim_page.png": venue_url(args.venue, "claims", claim_id),
        "citances.png": venue_url(args.venue, "citances"),
        "citation_split_view.png": venue_url(args.venue, "citances", showcase_citance(Path(args.lake), args.venue)),
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
        if not verify(page, server.url, pdf_name, pdf, review, out):
            return 1
        annotator = browser.new_page(viewport=VIEWPORT)  # a browser context of its own: the annotator's session
        sign_in_page(annotator, server, ANNOTATOR)
        for name, path in annotator_pages.items():
            shoot(annotator, server.url + path, out / name, whole=name == "arbitration_item.png")  # the raw answers too
            if annotator.locator("[data-key=q]").count():  # an item on screen: leave it, giving its lease up
                with annotator.expect_navigation():
                    annotator.keyboard.press("q")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
