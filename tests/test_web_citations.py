"""The citation half's pages. First the pure shaping (domain/citation_view.py) on hand-built tables with the
citation tables' columns: the browser's filters, one citance with its entries, checks, resolution, evidence and
verdicts, the boxes on the citing and the cited paper's pages, the reason shown for a cited paper that could not be
had, and the command's summary. Then the real thing: the sample venue built once per session, its citance browser
and the split view of a citance citing a sibling sample paper in a real browser (Debian's chromium driven by
Playwright), both pages' boxes drawn, the verdict shown, the passages stepped through; and the pages' access rules."""

from __future__ import annotations

import html
from urllib.parse import parse_qs, urlparse

import polars as pl
import pytest

from peerify_dagster.domain.chunking import REGION_TYPE
from peerify_dagster.domain.citation_view import (
    NO_REFERENCES_NOTE,
    NO_VERDICT,
    CitanceFilter,
    CitationTables,
    citance_detail,
    citance_index,
    citation_summary,
    cited_page_view,
    citing_page_view,
    filter_citances,
    format_citations,
    sentence_parts,
)
from peerify_dagster.domain.regions import page_sizes_of
from peerify_dagster.resources.lake import Lake
from peerify_dagster.web.security import BLIND_MESSAGE
from tests.test_web_roles import annotator

MARKER = pl.Struct({"text": pl.String, "style": pl.String, "start": pl.Int64, "end": pl.Int64,
                    "entry_ids": pl.List(pl.String), "unresolved_keys": pl.List(pl.String)})
PASSAGE_REGIONS = pl.List(REGION_TYPE)
PAGE_SIZE = pl.List(pl.Struct({"page": pl.Int64, "width": pl.Float64, "height": pl.Float64}))
CITED_SHA = "c" * 64
CITING_SHA = "a" * 64
SIBLING_SHA = "b" * 64
SENTENCE = "Dense retrievers degrade on long inputs (Whitcombe and Rao, 2022; Asante, 2024)."
BLOCK_START = 40  # the sentence's offset in its paragraph: marker offsets are in the paragraph's text


def box(page: int, x0: float, y0: float, x1: float, y1: float) -> dict:
    return {"page": page, "x0": x0, "y0": y0, "x1": x1, "y1": y1}


def marker(text: str, sentence: str, entry_ids: list[str], unresolved: list[str] = (), style: str = "author_year"):
    start = BLOCK_START + sentence.index(text)
    return {"text": text, "style": style, "start": start, "end": start + len(text), "entry_ids": entry_ids,
            "unresolved_keys": list(unresolved)}


