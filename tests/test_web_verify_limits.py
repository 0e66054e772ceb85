"""The verify form's limits and faults over the sample venue built once per session (tests/web_support.py): the limits
stated once (PEERIFY_MAX_PDF_MB; the configured extractor's window) and shown on the form; every bad input refused at
submit, naming it, with what was typed kept and nothing queued; a PDF over the limit in a real browser (Debian's
chromium), with and without the page's script, never losing the pasted review; each job's result page naming its own
upload; the access log; and the claim page at 1280x720, its tables beside the manuscript pane, never under it."""

from __future__ import annotations

import html
import io
import re
import socket
import time
from pathlib import Path

import requests
from pypdf import PdfWriter

from peerify_dagster.cli.verification import write_result
from peerify_dagster.domain import uploads
from peerify_dagster.resources.lake import Lake
from peerify_dagster.verification_jobs import DONE, JobStore
from tests.cli_support import cli_env, peerify, start_peerify
from tests.fakes.cli import stop_process
from tests.web_support import csrf_from, live_server, sign_in_client

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PDF = (REPO / "peerify_dagster" / "sample_venue" / "snapshot" / "pdfs" / "Rk7bWq2NzA.pdf").read_bytes()
REVIEW = "Weaknesses: The paper does not report the variance of its results across runs."
EMPTY = "the review is empty (no letter or digit)"
SMALL_LIMIT = 5 * 2**10  # 5 KB: the sample's PDF (10 KB) is over it
REVIEW_LIMIT = "7,483 tokens (about 22,449 characters) per review section for extractor smollm2-135m-extractor"
_ERROR = re.compile(r'data-testid="verify-error"\s*>(.*?)</p>', re.DOTALL)
_TEXTAREA = re.compile(r'<textarea name="review_text"[^>]*>(.*?)</textarea>', re.DOTALL)


def refusal(page: str) -> str:
    match = _ERROR.search(page)
    assert match, page[-2000:]
    return html.unescape(match.group(1))


def kept_review(page: str) -> str:
    return html.unescape(_TEXTAREA.search(page).group(1))


def post_form(client, fields: dict, files: dict | None = None):  # noqa: ANN001, ANN201 - a web_support Client
    """The verify form sent as a browser sends it (multipart); `files` values are (file name or None, bytes)."""
    form = {"csrf_token": csrf_from(client.get("/verify").text), "mode": "upload", "configuration": "hybrid-top3",
            **fields}
    return client.post("/verify", data=form, files=files or {"pdf": ("paper.pdf", SAMPLE_PDF, "application/pdf")})


def test_the_form_states_the_limits_and_refuses_each_bad_input_naming_it_before_anything_is_queued(
        web_lake, monkeypatch):
    monkeypatch.setenv("PEERIFY_MAX_PDF_MB", "0.5")  # read once, when the app is made
    long_review = "The results are weak. " * 10_000  # 220,000 characters: the extractor's call would fail
    refusals = [
        ({"review_text": long_review}, None, "the pasted review: section 'review' is about 73,336 tokens (219,999 "
         f"characters), over the limit of {REVIEW_LIMIT}; shorten it, or split it into OpenReview's labelled "
         "sections (Summary:, Weaknesses:, ...), each read on its own"),
        # over 1 MB: more than a form field Starlette reads by default
        ({"review_text": long_review * 6}, None, "the pasted review: section 'review' is about 440,003 tokens"),
        ({"review_text": "\x00" * 50}, None, f"the pasted review: {EMPTY}"),
        ({"review_text": " \x01\x1b[\x7f\t\n ... "}, None, f"the pasted review: {EMPTY}"),
        ({}, {"review_text": (None, "Caf\u00e9 au lait: the baseline is missing.".encode("latin-1"))},
         "the pasted review: not UTF-8 text (byte 3)"),
        ({"review_text": REVIEW}, {"response_text": (None, b"We ran it \xff\xfe twice.")},
         "the pasted response: not UTF-8 text (byte 10)"),
        ({}, {"review_file": ("long.txt", long_review.encode(), "text/plain")},
         "long.txt: section 'review' is about 73,336 tokens"),
        ({"mode": "forum", "forum": "Nope.cc/2026|Rk7bWq2NzA"}, None,
         "venue 'Nope.cc/2026': not a venue built in this lake with manuscripts (built: sample)"),
        ({"mode": "forum", "forum": "sample|NoSuchForm1"}, None,
         "forum 'NoSuchForm1': not a paper with a usable PDF in venue 'sample'"),
    ]
    with live_server(web_lake) as server:
        client = server.client()
        form = client.get("/verify").text
        assert "a PDF of at most 512 KB" in form and REVIEW_LIMIT in form  # shown where the input is given
        for fields, files, message in refusals:
            pdf = {"pdf": ("paper.pdf", SAMPLE_PDF, "application/pdf")}
            answer = post_form(client, fields, {**pdf, **(files or {})})
            assert (answer.status_code, refusal(answer.text)[:len(message)]) == (400, message), fields.keys()
            if "review_text" in fields:
                assert kept_review(answer.text) == fields["review_text"]
    assert JobStore(web_lake).jobs() == []  # nothing was queued, nothing runs


