"""`peerify verify --citations` end to end, in this process (as tests/test_verify.py runs `peerify verify`): the
sample's paper Rk7bWq2NzA alone (no review), its sibling sample papers as the library, through the real
`verify_citations` job on a fresh lake; the printed citances with their entries, checks, resolution and verdicts, the
counts line, `citations.html` / `citations.json`, the registry entry keeping the library, and the web app's split view
of the result (the library's paper served by its hash); a one-page abstract without references completing with "no
references section found"; the estimates; and every refused input (one line naming the file and the reason, exit 2,
nothing registered)."""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
import yaml

from peerify_dagster import cli
from peerify_dagster.domain import uploads
from peerify_dagster.web.pages import venue_url
from tests.cli_support import fresh_home
from tests.fixtures_pdf import one_page_abstract
from tests.test_verify import REGISTRY, SAMPLE, SAMPLE_PDF, SHORT_REVIEW, bare_env, estimate_rows, made_live, verify
from tests.web_support import live_server

CITANCE_LINE = re.compile(r"^(\d+)\. p\.(\d+) (.+)$", re.MULTILINE)
COUNTS_LINE = re.compile(r"^(\d+) citances, (\d+) bibliography entries, (\d+) resolved to a full text; verdicts: (.+)$",
                         re.MULTILINE)
VERDICT_LINE = re.compile(r"^      (\S+) \((windows|merged)\): (Supported|Partially Supported|Not Supported|"
                          r"Not Enough Information|too_long|parse_failed|error)", re.MULTILINE)


def venue_of(stdout: str) -> str:
    return re.search(r"^venue: (upload-[0-9a-f]{12}) ", stdout, re.MULTILINE).group(1)


# -- the upload's key and its citation options (no lake) -----------------------------------------------------------
def test_a_library_is_part_of_the_upload_key_and_no_library_keeps_the_key_it_had():
    upload = uploads.Upload(pdf=b"%PDF-1.4 x", pdf_name="paper.pdf", reviews=())
    assert upload.key() == uploads.content_key({"pdf_sha256": hashlib.sha256(b"%PDF-1.4 x").hexdigest(),
                                                "reviews": [], "responses": []})
    assert upload.key("/papers") != upload.key() and upload.key("/papers") != upload.key("/other")
    assert upload.key("/papers") == upload.key("/papers")


def test_the_upload_venues_citation_options_keep_the_library_absolute():
    assert uploads.citation_options(None, None) is None
    assert uploads.citation_options(None, "/papers") == {"library": "/papers"}
    forum = {"library": "pdfs", "resolve": ["venue"], "k": 5}
    assert uploads.citation_options(forum, None, Path("/registry")) == {"library": "/registry/pdfs",
                                                                        "resolve": ["venue"], "k": 5}
    assert uploads.citation_options(forum, "/papers", Path("/registry")) == {
        "library": "/papers", "resolve": ["library", "venue"], "k": 5}  # the given library is searched first


def test_a_citations_only_request_describes_itself():
    upload = uploads.Upload(pdf=b"%PDF", pdf_name="/x/paper.pdf", reviews=())
    assert uploads.VerificationRequest(upload=upload, citations=True).describe() == "paper.pdf: its citations"
    assert not uploads.VerificationRequest(upload=upload, citations=True).reviews_given
    assert uploads.VerificationRequest(venue="sample", forum="Rk7bWq2NzA", citations=True).describe() == \
        "forum Rk7bWq2NzA of venue sample and its citations"


# -- refused inputs ------------------------------------------------------------------------------------------------
@pytest.fixture
def bare_lake(tmp_path, monkeypatch, capsys):
    """`peerify verify` in this process on an empty lake: refusals happen before Dagster runs anything."""
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("PEERIFY_VENUES", str(REGISTRY))
    monkeypatch.setenv("DAGSTER_HOME", str(fresh_home(tmp_path / "home")))

    def run(*args: str) -> tuple[int, str]:
        code = cli.main(["verify", *args])
        return code, capsys.readouterr().err.strip()

    return tmp_path, run


def test_citation_inputs_that_cannot_be_verified_are_refused_naming_the_file_and_the_reason(bare_lake):
    folder, run = bare_lake
    (folder / "paper.txt").write_text("not a PDF at all\n")
    (folder / "review.txt").write_text(SHORT_REVIEW)
    pdf, nowhere, a_file = str(SAMPLE_PDF), str(folder / "no-such-folder"), str(folder / "review.txt")
    refusals = [
        (("--pdf", pdf, "--citations", "--library", nowhere), f"{nowhere}: the --library folder does not exist"),
        (("--pdf", pdf, "--citations", "--library", a_file), f"{a_file}: --library names a file, not a folder"),
        (("--pdf", pdf, "--review", a_file, "--library", str(folder)), f"--library {folder}: the library is where"),
        (("--pdf", str(folder / "paper.txt"), "--citations"), f"{folder / 'paper.txt'}: bytes are not a PDF"),
        (("--pdf", str(folder / "missing.pdf"), "--citations"), f"{folder / 'missing.pdf'}: cannot read the PDF"),
        (("--pdf", pdf, "--citations", "--response", a_file), "--response is for verifying a review"),
        (("--pdf", pdf, "--citations", "--configuration", "hybrid-top3"), "--configuration is for verifying a review"),
        (("--pdf", pdf), "verify needs --pdf PAPER.pdf --review REVIEW (one or more) and/or --citations"),
        (("--venue", "sample", "--forum", "NoSuchForm1", "--citations"), "forum 'NoSuchForm1': unknown in venue"),
    ]
    for args, message in refusals:
        code, said = run(*args)
        assert (code, message in said, said.count("\n")) == (2, True, 0), (args, said)
    assert not (folder / "lake" / "uploads").exists()  # nothing registered, nothing written