def tables(**replaced) -> CitationTables:
    """Paper P1 (its PDF and page sizes known) with three citances: c1 cites r1 (resolved to a library PDF, two
    passages, two verifiers) and r2 (unresolved, Not Enough Information); c2's marker matches no entry; c3 cites
    r3, which is the venue's own manuscript P2 (`forum:P2`). Paper P3 has no references section."""
    group = "(Whitcombe and Rao, 2022; Asante, 2024)"
    unresolved_sentence = "Earlier work reports the same effect [9]."
    sibling_sentence = "Label noise is common in web-scraped data (Achterberg and Osei, 2026)."
    citances = pl.DataFrame([
        {"citance_id": "P1:c1", "paper_id": "P1", "text": SENTENCE, "block_order": 3, "char_start": BLOCK_START,
         "char_end": BLOCK_START + len(SENTENCE), "page": 1, "regions": [box(1, 72, 100, 540, 112),
                                                                          box(2, 72, 60, 300, 72)],
         "section_path": ["2 Related work"], "markers": [marker(group, SENTENCE, ["P1:r1", "P1:r2"])],
         "entry_ids": ["P1:r1", "P1:r2"], "style": "author_year", "claim_type": "descriptive", "hedged": False,
         "resolution": "all"},
        {"citance_id": "P1:c2", "paper_id": "P1", "text": unresolved_sentence, "block_order": 5,
         "char_start": BLOCK_START, "char_end": BLOCK_START + len(unresolved_sentence), "page": 2,
         "regions": [box(2, 72, 200, 500, 212)], "section_path": ["3 Method"],
         "markers": [marker("[9]", unresolved_sentence, [], ["9"], "numeric")], "entry_ids": [],
         "style": "numeric", "claim_type": "descriptive", "hedged": False, "resolution": "none"},
        {"citance_id": "P1:c3", "paper_id": "P1", "text": sibling_sentence, "block_order": 4,
         "char_start": BLOCK_START, "char_end": BLOCK_START + len(sibling_sentence), "page": 1,
         "regions": [box(1, 72, 300, 540, 312)], "section_path": ["4 Setup"],
         "markers": [marker("(Achterberg and Osei, 2026)", sibling_sentence, ["P1:r3"])], "entry_ids": ["P1:r3"],
         "style": "author_year", "claim_type": "descriptive", "hedged": True, "resolution": "all"},
    ], schema_overrides={"regions": PASSAGE_REGIONS, "markers": pl.List(MARKER)})
    bibliography = pl.DataFrame([
        {"paper_id": "P1", "entry_id": "P1:r1", "entry_index": 1, "title": "Dense passage encoders and their limits",
         "year": 2022, "authors": ["T. Whitcombe", "A. Rao"], "parse_status": "parsed", "parse_reason": None,
         "raw_text": "T. Whitcombe and A. Rao. Dense passage encoders and their limits. 2022."},
        {"paper_id": "P1", "entry_id": "P1:r2", "entry_index": 2, "title": "Question answering over full texts",
         "year": 2024, "authors": ["N. Asante"], "parse_status": "parsed", "parse_reason": None,
         "raw_text": "N. Asante. Question answering over full texts. 2024."},
        {"paper_id": "P1", "entry_id": "P1:r3", "entry_index": 3, "title": "How noisy are web-scraped image labels?",
         "year": 2026, "authors": ["N. Achterberg", "K. Osei"], "parse_status": "parsed", "parse_reason": None,
         "raw_text": "N. Achterberg and K. Osei. How noisy are web-scraped image labels? 2026."},
        {"paper_id": "P3", "entry_id": "P3:none", "entry_index": None, "title": None, "year": None, "authors": [],
         "parse_status": "no_references", "parse_reason": "no references section was found in the manuscript",
         "raw_text": None},
    ])
    checks = pl.DataFrame([
        {"entry_id": "P1:r1", "status": "validated", "reasons": ["title matches crossref"], "services": ["crossref"]},
        {"entry_id": "P1:r2", "status": "unvalidatable", "reasons": ["no metadata service answered"],
         "services": []},
    ])
    cited = pl.DataFrame([
        {"entry_id": "P1:r1", "status": "resolved", "source": "library", "locator": "whitcombe.pdf",
         "cited_key": f"sha256:{CITED_SHA}", "pdf_sha256": CITED_SHA, "right_paper_score": 0.97, "reason": None,
         "attempts": [{"source": "library", "outcome": "found by title"}]},
        {"entry_id": "P1:r2", "status": "unresolved", "source": None, "locator": None, "cited_key": None,
         "pdf_sha256": None, "right_paper_score": None, "reason": "no library file or venue manuscript matches",
         "attempts": [{"source": "library", "outcome": "no match"}, {"source": "venue", "outcome": "no match"}]},
        {"entry_id": "P1:r3", "status": "resolved", "source": "venue", "locator": "P2", "cited_key": "forum:P2",
         "pdf_sha256": SIBLING_SHA, "right_paper_score": 0.99, "reason": None, "attempts": []},
    ])
    cited_manuscripts = pl.DataFrame([
        {"cited_key": f"sha256:{CITED_SHA}", "pdf_sha256": CITED_SHA, "lake_path": f"cited_pdfs/{CITED_SHA}.pdf",
         "pages": 4, "page_sizes": [{"page": 1, "width": 612.0, "height": 792.0},
                                    {"page": 3, "width": 612.0, "height": 792.0}]},
    ], schema_overrides={"page_sizes": PAGE_SIZE})
    evidence = pl.DataFrame([
        {"citance_id": "P1:c1", "entry_id": "P1:r1", "cited_key": f"sha256:{CITED_SHA}", "mode": "windows",
         "retriever": "hybrid", "rank": 2, "passage_id": "w2", "text": "Encoders lose accuracy past 512 tokens.",
         "score": 0.61, "page": 3, "regions": [box(3, 72, 400, 540, 430)], "window_sentences": 3, "status": "ok"},
        {"citance_id": "P1:c1", "entry_id": "P1:r1", "cited_key": f"sha256:{CITED_SHA}", "mode": "windows",
         "retriever": "hybrid", "rank": 1, "passage_id": "w1", "text": "Dense encoders degrade on long inputs.",
         "score": 0.83, "page": 1, "regions": [box(1, 72, 500, 540, 530)], "window_sentences": 3, "status": "ok"},
        {"citance_id": "P1:c1", "entry_id": "P1:r2", "cited_key": None, "mode": "windows", "retriever": "hybrid",
         "rank": None, "passage_id": None, "text": None, "score": None, "page": None, "regions": [],
         "window_sentences": None, "status": "no_cited_paper"},
        {"citance_id": "P1:c3", "entry_id": "P1:r3", "cited_key": "forum:P2", "mode": "windows",
         "retriever": "hybrid", "rank": 1, "passage_id": "s1", "text": "Between 6 and 18 percent of labels are wrong.",
         "score": 0.9, "page": 2, "regions": [box(2, 72, 100, 540, 130)], "window_sentences": 3, "status": "ok"},
    ], schema_overrides={"regions": PASSAGE_REGIONS})
    verdicts = pl.DataFrame([
        {"citance_id": "P1:c1", "entry_id": "P1:r1", "cited_key": f"sha256:{CITED_SHA}", "verifier": "v-b",
         "mode": "windows", "status": "ok", "label": "Partially Supported", "explanation": "Only past 512 tokens.",
         "passage_ids": ["w1"], "call_id": "call-b", "prompt_id": "verify_citation"},
        {"citance_id": "P1:c1", "entry_id": "P1:r1", "cited_key": f"sha256:{CITED_SHA}", "verifier": "v-a",
         "mode": "windows", "status": "ok", "label": "Supported", "explanation": "The encoders degrade.",
         "passage_ids": ["w1", "w2"], "call_id": "call-a", "prompt_id": "verify_citation"},
        {"citance_id": "P1:c1", "entry_id": "P1:r2", "cited_key": None, "verifier": "v-a", "mode": "windows",
         "status": "no_cited_paper", "label": "Not Enough Information",
         "explanation": "The cited paper could not be had.", "passage_ids": [], "call_id": None, "prompt_id": None},
        {"citance_id": "P1:c3", "entry_id": "P1:r3", "cited_key": "forum:P2", "verifier": "v-a", "mode": "windows",
         "status": "error", "label": None, "explanation": None, "passage_ids": ["s1"], "call_id": None,
         "prompt_id": "verify_citation"},
    ], schema_overrides={"passage_ids": pl.List(pl.String)})
    manuscripts = pl.DataFrame([
        {"paper_id": "P1", "sha256": CITING_SHA, "status": "ok", "pages": 5, "lake_path": "pdfs/P1.pdf"},
        {"paper_id": "P2", "sha256": SIBLING_SHA, "status": "ok", "pages": 3, "lake_path": "pdfs/P2.pdf"},
    ])
    sizes = [{"page": page, "width": 612.0, "height": 792.0} for page in (1, 2, 3)]
    parsed = pl.DataFrame([{"paper_id": "P1", "page_sizes": sizes}, {"paper_id": "P2", "page_sizes": sizes}],
                          schema_overrides={"page_sizes": PAGE_SIZE})
    submissions = pl.DataFrame([{"paper_id": "P1", "title": "Anchored sparse retrieval"},
                                {"paper_id": "P3", "title": "A paper without references"}])
    made = {"citances": citances, "bibliography": bibliography, "reference_checks": checks, "cited_papers": cited,
            "cited_manuscripts": cited_manuscripts, "citation_evidence": evidence, "citation_verdicts": verdicts,
            "manuscript_pdfs": manuscripts, "parsed_manuscripts": parsed, "submissions": submissions}
    return CitationTables(**{**made, **replaced})


