"""The web app's venue, claim browser and claim pages in a real browser (Debian's chromium driven by Playwright)
over the sample venue built once per test session, and its access rules over real HTTP: files only by content hash,
CSRF and Origin checks, the access token, sessions that survive a restart, and `peerify serve` refusing to expose
the lake without a token."""

from __future__ import annotations

import hashlib
import html
import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
import requests
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from peerify_dagster.cli.common import ConfigError
from peerify_dagster.cli.serve import MIN_TOKEN_LENGTH, access_token, address
from peerify_dagster.domain.regions import page_sizes_of
from peerify_dagster.domain.slices import SLICES
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway.ledger import LEDGER_SCHEMA, CallLedger
from peerify_dagster.web.data import LakeData
from peerify_dagster.web.security import (
    CSRF_MESSAGE,
    NO_TOKEN_MESSAGE,
    SECRET_FILE,
    WEB_DIR,
    annotator_pass,
    is_loopback,
    limited_body,
    safe_next,
    session_secret,
)
from tests.web_support import (
    SAMPLE_CONFIGURATIONS,
    Client,
    csrf_from,
    live_server,
    serve_app,
    sign_in_client,
    sign_in_page,
)

TOKEN = "t" * 24


@pytest.fixture(scope="module")
def lake(web_lake) -> Lake:
    return Lake(web_lake)


@pytest.fixture(scope="module")
def showcase(lake) -> dict:
    """A review claim whose span the extractor found exactly, predicted by hybrid-top3 with passages placed on the
    page: the claim page's richest case, read straight from the lake's tables."""
    claims = lake.read_table("review_claims", "sample").filter(pl.col("span_kind") == "exact")
    predictions = lake.read_table("predictions", "hybrid-top3|sample").filter(pl.col("status") == "ok")
    chunks = lake.read_table("chunks", "sample")
    assert "regions" in chunks.columns, "chunks carry no regions: the parser's positions are missing"
    placed = {row["chunk_id"]: row for row in chunks.iter_rows(named=True) if row["regions"]}
    reviews = dict(lake.read_table("reviews", "sample").select("review_id", "review_text").iter_rows())
    for claim in claims.iter_rows(named=True):
        prediction = predictions.filter(pl.col("claim_id") == claim["claim_id"])
        if prediction.height and all(c in placed for c in prediction["evidence_chunk_ids"][0]):
            evidence = prediction["evidence_chunk_ids"][0].to_list()
            return {"claim": claim, "review_text": reviews[claim["review_id"]], "evidence": evidence,
                    "chunks": placed}
    pytest.fail("the sample has no exact-span claim whose retrieved passages are all placed on the page")


# -- the pages in the browser ---------------------------------------------------------------------------------------
def test_the_venue_overview_shows_slices_metrics_baselines_figures_and_lineage(web_server, browser_page, lake):
    page = browser_page
    page.goto(web_server.url + "/")
    page.click("a:text-is('sample')")
    assert page.url == f"{web_server.url}/venues/sample"
    slice_rows = page.locator("[data-testid=slices] tr")
    assert slice_rows.count() == 1 + len(SLICES)
    sizes = dict(lake.read_table("benchmark_slices", "sample").group_by("slice").len().iter_rows())
    for name, size in sizes.items():
        assert page.locator(f"[data-testid=slices] tr[data-slice={name}] td").nth(1).inner_text() == str(size)
    metrics = page.locator("[data-testid=metrics]").inner_text()
    for configuration in SAMPLE_CONFIGURATIONS:
        assert configuration in metrics
    assert "Majority accuracy" in metrics and "Majority macro-F1" in metrics
    # The sample's SmolLM2 answers Supported to nearly everything: the plain sentence says so beside the numbers.
    warning = page.locator("[data-testid=one-label-warning]").first.inner_text()
    assert "answered Supported to" in warning and "majority baseline" in warning
    figures = page.locator(".figures img")
    assert figures.count() == lake.read_table("venue_report", "sample").height
    for index in range(figures.count()):
        figures.nth(index).scroll_into_view_if_needed()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=figures.nth(index).element_handle())
    lineage = page.locator("a[href='http://127.0.0.1:3000/assets/metrics']")
    assert lineage.count() == 1