# -- the real thing ------------------------------------------------------------------------------------------------
# "How Noisy Are Web-Scraped Image Labels?", cited by Rk7bWq2NzA as (Achterberg and Osei, 2026)
CITED_SIBLING = "Wn6yBq3JhU"


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> dict:
    """A fresh lake; a library holding one of the papers the sample's Rk7bWq2NzA cites (the others stay
    unresolved: their verdicts are Not Enough Information without a call); a one-page abstract without references."""
    folder = tmp_path_factory.mktemp("verify_citations")
    library = folder / "library"
    library.mkdir()
    shutil.copy(SAMPLE / "pdfs" / f"{CITED_SIBLING}.pdf", library / f"{CITED_SIBLING}.pdf")
    (folder / "abstract.pdf").write_bytes(one_page_abstract())
    registry_sha = hashlib.sha256(REGISTRY.read_bytes()).hexdigest()
    yield {"folder": folder, "root": folder / "lake", "library": library, "env": bare_env(folder)}
    assert hashlib.sha256(REGISTRY.read_bytes()).hexdigest() == registry_sha  # the tracked registry is never written


@pytest.fixture(scope="module")
def citations_run(lake):
    return verify(lake["env"], "--pdf", str(SAMPLE_PDF), "--citations", "--library", str(lake["library"]))


def tables_of(lake: dict, venue: str) -> dict[str, pl.DataFrame]:
    return {name: pl.read_parquet(lake["root"] / name / f"{venue}.parquet")
            for name in ("citances", "bibliography", "cited_papers", "citation_verdicts")}


def test_the_sample_paper_alone_is_checked_citance_by_citance_against_its_library(lake, citations_run):
    run = citations_run
    assert run.code == 0, run.stderr[-3000:]
    venue = venue_of(run.stdout)
    tables = tables_of(lake, venue)
    citances, verdicts = tables["citances"], tables["citation_verdicts"]
    title = pl.read_parquet(lake["root"] / "submissions" / f"{venue}.parquet")["title"][0]  # the web app lists it
    assert run.stdout.startswith(f"Citations of {title} (Rk7bWq2NzA.pdf: its citations), venue {venue}\n")
    printed = CITANCE_LINE.findall(run.stdout)
    assert [int(number) for number, _, _ in printed] == list(range(1, citances.height + 1)) and citances.height >= 5
    counts = COUNTS_LINE.search(run.stdout)
    resolved = tables["cited_papers"].filter(pl.col("status") == "resolved")
    assert counts.groups()[:3] == (str(citances.height), str(tables["bibliography"].height), str(resolved.height))
    assert resolved["locator"].to_list() == [f"{CITED_SIBLING}.pdf"]  # only the library's paper, the right one
    sibling = resolved["entry_id"][0]
    assert f"   marker '(Achterberg and Osei, 2026)' (author_year) -> {sibling}" in run.stdout
    cited_title = tables["bibliography"].filter(pl.col("entry_id") == sibling)["title"][0]
    assert cited_title.startswith("How Noisy Are Web-Scraped Image Labels?")  # the entry's parsed title and year
    assert f"   [{sibling}] {cited_title} (2026)" in run.stdout
    assert f"      resolution: resolved from library ({CITED_SIBLING}.pdf)" in run.stdout
    assert "      reference check: unvalidatable (no metadata service is configured)" in run.stdout
    assert "      resolution: unresolved: library: no_match" in run.stdout  # with the reason
    # every verdict printed; a call only for the paper that was had, the rest Not Enough Information without one
    assert len(VERDICT_LINE.findall(run.stdout)) == verdicts.height
    called = verdicts.filter(pl.col("call_id").is_not_null())
    assert called["entry_id"].to_list() == [sibling] and made_live(run) == called.height == 1
    assert set(verdicts.filter(pl.col("entry_id") != sibling)["label"]) == {"Not Enough Information"}
    assert re.search(r"^         top passage p\.\d, score 0\.\d{3}: \S", run.stdout, re.MULTILINE)
    # no review was given: the review half is not built
    assert not (lake["root"] / "review_claims" / f"{venue}.parquet").exists()
    assert not list(lake["root"].glob(f"predictions/*|{venue}.parquet"))
    folder = lake["root"] / "uploads" / venue
    assert not (folder / "result.html").exists()
    assert f"citations: {folder / 'citations.html'}" in run.stdout
    assert f"/venues/{venue}/citances" in run.stdout
    page = html.unescape(re.sub(r"<[^>]+>", "", (folder / "citations.html").read_text()))  # its text
    assert all(text in page for text in citances["text"]) and counts.group(0) in page
    assert "How Noisy Are Web-Scraped Image Labels?" in page and f"{CITED_SIBLING}.pdf" in page
    data = json.loads((folder / "citations.json").read_text())
    assert len(data["citances"]) == citances.height and data["resolved"] == 1
    registered = yaml.safe_load((lake["root"] / "uploads" / "venues.yaml").read_text())["venues"][venue]
    assert registered["citations"] == {"library": str(lake["library"].resolve())}
    print(f"\nverify --citations (1 live call): {run.seconds:.1f} s")