def shown(wanted: CitanceFilter, made: CitationTables | None = None) -> list[str]:
    return [row["citance_id"] for row in filter_citances(citance_index(made or tables()), wanted).rows]


def test_the_browser_lists_citances_in_reading_order_and_filters_by_verdict_resolution_and_paper():
    assert shown(CitanceFilter()) == ["P1:c1", "P1:c3", "P1:c2"]  # by block, not by id
    assert shown(CitanceFilter(verdict="Supported")) == ["P1:c1"]
    assert shown(CitanceFilter(verdict="Supported", verifier="v-b")) == []  # v-b said Partially Supported
    assert shown(CitanceFilter(verdict="Not Enough Information")) == ["P1:c1"]
    assert shown(CitanceFilter(verdict=NO_VERDICT)) == ["P1:c3", "P1:c2"]  # an error, and no verdict at all
    assert shown(CitanceFilter(verifier="v-b")) == ["P1:c1"]
    assert shown(CitanceFilter(resolution="none")) == ["P1:c2"]
    assert shown(CitanceFilter(cited="unresolved")) == ["P1:c1"]
    assert shown(CitanceFilter(cited="resolved", resolution="all")) == ["P1:c1", "P1:c3"]
    assert shown(CitanceFilter(paper="P2")) == []
    assert shown(CitanceFilter(verdict="no such label")) == []
    page = filter_citances(citance_index(tables()), CitanceFilter(page=2), per_page=2)
    assert (page.total, page.page, page.pages, [r["citance_id"] for r in page.rows]) == (3, 2, 2, ["P1:c2"])
    row = filter_citances(citance_index(tables()), CitanceFilter(verifier="v-a")).rows[0]
    assert row["title"] == "Anchored sparse retrieval"
    assert {(c["entry_id"], c["status"]) for c in row["cited"]} == {("P1:r1", "resolved"), ("P1:r2", "unresolved")}
    assert [(v["verifier"], v["label"]) for v in row["verdicts"]] == [
        ("v-a", "Supported"), ("v-a", "Not Enough Information"), ("v-b", "Partially Supported")]
    assert CitanceFilter.from_query({"verdict": "Supported", "page": "x"}) == CitanceFilter(verdict="Supported")
    assert CitanceFilter(verdict="Supported", page=3).query(page=4) == {"verdict": "Supported", "page": "4"}


