"""The web app's reference-list page (/references) over a small lake the tests make: a .bib checked against the
lake's metadata index (built by `peerify refs index --jsonl`, as in test_refs_check.py) with no network service
ticked, its counts and table worst first, and the JSON, CSV and corrected BibTeX downloads of that same result; a
file of the wrong kind and an unreadable archive refused with 400 naming the file, an upload over the limit with 413,
the ticked services kept each time; an annotator refused the page; and the same upload in a real browser (Debian's
chromium driven by Playwright)."""

from __future__ import annotations

import csv
import html
import io
import json
import re

import pytest
from starlette.testclient import TestClient

from peerify_dagster.cli import main
from peerify_dagster.domain.citations.bibtex import read_bibtex
from peerify_dagster.web.app import create_app
from tests.web_support import csrf_from, live_server

BIB = r"""
@misc{lo2020,
  author = {Lo, Kyle and Wang, Lucy Lu},
  title = {S2ORC: The Semantic Scholar Open Research Corpus},
  year = {2020}
}
@article{made_up,
  author = {Nobody, Anne},
  title = {A thorough study of things that were never written down anywhere},
  journal = {Journal of Nothing},
  year = {2021}
}
"""
# One Crossref work record, as `peerify refs index --jsonl` imports it: it validates lo2020 and gives it its DOI.
DUMP = {"DOI": "10.18653/v1/2020.acl-main.447", "title": ["S2ORC: The Semantic Scholar Open Research Corpus"],
        "author": [{"given": "Kyle", "family": "Lo"}, {"given": "Lucy Lu", "family": "Wang"}],
        "issued": {"date-parts": [[2020]]}, "container-title": ["Proceedings of ACL"], "type": "proceedings-article"}
SMALL_LIMIT = 2 * 2**10  # 2 KB: the upload limit of the app these tests make
_ERROR = re.compile(r'data-testid="references-error"\s*>(.*?)</p>', re.DOTALL)
_RESULT = re.compile(r"^/references/([0-9a-f]{16})$")


@pytest.fixture
def lake(tmp_path, monkeypatch):
    """A lake holding only a metadata index at its default place."""
    lake_root = tmp_path / "lake"
    monkeypatch.setenv("PEERIFY_LAKE", str(lake_root))
    dump = tmp_path / "works.jsonl"
    dump.write_text(json.dumps(DUMP) + "\n")
    assert main(["refs", "index", "--jsonl", str(dump)]) == 0
    assert (lake_root / "metadata_index" / "index.duckdb").is_file()
    return lake_root


@pytest.fixture
def client(lake):
    with TestClient(create_app(lake, token=None, max_pdf_bytes=SMALL_LIMIT), base_url="http://localhost") as running:
        yield running


def post(client: TestClient, name: str, data: bytes, services: tuple[str, ...] = ()):  # noqa: ANN201 - a response
    form = {"csrf_token": csrf_from(client.get("/references").text), "service": list(services)}
    return client.post("/references", data=form, files={"reference_list": (name, data, "application/octet-stream")},
                       follow_redirects=False)


def refusal(page: str) -> str:
    match = _ERROR.search(page)
    assert match, page[-2000:]
    return html.unescape(match.group(1)).strip()