def test_a_manuscript_without_a_references_section_completes_saying_so(lake):
    run = verify(lake["env"], "--pdf", str(lake["folder"] / "abstract.pdf"), "--citations")
    assert run.code == 0, run.stderr[-3000:]
    venue = venue_of(run.stdout)
    assert re.search(r"^  note: \S+: no references section found", run.stdout, re.MULTILINE)
    assert COUNTS_LINE.search(run.stdout).groups()[1:3] == ("0", "0")
    assert "no references section found" in (lake["root"] / "uploads" / venue / "citations.html").read_text()
    print(f"\nverify --citations of a paper without references: {run.seconds:.1f} s")


def test_the_estimate_counts_the_citation_verdicts_from_the_lake_once_verified(lake, citations_run):
    registry = (lake["root"] / "uploads" / "venues.yaml").read_bytes()
    run = verify(lake["env"], "--pdf", str(SAMPLE_PDF), "--citations", "--library", str(lake["library"]),
                 "--estimate")
    assert run.code == 0, run.stderr
    assert run.stdout.startswith(f"Estimate for {venue_of(citations_run.stdout)}:")
    rows = estimate_rows(run)
    assert set(rows) == {("citation_verdicts", "citation_verifiers")}  # no review: no review-half stage
    row = rows[("citation_verdicts", "citation_verifiers")]
    assert (row["calls"], row["counted from"], row["ledger_hits"]) == ("0", "lake", "1")
    assert (lake["root"] / "uploads" / "venues.yaml").read_bytes() == registry  # nothing registered


def test_the_estimate_of_a_new_upload_adds_the_citation_stage_without_calling_or_registering(tmp_path):
    (tmp_path / "review.txt").write_text(SHORT_REVIEW)
    run = verify(bare_env(tmp_path), "--pdf", str(SAMPLE_PDF), "--review", str(tmp_path / "review.txt"),
                 "--citations", "--estimate")
    assert run.code == 0, run.stderr
    rows = estimate_rows(run)
    assert set(rows) == {("review_claims", "extractor"), ("claim_types", "fact_tagger"),
                         ("predictions:hybrid-top3", "verifiers"), ("citation_verdicts", "citation_verifiers")}
    assert rows[("citation_verdicts", "citation_verifiers")]["counted from"] == "upload"
    assert not (tmp_path / "lake").exists()


def test_the_verified_upload_opens_in_the_split_view_with_the_library_papers_page(lake, citations_run):
    """`peerify serve` over the same lake: the citance citing the library's paper shows that paper's page, served by
    its content hash from `cited_manuscripts` (it is no manuscript of any venue), with the evidence boxed."""
    venue = venue_of(citations_run.stdout)
    tables = tables_of(lake, venue)
    sibling = tables["cited_papers"].filter(pl.col("status") == "resolved").row(0, named=True)
    citance = tables["citances"].filter(pl.col("entry_ids").list.contains(sibling["entry_id"]))["citance_id"][0]
    with live_server(lake["root"]) as server:
        client = server.client()
        page = client.get(venue_url(venue, "citances", citance))
        assert page.status_code == 200, page.text[-2000:]
        assert f'src="/pdf/{sibling["pdf_sha256"]}/page/' in page.text
        assert page.text.count('data-testid="cited-highlight"') >= 1
        assert page.text.count('data-testid="citing-highlight"') >= 1
        image = client.get(re.search(rf'src="(/pdf/{sibling["pdf_sha256"]}/page/\d+\.png\?scale=[\d.]+)"',
                                     page.text).group(1))
        assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
        listed = client.get(venue_url(venue, "citances"))
        assert f"{tables['citances'].height} citances match." in listed.text


def test_a_library_given_to_verify_is_searched_first():
    from peerify_dagster.domain.citations.options import CitationOptions

    options = CitationOptions.from_mapping({"resolve": ["venue", "library", "arxiv"]}).with_library("/papers")
    assert (options.library, options.resolve) == ("/papers", ("library", "venue", "arxiv"))
    assert CitationOptions().with_library("/papers").resolve == ("library", "venue")