def test_a_browser_without_verdicts_or_cited_papers_built_still_lists_the_citances():
    made = tables(citation_verdicts=None, cited_papers=None)
    assert shown(CitanceFilter(), made) == ["P1:c1", "P1:c3", "P1:c2"]
    assert shown(CitanceFilter(verdict=NO_VERDICT), made) == ["P1:c1", "P1:c3", "P1:c2"]
    assert citance_index(made).verifiers == []


def test_one_citance_has_its_entries_checks_resolution_evidence_and_verdicts():
    detail = citance_detail(tables(), "P1:c1")
    assert detail.paper_title == "Anchored sparse retrieval" and detail.notes == []
    assert [(text, index) for text, index in detail.parts] == [
        ("Dense retrievers degrade on long inputs ", None), ("(Whitcombe and Rao, 2022; Asante, 2024)", 0), (".", None)]
    assert detail.markers[0].entry_ids == ["P1:r1", "P1:r2"]
    found, missing = detail.entries
    assert (found.title, found.year, found.check["status"], found.resolution) == (
        "Dense passage encoders and their limits", 2022, "validated", "resolved")
    assert [p.passage_id for p in found.passages] == ["w1", "w2"]  # by rank
    assert [(v.verifier, v.outcome, [p.passage_id for p in v.passages]) for v in found.verdicts] == [
        ("v-a", "Supported", ["w1", "w2"]), ("v-b", "Partially Supported", ["w1"])]
    assert found.document.sha256 == CITED_SHA and found.unavailable_reason is None
    assert missing.resolution == "unresolved" and missing.passages == [] and missing.evidence_status == "no_cited_paper"
    assert missing.unavailable_reason == ("the cited paper could not be had: no library file or venue manuscript "
                                          "matches")
    assert [v.outcome for v in missing.verdicts] == ["Not Enough Information"]
    assert citance_detail(tables(), "P1:c99") is None