def test_a_pdf_over_the_upload_limit_is_refused_413_with_the_form_and_the_review_kept(web_lake):
    with live_server(web_lake, max_pdf_bytes=SMALL_LIMIT) as server:
        answer = post_form(server.client(), {"review_text": REVIEW},
                           {"pdf": ("big.pdf", SAMPLE_PDF, "application/pdf")})
    assert answer.status_code == 413
    assert refusal(answer.text) == "big.pdf: 10 KB is over the upload limit of 5 KB (PEERIFY_MAX_PDF_MB)"
    assert kept_review(answer.text) == REVIEW
    assert JobStore(web_lake).jobs() == []


def test_in_a_browser_a_pdf_over_the_limit_never_loses_the_pasted_review(browser, web_lake):
    refused = "big.pdf: 10 KB is over the upload limit of 5 KB (PEERIFY_MAX_PDF_MB)"
    log = io.StringIO()
    with live_server(web_lake, max_pdf_bytes=SMALL_LIMIT, access_log=log) as server:
        for script in (True, False):
            context = browser.new_context(java_script_enabled=script)
            page = context.new_page()
            try:
                page.goto(server.url + "/verify")
                page.set_input_files('input[name="pdf"]', files=[
                    {"name": "big.pdf", "mimeType": "application/pdf", "buffer": SAMPLE_PDF}])
                page.fill('textarea[name="review_text"]', REVIEW)
                page.click('form[data-testid="verify-form"] button[type="submit"]')
                page.wait_for_load_state()
                # with its script the page refuses before sending; without, the server gives the form back (413)
                assert page.locator('[data-testid="verify-error"]').inner_text() == refused, script
                assert page.locator('textarea[name="review_text"]').input_value() == REVIEW
                assert ("POST /verify 413" in log.getvalue()) is not script
            finally:
                context.close()
        context = browser.new_context(java_script_enabled=False)  # a body past the request limit is not even read
        page = context.new_page()
        try:
            page.goto(server.url + "/verify")
            page.set_input_files('input[name="pdf"]', files=[
                {"name": "huge.pdf", "mimeType": "application/pdf", "buffer": SAMPLE_PDF * 500}])  # 5 MB
            page.fill('textarea[name="review_text"]', REVIEW)
            page.click('form[data-testid="verify-form"] button[type="submit"]')
            page.wait_for_load_state()
            assert "the request is over the upload limit of 5 KB (PEERIFY_MAX_PDF_MB): go back, the form keeps " \
                   "what you typed" in page.locator("main").inner_text()
            page.go_back()
            assert page.locator('textarea[name="review_text"]').input_value() == REVIEW
        finally:
            context.close()
    assert JobStore(web_lake).jobs() == []


def _untitled_pdf() -> bytes:
    """A PDF without a title in its metadata: its title is its file name's."""
    writer, data = PdfWriter(), io.BytesIO()
    writer.add_blank_page(width=612, height=792)
    writer.write(data)
    return data.getvalue()


def test_each_jobs_result_page_names_its_own_upload_though_the_same_content_is_one_venue(web_lake):
    pdf, review = _untitled_pdf(), uploads.UploadedText(fields={"review": REVIEW})
    store = JobStore(web_lake)
    requests_ = [uploads.VerificationRequest(upload=uploads.Upload(pdf=pdf, pdf_name=name, reviews=(review,)))
                 for name in ("first-upload.pdf", "second-upload.pdf")]
    key = requests_[0].upload.key()
    assert requests_[1].upload.key() == key  # one venue
    jobs = [store.submit(request) for request in requests_]
    for job in jobs:  # done before the server (and its worker) starts
        store.update(job["id"], status=DONE, venue=key)
    # The venue's result, last written by the second upload's verification.
    write_result(uploads.ResultSummary(venue=key, title="second-upload", origin=requests_[1].describe(), pages=1,
                                       configurations=("hybrid-top3",), claims=()),
                 Path(web_lake) / "uploads" / key)
    with live_server(web_lake) as server:
        client = server.client()
        first, second = (client.get(f"/verify/jobs/{job['id']}/result") for job in jobs)
    assert first.status_code == second.status_code == 200
    assert "first-upload.pdf with 1 review" in first.text and "second-upload" not in first.text
    assert "<h1>first-upload</h1>" in first.text
    assert "second-upload.pdf with 1 review" in second.text and "first-upload" not in second.text