def test_the_claim_browser_filters_in_place_and_pages(web_server, browser_page, lake):
    page = browser_page
    page.goto(f"{web_server.url}/venues/sample/claims")
    queries = lake.read_table("retrieval_queries", "sample")
    assert page.locator("[data-testid=claim-count]").inner_text() == f"{queries.height} claims match."
    page.evaluate("window.notReloaded = true")
    slices = lake.read_table("benchmark_slices", "sample")
    judged = slices.filter(pl.col("slice") == "LLMJudged")
    page.select_option("select[name=slice]", "LLMJudged")
    count_is = "document.querySelector('[data-testid=claim-count]').innerText.startsWith('{} ')"
    page.wait_for_function(count_is.format(judged.height))
    assert "slice=LLMJudged" in page.url
    # prediction != gold under hybrid-top3 within LLMJudged, computed here from the tables themselves
    predicted = lake.read_table("predictions", "hybrid-top3|sample").filter(pl.col("status") == "ok") \
        .select("claim_id", "label")  # a claim the verifier was not called for is no wrong answer
    wrong = judged.join(predicted, on="claim_id").filter(
        pl.col("label").is_null() | (pl.col("label") != pl.col("gold_label")))["claim_id"].unique().to_list()
    assert wrong, "the sample's hybrid-top3 gets every LLMJudged claim right: the filter would show nothing"
    page.select_option("select[name=configuration]", "hybrid-top3")
    page.select_option("select[name=disagreement]", "prediction")
    page.wait_for_function(count_is.format(len(wrong)))
    shown = page.locator("[data-testid=claim-table] tr[data-claim-id]")
    assert sorted(shown.nth(i).get_attribute("data-claim-id") for i in range(shown.count())) == sorted(wrong)
    assert page.evaluate("window.notReloaded") is True  # htmx swapped the results; the page itself stayed
    # paging through every claim: page 2 holds the next 50
    page.goto(f"{web_server.url}/venues/sample/claims")
    first_page = page.locator("tr[data-claim-id]").first.get_attribute("data-claim-id")
    page.click("[data-testid=next-page]")
    page.wait_for_function("document.querySelector('[data-testid=pager]').innerText.includes('page 2 of')")
    assert page.locator("tr[data-claim-id]").count() == min(50, queries.height - 50)
    assert page.locator("tr[data-claim-id]").first.get_attribute("data-claim-id") != first_page


def _assert_box_on_passage(page, lake: Lake, showcase: dict, chunk_id: str) -> None:
    """The pane shows the chunk's page, and each drawn box lies inside the page image where the chunk's region is."""
    view = page.locator("[data-testid=page-view]")
    assert view.get_attribute("data-chunk-id") == chunk_id
    regions = showcase["chunks"][chunk_id]["regions"]
    shown_page = int(view.get_attribute("data-page"))
    assert shown_page == min(region["page"] for region in regions)
    image = page.locator("[data-testid=page-image]")
    assert f"/page/{shown_page}.png" in image.get_attribute("src")
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    parsed = lake.read_table("parsed_manuscripts", "sample").filter(
        pl.col("paper_id") == showcase["claim"]["paper_id"]).row(0, named=True)
    width, height = page_sizes_of(parsed)[shown_page]
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert abs(natural[0] / natural[1] - width / height) < 0.01  # the PNG is the page, at its proportions
    on_page = [region for region in regions if region["page"] == shown_page]
    boxes = page.locator("[data-testid=highlight]")
    assert boxes.count() == len(on_page) >= 1
    frame = image.bounding_box()
    for index, region in enumerate(on_page):
        box = boxes.nth(index).bounding_box()
        assert frame["x"] - 1 <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"] + 1
        assert frame["y"] - 1 <= box["y"] and box["y"] + box["height"] <= frame["y"] + frame["height"] + 1
        scale = frame["width"] / width
        assert box["x"] - frame["x"] == pytest.approx(region["x0"] * scale, abs=2)
        assert box["y"] - frame["y"] == pytest.approx(region["y0"] * scale, abs=2)
        assert box["width"] == pytest.approx((region["x1"] - region["x0"]) * scale, abs=2)


def _ledger_answer(lake: Lake, call_id: str) -> str:
    """The parsed answer of a successful call, read straight from the ledger's segments."""
    calls = pl.read_parquet(lake.root / "llm_calls" / "*.parquet", columns=["call_id", "parsed", "error"])
    answers = calls.filter((pl.col("call_id") == call_id) & pl.col("error").is_null())["parsed"]
    assert answers.len() >= 1, f"the ledger has no successful call {call_id}"
    return answers[-1]