def test_the_citance_is_boxed_on_its_page_and_the_evidence_on_the_cited_papers_page():
    detail = citance_detail(tables(), "P1:c1")
    citing = citing_page_view(detail)
    assert (citing["sha256"], citing["page"], citing["pages"], citing["of"]) == (CITING_SHA, 1, [1, 2], 5)
    assert citing["boxes"] == [{"left": 11.7647, "top": 12.6263, "width": 76.4706, "height": 1.5152}]  # of 612x792
    assert len(citing_page_view(detail, 2)["boxes"]) == 1 and citing_page_view(detail, 7)["page"] == 1
    cited = cited_page_view(detail)  # the first entry whose paper can be shown, its top passage
    assert (cited["entry"].entry_id, cited["passage"].passage_id, cited["index"], cited["count"]) == ("P1:r1", "w1", 0,
                                                                                                      2)
    assert (cited["sha256"], cited["page"], cited["previous"], cited["next"]) == (CITED_SHA, 1, None, "w2")
    assert len(cited["boxes"]) == 1
    stepped = cited_page_view(detail, "P1:r1", "w2")
    assert (stepped["page"], stepped["previous"], stepped["next"], len(stepped["boxes"])) == (3, "w1", None, 1)
    unavailable = cited_page_view(detail, "P1:r2")
    assert unavailable["passage"] is None and unavailable["reason"].startswith("the cited paper could not be had")


def test_a_cited_paper_that_is_the_venues_own_manuscript_is_shown_from_its_pdf():
    detail = citance_detail(tables(), "P1:c3")
    cited = cited_page_view(detail)
    assert (cited["sha256"], cited["page"], cited["of"], cited["reason"]) == (SIBLING_SHA, 2, 3, None)
    assert len(cited["boxes"]) == 1
    assert [v.outcome for v in detail.entries[0].verdicts] == ["error"]  # no label: the status says why
    gone = citance_detail(tables(manuscript_pdfs=tables().manuscript_pdfs.filter(pl.col("paper_id") == "P1")), "P1:c3")
    assert cited_page_view(gone)["reason"] == "the cited paper's PDF (forum:P2) is not in this lake"


def test_a_citance_whose_markers_match_no_entry_says_so_and_has_no_cited_pane():
    detail = citance_detail(tables(), "P1:c2")
    assert detail.entries == [] and cited_page_view(detail) is None
    assert detail.notes == ["None of the citance's markers resolves to an entry of the bibliography: 9"]
    no_pdf = citance_detail(tables(manuscript_pdfs=None), "P1:c2")
    assert citing_page_view(no_pdf) is None and "is not in this lake" in no_pdf.notes[-1]


def test_marker_offsets_that_do_not_hold_leave_the_sentence_whole():
    text = "A claim [3]."
    assert sentence_parts(text, 10, [{"text": "[3]", "start": 18, "end": 21}]) == [
        ("A claim ", None), ("[3]", 0), (".", None)]
    assert sentence_parts(text, 10, [{"text": "[3]", "start": 0, "end": 3}]) == [(text, None)]