def test_the_access_log_has_one_line_per_request_and_no_secret(web_lake):
    token = "an-access-token-of-this-server"
    log = io.StringIO()
    with live_server(web_lake, token=token, access_log=log) as server:
        client = server.client()
        assert client.get(f"/verify?token={token}&tab=jobs").status_code == 303  # signed in, sent on without it
        assert client.get("/verify?tab=jobs").status_code == 200
        sign_in_client(client, "Private Annotator Name")
        assert client.get("/no/such%0Apage").status_code == 404  # a newline in a path cannot fake a line
        cookie = client.cookies.get("peerify_session")
    lines = log.getvalue().splitlines()
    entry = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (GET|POST) (\S+) (\d{3}) (\d+)ms$")
    assert all(entry.match(line) for line in lines), lines
    assert [entry.match(line).group(1, 2, 3) for line in lines] == [
        ("GET", "/verify?tab=jobs", "303"), ("GET", "/verify?tab=jobs", "200"), ("GET", "/signin", "200"),
        ("POST", "/signin", "303"), ("GET", "/no/such%0Apage", "404")]
    for secret in (token, cookie, "Private"):  # the token, the session cookie, a form body
        assert secret not in log.getvalue()


def test_peerify_serve_writes_its_access_log_to_stderr_and_refuses_a_limit_that_is_no_number(web_lake, tmp_path):
    env = cli_env(web_lake, REPO / "venues.yaml", None)
    refused = peerify("serve", "--lake", str(web_lake), env={**env, "PEERIFY_MAX_PDF_MB": "fifty"}, timeout=120)
    assert (refused.returncode, refused.stderr.strip()) == (2, "PEERIFY_MAX_PDF_MB='fifty': a number of megabytes")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = start_peerify("serve", "--lake", str(web_lake), "--port", str(port), env=env, logs=tmp_path / "serve")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert requests.get(f"http://127.0.0.1:{port}/verify?tab=jobs", timeout=10).status_code == 200
                break
            except requests.ConnectionError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.err").read_text()
                time.sleep(0.2)
    finally:
        stop_process(server)
    assert re.search(r"Z GET /verify\?tab=jobs 200 \d+ms\n", (tmp_path / "serve.err").read_text())


def test_the_claim_page_at_1280x720_keeps_its_tables_beside_the_manuscript_pane(browser, web_lake, tmp_path):
    slices = Lake(web_lake).read_table("benchmark_slices", "sample")
    # the claims in the most slices: the longest gold tables (and every table of the main column is measured)
    claims = slices.group_by("claim_id").len().sort(["len", "claim_id"], descending=True)["claim_id"][:5]
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    try:
        with live_server(web_lake) as server:
            for claim in claims:
                page.goto(f"{server.url}/venues/sample/claims/{claim}")
                page.wait_for_load_state("networkidle")
                boxes = page.evaluate("""() => {
                    const box = (element) => { const r = element.getBoundingClientRect();
                                               return {left: r.left, right: r.right}; };
                    const main = [...document.querySelectorAll(
                        '.columns > div:first-child :is(table, pre, .card, .review-text)')].map(box);
                    return {main, gold: box(document.querySelector('[data-testid=gold]')),
                            pane: box(document.querySelector('#manuscript'))};
                }""")
                assert boxes["gold"]["right"] <= boxes["pane"]["left"], (claim, boxes["gold"], boxes["pane"])
                assert max(b["right"] for b in boxes["main"]) <= boxes["pane"]["left"], claim
            page.goto(f"{server.url}/venues/sample/claims/{claims[0]}")
            page.locator('[data-testid="gold"]').scroll_into_view_if_needed()
            page.screenshot(path=str(tmp_path / "claim-1280x720.png"))
    finally:
        context.close()
    print(f"\nclaim page at 1280x720: {tmp_path / 'claim-1280x720.png'}")
