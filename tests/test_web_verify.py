"""The verify page in a real browser (Debian's chromium driven by Playwright) over the sample venue built once per
session: inputs refused before anything runs (not a PDF, an empty review; the limits and the other refusals are
in test_web_verify_limits.py), and the
sample's PDF with one of its reviews verified by the server's worker, through a reload of the job page and a restart
of the server mid-run (the job is put back in the queue and finishes on the next server, its calls answered by the
ledger), ending with verdicts in the claim browser; the job store's recovery of jobs a dead server left running."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import polars as pl
import pytest

from peerify_dagster.domain.uploads import VerificationRequest
from peerify_dagster.resources.lake import Lake
from peerify_dagster.verification_jobs import DONE, QUEUED, RUNNING, JobStore, phase_steps
from tests.cli_support import dead_pid
from tests.web_support import copy_lake, live_server

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PDF = (REPO / "peerify_dagster" / "sample_venue" / "snapshot" / "pdfs" / "Rk7bWq2NzA.pdf").read_bytes()
SAMPLE_REVIEW_ID = "NL9PqtHGLz"
JOB_TIMEOUT_MS = 600_000  # a verification on 2 busy cores


def pdf_file(name: str, data: bytes, mime: str = "application/pdf") -> dict:
    return {"name": name, "mimeType": mime, "buffer": data}


def submit(page, server, pdf: dict | None, review: str = "") -> None:  # noqa: ANN001 - a Playwright Page
    page.goto(server.url + "/verify")
    if pdf is not None:
        page.set_input_files('input[name="pdf"]', files=[pdf])
    page.fill('textarea[name="review_text"]', review)
    page.click('form[data-testid="verify-form"] button[type="submit"]')
    page.wait_for_load_state()


def jobs_of(lake_root: Path) -> list[dict]:
    return JobStore(lake_root).jobs()


@pytest.fixture(scope="module")
def review_text(web_lake) -> str:
    """One of the sample's reviews, as `reviews.review_text` assembles it (what a reviewer would paste)."""
    reviews = Lake(web_lake).read_table("reviews", "sample")
    return reviews.filter(pl.col("review_id") == SAMPLE_REVIEW_ID)["review_text"][0]


def test_a_non_pdf_and_an_empty_review_are_refused_saying_why(web_server, browser_page, review_text):
    page = browser_page
    submit(page, web_server, pdf_file("paper.pdf", b"Dear editor, this is not a PDF.\n"), review_text)
    assert page.locator('[data-testid="verify-error"]').inner_text().startswith("paper.pdf: bytes are not a PDF")
    assert page.locator('textarea[name="review_text"]').input_value() == review_text  # what was typed is kept
    submit(page, web_server, pdf_file("paper.pdf", SAMPLE_PDF), "   \n")
    assert page.locator('[data-testid="verify-error"]').inner_text() == \
        "the pasted review: the review is empty (no letter or digit)"
    assert jobs_of(web_server.lake_root) == []  # nothing was queued, nothing runs


def test_the_sample_pdf_and_one_of_its_reviews_end_with_verdicts_through_a_reload_and_a_restart(
        browser, sample_lake, review_text, tmp_path):
    web_lake = copy_lake(sample_lake, tmp_path / "lake")  # its own: no other server's worker takes the job
    context = browser.new_context()
    page = context.new_page()
    try:
        with live_server(web_lake) as first:
            submit(page, first, pdf_file("Rk7bWq2NzA.pdf", SAMPLE_PDF), review_text)
            assert re.search(r"/verify/jobs/[0-9a-f]{16}$", page.url), page.url
            job_path = page.url.removeprefix(first.url)
            page.wait_for_selector('li.phase[data-state="current"]', timeout=JOB_TIMEOUT_MS)
            page.reload()  # the job is in the lake, not in the page
            assert page.locator('[data-testid="job-status"]').get_attribute("data-status") in (QUEUED, RUNNING, DONE)
            page.wait_for_function(  # past the manuscript, before the verdicts: the server stops mid-run
                "() => [...document.querySelectorAll('li.phase')].some(li => li.textContent.includes('extracting')"
                " && li.dataset.state !== 'pending')", timeout=JOB_TIMEOUT_MS)
        deadline = time.monotonic() + 120
        while JobStore(web_lake).running() and time.monotonic() < deadline:  # the child ends its run in progress
            time.sleep(0.5)
        [job] = jobs_of(web_lake)
        restarted = job["status"] == QUEUED  # the worker stopped its child: back in the queue
        assert restarted or job["status"] == DONE, job
        with live_server(web_lake) as second:  # the next server's worker picks the job up again
            page.goto(second.url + job_path)
            page.wait_for_selector('[data-testid="job-status"][data-status="done"]', timeout=JOB_TIMEOUT_MS)
            assert [state for _, state in phase_steps(jobs_of(web_lake)[0])] == ["done"] * 6
            usage = page.locator('[data-testid="job-status"] .hint').inner_text()
            assert "0 made live" in usage, usage  # every call answered by the sample's recorded calls
            result = page.request.get(second.url + page.locator('[data-testid="result-link"]').get_attribute("href"))
            assert result.ok and "page " in result.text()
            page.click('[data-testid="claims-link"]')
            page.wait_for_load_state()
            venue = jobs_of(web_lake)[0]["venue"]
            assert page.url.endswith(f"/venues/{venue}/claims")
            predictions = Lake(web_lake).read_table("predictions", f"hybrid-top3|{venue}")
            assert predictions.height > 0 and predictions["label"].null_count() < predictions.height
            claims = Lake(web_lake).read_table("review_claims", venue)
            assert claims["claim_text"][0][:40] in page.locator("main").inner_text()
            claim_page = page.request.get(f"{second.url}/venues/{venue}/claims/{claims['claim_id'][0]}")
            assert claim_page.ok and "hybrid-top3" in claim_page.text()  # its claim page, with the verdict
        print(f"\nverify job restarted mid-run: {restarted}")
    finally:
        context.close()


def test_jobs_a_dead_server_left_running_are_queued_again_and_others_are_left_alone(tmp_path):
    store = JobStore(tmp_path)
    request = VerificationRequest(venue="sample", forum="Rk7bWq2NzA")
    abandoned, finished, queued = store.submit(request), store.submit(request), store.submit(request)
    store.update(abandoned["id"], status=RUNNING, worker={"pid": dead_pid(), "start": None})
    store.update(finished["id"], status=DONE)
    assert store.requeue_abandoned() == [abandoned["id"]]
    assert {job["id"]: job["status"] for job in store.jobs()} == {
        abandoned["id"]: QUEUED, finished["id"]: DONE, queued["id"]: QUEUED}
    assert store.next_queued()["id"] == abandoned["id"]  # the oldest first
    on_disk = json.loads(store.path(abandoned["id"]).read_text())
    assert on_disk["request"]["forum"] == "Rk7bWq2NzA" and on_disk["worker"] is None
    with pytest.raises(KeyError):
        store.path("../../venues")  # a job id never names another file
    assert store.get("../../venues") is None