def test_the_summary_counts_citances_entries_resolution_and_verdicts_and_notes_a_paper_without_references():
    summary = citation_summary(tables(), "upload-123", "paper.pdf: its citations")
    assert [d.citance_id for d in summary.citances] == ["P1:c1", "P1:c3", "P1:c2"]
    assert (summary.entries, summary.resolved) == (3, 2)
    assert summary.verdicts == {"Supported": 1, "Partially Supported": 1, "Not Enough Information": 1, "error": 1}
    assert summary.notes == [f"P3: {NO_REFERENCES_NOTE} (no references section was found in the manuscript)"]
    text = format_citations(summary)
    assert "1. p.1 Dense retrievers degrade on long inputs" in text
    assert "   marker '(Whitcombe and Rao, 2022; Asante, 2024)' (author_year) -> P1:r1, P1:r2" in text
    assert "   [P1:r1] Dense passage encoders and their limits (2022)" in text
    assert "      reference check: validated (title matches crossref)" in text
    assert "      resolution: resolved from library (whitcombe.pdf)" in text
    assert "      resolution: unresolved: no library file or venue manuscript matches" in text
    assert "      v-a (windows): Supported: The encoders degrade." in text
    assert "         top passage p.1, score 0.830: Dense encoders degrade on long inputs." in text
    assert "marker '[9]' (numeric) -> no entry (unresolved: 9)" in text
    assert text.endswith("3 citances, 3 bibliography entries, 2 resolved to a full text; verdicts: Supported 1, "
                         "Partially Supported 1, Not Enough Information 1, error 1")
    assert summary.as_dict()["citances"][0]["citance"]["citance_id"] == "P1:c1"


# -- the sample venue's citances in a real browser -------------------------------------------------------------------
@pytest.fixture(scope="module")
def lake(web_lake) -> Lake:
    return Lake(web_lake)


@pytest.fixture(scope="module")
def showcase(lake) -> dict:
    """A sample citance citing a sibling sample paper (resolved to the venue's own manuscript), judged, with its top
    evidence passage placed on the cited paper's page: the split view's richest case, read from the lake's tables."""
    cited = lake.read_table("cited_papers", "sample").filter(
        (pl.col("status") == "resolved") & pl.col("cited_key").str.starts_with("forum:"))
    evidence = lake.read_table("citation_evidence", "sample").filter(pl.col("status") == "ok")
    verdicts = lake.read_table("citation_verdicts", "sample").filter(pl.col("label").is_not_null())
    citances = lake.read_table("citances", "sample")
    for citance in citances.iter_rows(named=True):
        for entry_id in citance["entry_ids"]:
            if not citance["regions"] or entry_id not in cited["entry_id"].to_list():
                continue
            passages = evidence.filter((pl.col("citance_id") == citance["citance_id"])
                                       & (pl.col("entry_id") == entry_id)).sort("rank")
            judged = verdicts.filter((pl.col("citance_id") == citance["citance_id"])
                                     & (pl.col("entry_id") == entry_id))
            if passages.height and passages["regions"][0].len() and judged.height:
                return {"citance": citance, "entry_id": entry_id, "passages": passages.to_dicts(),
                        "verdict": judged.row(0, named=True),
                        "cited_paper": cited.filter(pl.col("entry_id") == entry_id)["locator"][0]}
    pytest.fail("no sample citance cites a sibling sample paper with a judged, placed evidence passage")