def test_the_claim_page_shows_the_claim_its_evidence_and_the_passage_on_its_page(web_server, browser_page, lake,
                                                                                   showcase):
    page = browser_page
    claim = showcase["claim"]
    page.goto(f"{web_server.url}/venues/sample/claims/{claim['claim_id']}")
    assert page.locator("[data-testid=claim-text]").inner_text() == claim["claim_text"]
    span = showcase["review_text"][claim["span_start"]:claim["span_end"]]
    assert page.locator("[data-testid=claim-span]").inner_text() == span
    # what each labeller saw and answered, per evidence source, and the gold label's provenance
    labels = lake.read_table("claim_labels", "sample").filter(pl.col("claim_id") == claim["claim_id"])
    for source in set(labels["source"]):
        card = page.locator(f"[data-testid=labels-{source}]")
        assert card.locator("tr").count() == 1 + labels.filter(pl.col("source") == source).height
        for call_id in labels.filter(pl.col("source") == source)["call_id"].drop_nulls():
            assert card.locator(f"[data-call-id='{call_id}']").count() >= 1
    canonical = lake.read_table("canonical_labels", "sample").filter(pl.col("claim_id") == claim["claim_id"])
    assert sorted(page.locator("[data-testid=provenance]").all_inner_texts()) == sorted(canonical["provenance"])
    gold = lake.read_table("benchmark_slices", "sample").filter(pl.col("claim_id") == claim["claim_id"])
    assert page.locator("[data-testid=gold] tr").count() == 1 + gold.height
    # every configuration's verdict, and the passages it retrieved with their scores
    verdict = page.locator("[data-testid=verdict][data-configuration=hybrid-top3]")
    assert verdict.count() == 1
    # the verifier's justification, from the LLM ledger of this lake, a copy (the catalog's views name the folder the
    # lake was built in, so a copied or moved lake must be read without them)
    prediction = lake.read_table("predictions", "hybrid-top3|sample").filter(pl.col("claim_id") == claim["claim_id"])
    justification = json.loads(_ledger_answer(lake, prediction["call_id"][0]))["justification"]
    assert " ".join(verdict.locator("[data-testid=justification]").inner_text().split()) == \
        " ".join(justification.split())
    assert page.locator("[data-testid=note]").count() == 0
    runs = lake.read_table("retrieval_runs", "sample").filter(
        (pl.col("claim_id") == claim["claim_id"]) & (pl.col("retriever") == "hybrid"))
    scores = dict(runs.select("chunk_id", "score").iter_rows())
    passages = verdict.locator(".passage").all_inner_texts()
    assert len(passages) == len(showcase["evidence"])
    for text, chunk_id in zip(passages, showcase["evidence"]):
        assert chunk_id in text and f"score {scores[chunk_id]:.4f}" in text
    # the manuscript page opens on the first retrieved passage, outlined where the chunk lies
    _assert_box_on_passage(page, lake, showcase, showcase["evidence"][0])
    # another passage, by htmx, without leaving the page
    page.evaluate("window.notReloaded = true")
    other = showcase["evidence"][-1]
    verdict.locator(f"a.passage-link[data-chunk-id='{other}']").click()
    page.wait_for_function(f"document.querySelector('[data-testid=page-view]').dataset.chunkId === '{other}'")
    _assert_box_on_passage(page, lake, showcase, other)
    assert page.evaluate("window.notReloaded") is True


def test_every_claim_of_the_sample_has_a_page(web_server, lake):
    client = web_server.client()
    for claim_id in lake.read_table("retrieval_queries", "sample")["claim_id"]:
        answer = client.get(f"/venues/sample/claims/{claim_id}")
        assert answer.status_code == 200, (claim_id, answer.text[-500:])
    unknown = client.get("/venues/sample/claims/no-such-claim")
    assert unknown.status_code == 404 and "has no claim &#39;no-such-claim&#39;" in unknown.text
    assert "no built data" in client.get("/venues/no-such-venue").text


# -- the LLM call ledger, read without the catalog ------------------------------------------------------------------
def _call(call_id: str, parsed: str | None, at: datetime, error: str | None = None) -> dict:
    return {**dict.fromkeys(LEDGER_SCHEMA.names), "call_id": call_id, "parsed": parsed, "error": error,
            "parse_ok": error is None, "created_at": at}