def test_a_bib_is_checked_against_the_lakes_index_and_its_result_downloads_as_json_csv_and_bibtex(client):
    form = client.get("/references")
    assert form.status_code == 200
    assert "Nothing leaves this machine unless you tick a service." in form.text
    assert "This lake has a metadata index" in form.text
    assert 'name="service" value="crossref"' in form.text
    assert not re.search(r'name="service"[^>]*checked', form.text)  # no service ticked by default

    answer = post(client, "paper.bib", BIB.encode())
    assert answer.status_code == 303, answer.text[-2000:]
    result_id = _RESULT.match(answer.headers["location"]).group(1)
    page = client.get(answer.headers["location"])
    assert page.status_code == 200
    assert "2 entries:" in page.text and "1 not_found" in page.text and "1 validated" in page.text
    table = page.text[page.text.index('data-testid="references-table"'):]
    assert table.index("made_up") < table.index("lo2020")  # worst first: not_found before validated
    assert "index" in table  # the sources asked: the index alone, no service ticked

    report = client.get(f"/references/{result_id}.json").json()
    assert report["source"] == "paper.bib"
    assert {row["key"]: (row["status"], row["sources"]) for row in report["references"]} == {
        "lo2020": ("validated", ["index"]), "made_up": ("not_found", ["index"])}
    rows = list(csv.DictReader(io.StringIO(client.get(f"/references/{result_id}.csv").text)))
    assert {row["key"]: row["status"] for row in rows} == {"lo2020": "validated", "made_up": "not_found"}
    bibtex = client.get(f"/references/{result_id}.bib")
    assert bibtex.headers["content-type"].startswith("application/x-bibtex")
    corrected = {entry.key: entry for entry in read_bibtex(bibtex.text, "corrected.bib").entries}
    assert dict(corrected["lo2020"].fields)["doi"] == "10.18653/v1/2020.acl-main.447"  # filled from the index
    assert client.get(f"/references/{result_id}.xml").status_code == 404
    assert client.get("/references/0123456789abcdef").status_code == 404

    again = post(client, "paper.bib", BIB.encode())  # the same content and sources: the same result
    assert again.headers["location"] == answer.headers["location"]


def test_a_bad_upload_is_refused_naming_the_file_with_the_ticked_services_kept(client, lake):
    wrong_kind = post(client, "notes.txt", b"Some notes, not a bibliography.", ("openalex",))
    assert wrong_kind.status_code == 400
    assert refusal(wrong_kind.text).startswith("notes.txt: not a reference list this page reads")
    assert re.search(r'value="openalex"\s+checked', wrong_kind.text)  # what the user ticked is kept

    unreadable = post(client, "source.tar.gz", b"these bytes are no gzip archive")
    assert unreadable.status_code == 400
    assert refusal(unreadable.text).startswith("source.tar.gz: ")
    assert str(lake) not in refusal(unreadable.text)  # named as uploaded, not by its place in the lake

    empty = post(client, "empty.bib", b"% nothing cited yet\n")
    assert empty.status_code == 400 and refusal(empty.text).startswith("empty.bib: no reference entry found")
    assert not any((lake / "uploads" / "references").iterdir())  # nothing kept of a refused upload

    too_large = post(client, "big.bib", BIB.encode() * 20, ("crossref",))  # over 2 KB, within the request cap
    assert too_large.status_code == 413
    assert refusal(too_large.text).startswith("big.bib: 6 KB is over the upload limit of 2 KB (PEERIFY_MAX_PDF_MB)")
    assert re.search(r'value="crossref"\s+checked', too_large.text)


def test_an_annotator_is_refused_the_page_as_verify(client):
    signin = client.get("/signin")
    client.post("/signin", data={"name": "Ann", "csrf_token": csrf_from(signin.text), "next": "/arbitration"},
                follow_redirects=False)
    assert client.get("/verify").status_code == 403
    refused = client.get("/references")
    assert refused.status_code == 403 and "Annotators work blind" in refused.text


def test_a_bib_uploaded_in_a_real_browser_shows_the_table(lake, tmp_path, browser_page):
    bib = tmp_path / "paper.bib"
    bib.write_text(BIB)
    with live_server(lake) as server:
        page = browser_page
        page.goto(server.url + "/")
        page.click('[data-testid="references-link"] a')
        page.set_input_files('input[name="reference_list"]', str(bib))
        page.click('form[data-testid="references-form"] button[type="submit"]')
        page.wait_for_selector('[data-testid="references-table"]')
        statuses = page.locator('[data-testid="references-table"] tr td:nth-child(2)').all_inner_texts()
        assert statuses == ["not_found", "validated"]
        assert page.locator('[data-testid="references-counts"]').inner_text().startswith("2 entries:")
        assert page.locator('a[href$=".bib"]').inner_text() == "corrected BibTeX"