def _assert_boxes_on(page, image_testid: str, box_testid: str, regions: list[dict], size: tuple[float, float],
                     shown_page: int) -> None:  # noqa: ANN001 - a Playwright Page
    """The image is the page at its proportions, and each region on it is drawn inside the image where it lies."""
    image = page.locator(f"[data-testid={image_testid}]")
    assert f"/page/{shown_page}.png" in image.get_attribute("src")
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert abs(natural[0] / natural[1] - size[0] / size[1]) < 0.01
    on_page = [region for region in regions if region["page"] == shown_page]
    boxes = page.locator(f"[data-testid={box_testid}]")
    assert boxes.count() == len(on_page) >= 1
    frame = image.bounding_box()
    scale = frame["width"] / size[0]
    for index, region in enumerate(on_page):
        drawn = boxes.nth(index).bounding_box()
        assert frame["x"] - 1 <= drawn["x"] and drawn["x"] + drawn["width"] <= frame["x"] + frame["width"] + 1
        assert frame["y"] - 1 <= drawn["y"] and drawn["y"] + drawn["height"] <= frame["y"] + frame["height"] + 1
        assert drawn["x"] - frame["x"] == pytest.approx(region["x0"] * scale, abs=2)
        assert drawn["y"] - frame["y"] == pytest.approx(region["y0"] * scale, abs=2)


def _page_size(lake: Lake, paper_id: str, page_number: int) -> tuple[float, float]:
    parsed = lake.read_table("parsed_manuscripts", "sample").filter(pl.col("paper_id") == paper_id).row(0, named=True)
    return page_sizes_of(parsed)[page_number]


def _ledger_stamp(lake: Lake) -> list[tuple[str, int]]:
    return sorted((path.name, path.stat().st_mtime_ns) for path in (lake.root / "llm_calls").glob("*.parquet"))


def test_the_citance_browser_lists_every_citance_and_filters_in_place(web_server, browser_page, lake):
    page = browser_page
    page.goto(f"{web_server.url}/venues/sample")
    page.click("[data-testid=browse-citances]")
    citances = lake.read_table("citances", "sample")
    assert page.locator("[data-testid=citance-count]").inner_text() == f"{citances.height} citances match."
    page.evaluate("window.notReloaded = true")
    verdicts = lake.read_table("citation_verdicts", "sample")
    label = "Not Enough Information"
    expected = sorted(set(verdicts.filter(pl.col("label") == label)["citance_id"]))
    assert expected and len(expected) < citances.height, "the filter would show all or nothing"
    page.select_option("select[name=verdict]", label)
    page.wait_for_function("document.querySelector('[data-testid=citance-count]').innerText"
                           f".startsWith('{len(expected)} ')")
    rows = page.locator("[data-testid=citance-table] tr[data-citance-id]")
    assert sorted(rows.nth(i).get_attribute("data-citance-id") for i in range(rows.count())) == expected
    assert parse_qs(urlparse(page.url).query)["verdict"] == [label]  # the filter is in the address
    assert page.evaluate("window.notReloaded") is True  # htmx swapped the results; the page itself stayed
    resolved = lake.read_table("cited_papers", "sample").filter(pl.col("status") == "resolved")["entry_id"].to_list()
    citing_resolved = citances.filter(pl.col("entry_ids").list.eval(pl.element().is_in(resolved)).list.any())
    page.select_option("select[name=verdict]", "")
    page.select_option("select[name=cited]", "resolved")
    page.wait_for_function(
        f"document.querySelector('[data-testid=citance-count]').innerText.startsWith('{citing_resolved.height} ')")