def test_ledger_answers_are_each_calls_latest_success_read_without_changing_the_ledger(tmp_path):
    start = datetime(2025, 1, 1, tzinfo=UTC)
    ledger = CallLedger(tmp_path, compact_every=1000)
    ledger.append(_call("a", '{"justification": "old"}', start))
    ledger.append(_call("a", None, start + timedelta(hours=2), error="timeout"))  # a failure never hides a success
    ledger.append(_call("b", '{"label": "Supported"}', start))
    data = LakeData(tmp_path)
    assert data.ledger_answers(["a", "b", "never-made"]) == {"a": '{"justification": "old"}',
                                                             "b": '{"label": "Supported"}'}
    ledger.append(_call("a", '{"justification": "new"}', start + timedelta(hours=1)))  # a `refresh` run's answer
    assert data.ledger_answers(["a"]) == {"a": '{"justification": "new"}'}
    assert ledger.compact()  # the per-call segments merged into one and removed
    assert data.ledger_answers(["a", "b"]) == {"a": '{"justification": "new"}', "b": '{"label": "Supported"}'}
    broken = tmp_path / "llm_calls" / "call-broken.parquet"
    broken.write_bytes(b"not parquet")
    segments = sorted((tmp_path / "llm_calls").iterdir())
    assert data.ledger_answers(["a"]) is None  # the page says the ledger cannot be read
    assert sorted((tmp_path / "llm_calls").iterdir()) == segments  # left where it is: the gateway quarantines