def test_the_split_view_boxes_the_citance_and_the_evidence_on_their_pages_and_shows_the_verdict(
        web_server, browser_page, lake, showcase):
    page = browser_page
    citance, verdict = showcase["citance"], showcase["verdict"]
    before = _ledger_stamp(lake)
    page.goto(f"{web_server.url}/venues/sample/citances")
    page.click(f"tr[data-citance-id='{citance['citance_id']}'] a")
    page.wait_for_selector("[data-testid=split-view]")
    # left: the citing manuscript's page, the citance boxed where its regions lie
    first_page = min(region["page"] for region in citance["regions"])
    assert page.locator("[data-testid=citing-view]").get_attribute("data-page") == str(first_page)
    _assert_boxes_on(page, "citing-image", "citing-highlight", citance["regions"],
                     _page_size(lake, citance["paper_id"], first_page), first_page)
    # middle: the claim card with the markers, the cited entry and the verdict with its explanation
    card = page.locator("[data-testid=claim-card]")
    assert [page.locator("[data-testid=marker]").nth(i).inner_text()
            for i in range(page.locator("[data-testid=marker]").count())] == [m["text"] for m in citance["markers"]]
    entry_card = card.locator(f"[data-testid=cited-entry-card][data-entry-id='{showcase['entry_id']}']")
    assert "resolved" in entry_card.locator("[data-testid=resolution]").inner_text()
    shown = entry_card.locator(f"[data-testid=citation-verdict][data-verifier='{verdict['verifier']}']")
    assert verdict["label"] in shown.inner_text()
    if verdict["explanation"]:
        assert shown.locator("[data-testid=explanation]").inner_text() == " ".join(verdict["explanation"].split())
    # right: the cited paper's page (the sibling's PDF), the top passage boxed
    passages = showcase["passages"]
    if page.locator("[data-testid=cited-entry]").get_attribute("data-entry-id") != showcase["entry_id"]:
        entry_card.locator(".passage-link").first.click()
        page.wait_for_function(f"document.querySelector('[data-testid=cited-entry]').dataset.entryId == "
                               f"'{showcase['entry_id']}'")
    view = page.locator("[data-testid=cited-view]")
    assert view.get_attribute("data-passage-id") == passages[0]["passage_id"]
    top_page = min(region["page"] for region in passages[0]["regions"])
    _assert_boxes_on(page, "cited-image", "cited-highlight", passages[0]["regions"],
                     _page_size(lake, showcase["cited_paper"], top_page), top_page)
    assert page.locator("[data-testid=cited-passage]").inner_text() == " ".join(passages[0]["text"].split())
    # step to the next passage in place (htmx): the right pane alone changes
    if len(passages) > 1:
        page.evaluate("window.notReloaded = true")
        page.click("[data-testid=next-passage]")
        page.wait_for_function("document.querySelector('[data-testid=cited-view]').dataset.passageId == "
                               f"'{passages[1]['passage_id']}'")
        assert page.evaluate("window.notReloaded") is True
        assert page.locator("[data-testid=cited-highlight]").count() >= 1
        assert page.locator("[data-testid=previous-passage]").count() == 1
    assert _ledger_stamp(lake) == before  # the pages read the lake: no model call, nothing written to the ledger


def test_a_cited_paper_that_could_not_be_had_shows_the_reason(web_server, lake):
    cited = lake.read_table("cited_papers", "sample")
    missing = cited.filter(pl.col("status") != "resolved").row(0, named=True)
    citance = lake.read_table("citances", "sample").filter(
        pl.col("entry_ids").list.contains(missing["entry_id"])).row(0, named=True)
    client = web_server.client()
    url = f"/venues/sample/citances/{citance['citance_id']}/cited?entry={missing['entry_id']}"
    answer = client.get(url, headers={"HX-Request": "true"})
    assert answer.status_code == 200
    assert 'data-testid="cited-unavailable"' in answer.text and "the cited paper could not be had" in answer.text
    assert html.escape(missing["reason"][:60], quote=True) in answer.text
    assert 'data-testid="cited-view"' not in answer.text


def test_the_citation_pages_are_the_maintainers_and_an_unknown_citance_is_a_404(web_server):
    assert web_server.client().get("/venues/sample/citances/nope:c1").status_code == 404
    ann = annotator(web_server, "Cy")
    for path in ("/venues/sample/citances", "/venues/sample/citances/x:c1", "/venues/sample/citances/x:c1/cited"):
        answer = ann.get(path)
        assert answer.status_code == 403 and BLIND_MESSAGE in html.unescape(answer.text), path