# -- files by content hash ------------------------------------------------------------------------------------------
def _raw_get(url: str, path: str) -> tuple[int, str]:
    """A GET of `path` exactly as written (no client normalises its dot segments or escapes)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace")


def test_manuscript_pages_and_figures_are_served_by_content_hash_only(web_server, lake):
    pdf = lake.read_table("manuscript_pdfs", "sample").filter(pl.col("status") == "ok").row(0, named=True)
    client = web_server.client()
    page = client.get(f"/pdf/{pdf['sha256']}/page/1.png")
    assert page.status_code == 200 and page.headers["content-type"] == "image/png"
    assert page.content.startswith(b"\x89PNG")
    assert (lake.root / WEB_DIR / "page_images" / pdf["sha256"] / "1@1.0.png").read_bytes() == page.content
    beyond = client.get(f"/pdf/{pdf['sha256']}/page/{pdf['pages'] + 1}.png")
    assert beyond.status_code == 404 and f"has {pdf['pages']} pages" in beyond.text
    assert "scales" in client.get(f"/pdf/{pdf['sha256']}/page/1.png?scale=40").text
    unknown = client.get(f"/pdf/{'0' * 64}/page/1.png")
    assert unknown.status_code == 404 and f"no manuscript with sha256 {'0' * 64}" in unknown.text
    figure = lake.read_table("venue_report", "sample").row(0, named=True)
    digest = hashlib.sha256((lake.root / "reports" / "sample" / figure["figure"]).read_bytes()).hexdigest()
    assert client.get(f"/figures/{digest}.png").content.startswith(b"\x89PNG")
    assert client.get(f"/figures/{'1' * 64}.png").status_code == 404


@pytest.mark.parametrize("path", [
    "/pdf/../../../../etc/passwd/page/1.png",
    "/pdf/..%2F..%2F..%2F..%2Fetc%2Fpasswd/page/1.png",
    "/pdf/%2e%2e/page/1.png",
    "/pdf/..%2Fpeerify.duckdb/page/1.png",
    "/figures/..%2F..%2Fpeerify.duckdb.png",
    "/figures/%2e%2e%2fweb%2fsession_secret.png",
    "/static/../web/security.py",
    "/static/%2e%2e/security.py",
])
def test_a_path_traversal_attempt_is_refused_with_a_clear_message(web_server, path):
    status, body = _raw_get(web_server.url, path)
    assert status in (400, 404), (path, status)
    assert "root:" not in body and "def " not in body and "token_urlsafe" not in body
    assert status == 400 or "sha256" in body or "There is no page at" in body or "Not Found" in body, body[-400:]


# -- CSRF, Origin, access token, sessions ------------------------------------------------------------------------
def test_a_post_without_the_csrf_token_is_refused_with_a_clear_message(web_server, browser_page):
    client = web_server.client()
    refused = client.post("/signin", data={"name": "Mallory"})
    assert refused.status_code == 403 and "security token (CSRF)" in refused.text
    token = csrf_from(client.get("/signin").text)
    wrong = client.post("/signin", data={"name": "Mallory", "csrf_token": token[::-1]})
    assert wrong.status_code == 403
    foreign = client.post("/signin", data={"name": "Mallory", "csrf_token": token},
                          headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403 and "another site (http://evil.example)" in foreign.text
    assert client.post("/signin", data={"name": "Ann", "csrf_token": token}).status_code == 303
    # the same in the browser: a form whose token was stripped, and an htmx request without its header
    page = browser_page
    sign_in_page(page, web_server, "Ann")
    page.evaluate("document.querySelector('header form input[name=csrf_token]').remove()")
    page.click("header form button")
    assert page.locator("p.error").inner_text() == CSRF_MESSAGE
    page.goto(web_server.url + "/")
    assert page.locator("[data-testid=annotator]").inner_text() == "Ann"  # still signed in: nothing happened
    status = page.evaluate("fetch('/signout', {method: 'POST'}).then(r => r.status)")
    assert status == 403
    page.evaluate("document.body.removeAttribute('hx-headers')")
    page.evaluate("htmx.ajax('POST', '/signout', {target: '#flash'})")
    page.wait_for_function("document.querySelector('#flash').innerText.includes('CSRF')")
    page.goto(web_server.url + "/")
    assert page.locator("[data-testid=annotator]").inner_text() == "Ann"


def test_with_an_access_token_every_request_needs_it(web_lake, browser):
    with live_server(web_lake, token=TOKEN) as server:
        client = server.client()
        first = client.get("/venues/sample")
        assert first.status_code == 303 and first.headers["location"] == "/signin?next=%2Fvenues%2Fsample"
        refused = client.post("/signout")
        assert refused.status_code == 403 and NO_TOKEN_MESSAGE in refused.text
        assert client.get("/?token=wrong-token-of-some-length").status_code == 303  # to the sign-in page
        assert client.get("/").status_code == 303
        entered = client.get("/venues/sample?token=" + TOKEN)
        assert (entered.status_code, entered.headers["location"]) == (303, "/venues/sample")
        assert client.get("/venues/sample").status_code == 200  # kept in the session
        # the sign-in form asks for the token and refuses a wrong one
        context = browser.new_context()
        page = context.new_page()
        page.goto(server.url + "/venues/sample/claims")
        assert "/signin" in page.url and page.locator("input[name=token]").count() == 1
        page.fill("input[name=name]", "Bea")
        page.fill("input[name=token]", "not the token at all")
        page.click("form.stacked button[type=submit]")
        assert "not this server's access token" in page.locator("p.error").inner_text()
        page.fill("input[name=token]", TOKEN)
        page.click("form.stacked button[type=submit]")
        page.wait_for_url(server.url + "/venues/sample/claims")
        assert page.locator("[data-testid=annotator]").inner_text() == "Bea"
        context.close()


def test_each_annotator_has_a_session_that_survives_a_restart(web_lake):
    client_ann, client_bea = requests.Session(), requests.Session()
    with live_server(web_lake) as server:
        for session, name in ((client_ann, "Ann"), (client_bea, "Bea")):
            wrapped = server.client()
            wrapped.cookies = session.cookies
            sign_in_client(wrapped, name)
    secret = web_lake / WEB_DIR / SECRET_FILE
    assert secret.stat().st_mode & 0o777 == 0o600
    with live_server(web_lake) as restarted:
        for session, name in ((client_ann, "Ann"), (client_bea, "Bea")):
            page = session.get(restarted.url + "/", timeout=30)
            assert f'data-testid="annotator">{name}<' in page.text


def test_a_loopback_server_answers_only_requests_addressed_to_it(web_server):
    answer = web_server.client().get("/", headers={"Host": "attacker.example"})
    assert answer.status_code == 400 and "a loopback server answers only requests addressed to localhost" in answer.text


def test_a_body_over_the_limit_is_refused(web_lake, tmp_path):
    with live_server(web_lake, max_body_bytes=1000) as server:
        client = server.client()
        token = csrf_from(client.get("/signin").text)
        answer = client.post("/signin", data={"name": "x" * 2000, "csrf_token": token})
        assert answer.status_code == 413 and "is over the upload limit of" in answer.text

    async def upload(request: Request):
        return PlainTextResponse(str(len(await limited_body(request, 10))))

    app = Starlette(routes=[Route("/upload", upload, methods=["POST"])])
    with serve_app(app) as url:
        assert requests.post(url + "/upload", data=b"123", timeout=30).text == "3"
        assert requests.post(url + "/upload", data=b"x" * 11, timeout=30).status_code == 413


# -- security helpers and `peerify serve` ---------------------------------------------------------------------------
@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                            ("[::1]", True), ("127.0.0.2", True), ("0.0.0.0", False),
                                            ("192.168.1.5", False), ("example.org", False), ("::", False)])
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("target, expected", [("/venues/sample", "/venues/sample"), ("//evil.example", "/"),
                                              ("https://evil.example", "/"), ("/\\evil", "/"), (None, "/")])
def test_sign_in_sends_back_only_to_this_site(target, expected):
    assert safe_next(target) == expected


def test_the_session_secret_is_made_once_and_kept_private(tmp_path):
    first = session_secret(tmp_path)
    assert session_secret(tmp_path) == first and len(first) >= 48
    assert (tmp_path / WEB_DIR / SECRET_FILE).stat().st_mode & 0o777 == 0o600


def test_a_non_loopback_bind_always_has_a_token():
    assert access_token("127.0.0.1", None) == (None, False)
    token, generated = access_token("0.0.0.0", None)
    assert generated and len(token) >= MIN_TOKEN_LENGTH
    assert access_token("0.0.0.0", TOKEN) == (TOKEN, False)
    with pytest.raises(ConfigError, match="at least 16"):
        access_token("0.0.0.0", "short")
    assert address("127.0.0.1", 8400, None) == "http://127.0.0.1:8400/"
    assert address("::1", 8400, "abc") == "http://[::1]:8400/?token=abc"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(lake_root: Path, *args: str, token: str | None = None) -> subprocess.Popen:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PEERIFY_", "DAGSTER_"))}
    if token is not None:
        env["PEERIFY_WEB_TOKEN"] = token
    return subprocess.Popen([sys.executable, "-m", "peerify_dagster.cli", "serve", "--lake", str(lake_root), *args],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_until_serving(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        try:
            requests.get(url, timeout=2, allow_redirects=False)
            return
        except requests.ConnectionError:
            time.sleep(0.2)
    pytest.fail(f"peerify serve did not answer at {url}")


def test_peerify_serve_refuses_a_short_token_and_guards_a_non_loopback_bind_with_one(web_lake):
    refused = _serve(web_lake, "--host", "0.0.0.0", "--port", str(_free_port()), token="short")
    assert refused.wait(60) == 2
    assert "PEERIFY_WEB_TOKEN is 5 characters long" in refused.stderr.read()
    port = _free_port()
    process = _serve(web_lake, "--host", "0.0.0.0", "--port", str(port))
    try:
        address_line = process.stdout.readline()
        assert "?token=" in address_line, address_line
        token = address_line.strip().rsplit("?token=", 1)[1]
        url = f"http://127.0.0.1:{port}"
        _wait_until_serving(url, process)
        assert requests.get(url + "/venues/sample", allow_redirects=False, timeout=10).status_code == 303
        assert requests.post(url + "/signout", timeout=10).status_code == 403
        session = requests.Session()
        assert session.get(f"{url}/venues/sample?token={token}", timeout=10).status_code == 200
        annotator = Client(url)
        sign_in_client(annotator, "Ann", token=annotator_pass(token))
        assert annotator.get("/arbitration").status_code == 200
        assert annotator.get("/venues/sample").status_code == 403
    finally:
        process.terminate()
        process.wait(30)
    stderr = process.stderr.read()
    assert "is not a loopback address" in stderr and token in stderr
    # the sign-in address and the pass to hand to annotators, printed beside the maintainer's address (read once the
    # server has stopped: a line that is missing cannot hang the test)
    printed = process.stdout.read()
    assert f":{port}/signin with their name and the annotator pass {annotator_pass(token)} " in printed
    assert token not in printed


def test_peerify_serve_on_loopback_needs_no_token_and_calls_no_model(web_lake, showcase):
    ledger = sorted((web_lake / "llm_calls").iterdir())
    port = _free_port()
    process = _serve(web_lake, "--port", str(port))
    try:
        line = process.stdout.readline()
        assert line.strip().endswith(f"open http://127.0.0.1:{port}/"), line
        _wait_until_serving(f"http://127.0.0.1:{port}", process)
        # a claim page before any other page of the venue: its tables are read now, its justifications from the ledger
        claim = requests.get(f"http://127.0.0.1:{port}/venues/sample/claims/{showcase['claim']['claim_id']}",
                             timeout=30)
        assert claim.status_code == 200 and showcase["claim"]["claim_text"] in html.unescape(claim.text)
        assert requests.get(f"http://127.0.0.1:{port}/venues/sample", timeout=10).status_code == 200
    finally:
        process.terminate()
        process.wait(30)
    assert sorted((web_lake / "llm_calls").iterdir()) == ledger  # not one call made, or even a segment opened
