"""The sample venue's citation answer key agrees with its manuscripts: every citing sentence it lists is in the
source and in the PDF (inside one body block as the manuscript parser reads it), every cited entry exists and says
what the key says it is, sibling references carry the cited manuscript's exact title, and every evidence sentence is
in the cited paper. No sentence of a body paragraph bears a marker the key does not list.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import pytest
import yaml

from peerify_dagster.domain.citations.vocabulary import (
    CITATION_LABELS,
    NOT_ENOUGH_INFORMATION,
    NOT_SUPPORTED,
    PARTIALLY_SUPPORTED,
    SUPPORTED,
)
from peerify_dagster.resources.document_parser import DocumentParser
from peerify_dagster.sample_venue import CITATION_KEY_PATH, MANUSCRIPTS_DIR, SNAPSHOT_DIR
from peerify_dagster.sample_venue.markup import Manuscript, ReferenceList, load_manuscript
from tests.test_sample_venue import normalise, pdf_text

SIBLING_VENUE = "In PeerifySample Workshop, 2026."
NUMERIC_LABEL = re.compile(r"^\[(\d+)\] ")
# What is left of a body paragraph once the key's citing sentences are taken out must not look cited.
LEFTOVER_MARKER = re.compile(r"\[\d+(?:\s*[-,]\s*\d+)*\]|\(\s*[A-Z][a-z]+[^()]*\d{4}[a-z]?\s*\)")


@cache
def _key() -> dict[str, dict[str, Any]]:
    papers = yaml.safe_load(CITATION_KEY_PATH.read_text(encoding="utf-8"))["papers"]
    return {paper["forum"]: paper for paper in papers}


@cache
def _manuscript(forum_id: str) -> Manuscript:
    return load_manuscript(MANUSCRIPTS_DIR / f"{forum_id}.md")


def _entries(forum_id: str) -> tuple[str, ...]:
    (references,) = [block for block in _manuscript(forum_id).blocks if isinstance(block, ReferenceList)]
    return references.entries


def _body_paragraphs(forum_id: str) -> list[str]:
    return [paragraph for section, paragraphs in _manuscript(forum_id).paragraphs_by_section().items()
            if section != "Abstract" for paragraph in paragraphs]


def _citances() -> list[tuple[str, dict[str, Any]]]:
    return [(forum_id, citance) for forum_id, paper in _key().items() for citance in paper["citances"]]


def _cites() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(forum_id, citance, cited) for forum_id, citance in _citances() for cited in citance["cites"]]


def _numbers(marker: str) -> set[int]:
    """The numbers a numeric marker names: "[1, 3]" -> {1, 3}, "[2-4]" -> {2, 3, 4}."""
    numbers: set[int] = set()
    for part in marker.strip("[]").split(","):
        first, _, last = part.partition("-")
        numbers.update(range(int(first), int(last or first) + 1))
    return numbers


@pytest.fixture(scope="module")
def parsed_blocks() -> dict[str, list[Any]]:
    parser = DocumentParser()
    return {
        forum_id: parser.parse(SNAPSHOT_DIR / "pdfs" / f"{forum_id}.pdf", source_name=f"{forum_id}.pdf",
                               paper_id=forum_id).blocks
        for forum_id, paper in _key().items() if paper["pdf"]
    }


def test_key_covers_every_paper_and_every_verdict() -> None:
    venue = {path.stem for path in MANUSCRIPTS_DIR.glob("*.md")}
    assert set(_key()) == venue
    fetched = {path.stem for path in (SNAPSHOT_DIR / "pdfs").glob("*.pdf")}
    for forum_id, paper in _key().items():
        assert paper["pdf"] == (forum_id in fetched), forum_id
        assert 3 <= len(paper["citances"]) <= 6, forum_id
        assert paper["reference_style"] in ("numeric", "author_year"), forum_id
    assert {paper["reference_style"] for paper in _key().values()} == {"numeric", "author_year"}
    assert {citance["style"] for _, citance in _citances()} == {"numeric", "author_year", "narrative"}
    for forum_id, citance, cited in _cites():
        where = f"{forum_id}: {citance['text'][:40]}"
        assert cited["verdict"] in CITATION_LABELS, where
        if cited["kind"] == "outside":
            assert cited["verdict"] == NOT_ENOUGH_INFORMATION and "evidence" not in cited, where
        else:
            assert cited["kind"] == "sibling" and cited["forum"] in venue and cited["forum"] != forum_id, where
            # A sibling is judged on its text unless the snapshot lacks its PDF; then only its source decides.
            unavailable = not _key()[cited["forum"]]["pdf"]
            assert (cited["verdict"] == NOT_ENOUGH_INFORMATION) == unavailable, where
            assert ("source_verdict" in cited) == unavailable, where
    readable = [cited["verdict"] for forum_id, _, cited in _cites()
                if cited["kind"] == "sibling" and _key()[forum_id]["pdf"]]
    assert set(readable) == {SUPPORTED, PARTIALLY_SUPPORTED, NOT_SUPPORTED, NOT_ENOUGH_INFORMATION}


def test_citing_sentences_are_verbatim_in_their_section_with_their_markers() -> None:
    for forum_id, citance in _citances():
        paragraphs = _manuscript(forum_id).paragraphs_by_section().get(citance["section"])
        assert paragraphs, f"{forum_id}: no section {citance['section']!r}"
        # A whole sentence: it starts the paragraph or follows a finished one, and ends one.
        whole_sentence = re.compile(rf"(?:^|(?<=[.?!] )){re.escape(citance['text'])}(?= |$)")
        assert citance["text"].endswith(".") and \
            sum(len(whole_sentence.findall(paragraph)) for paragraph in paragraphs) == 1, citance["text"]
        assert citance["markers"] and all(marker in citance["text"] for marker in citance["markers"]), citance["text"]


def test_the_key_lists_every_cited_sentence_and_every_entry_is_cited() -> None:
    for forum_id, paper in _key().items():
        for paragraph in _body_paragraphs(forum_id):
            for citance in paper["citances"]:
                paragraph = paragraph.replace(citance["text"], "")
            assert not LEFTOVER_MARKER.search(paragraph), f"{forum_id}: {LEFTOVER_MARKER.search(paragraph)[0]!r}"
        cited = {cited["entry"] for citance in paper["citances"] for cited in citance["cites"]}
        assert cited == set(range(1, len(_entries(forum_id)) + 1)), forum_id


def test_cited_entries_exist_and_match_their_markers() -> None:
    for forum_id, paper in _key().items():
        entries = _entries(forum_id)
        assert len(entries) == paper["references"], forum_id
        numeric = paper["reference_style"] == "numeric"
        labels = [NUMERIC_LABEL.match(entry) for entry in entries]
        assert all(labels) if numeric else not any(labels), forum_id
        if numeric:
            assert [int(label[1]) for label in labels] == list(range(1, len(entries) + 1)), forum_id
        for citance in paper["citances"]:
            cites = citance["cites"]
            assert all(1 <= cited["entry"] <= len(entries) for cited in cites), citance["text"]
            if numeric:
                assert all(cited["label"] == str(cited["entry"]) for cited in cites), citance["text"]
                named = set().union(*(_numbers(marker) for marker in citance["markers"]))
                assert named == {cited["entry"] for cited in cites}, citance["text"]
            else:
                assert all(cited["label"] is None for cited in cites), citance["text"]
                # An author-year marker names the entry's first author and its year.
                markers = " ".join(citance["markers"])
                for cited in cites:
                    entry = entries[cited["entry"] - 1]
                    first_surname = re.match(r"^(?:[A-Z]\. )+(\w+)", entry)[1]
                    year = re.search(r"(\d{4})\.$", entry)[1]
                    assert re.search(rf"{first_surname}\b[^;()]*\(?{year}", markers), (citance["text"], entry)


def test_sibling_references_carry_the_cited_manuscripts_exact_title() -> None:
    for forum_id, citance, cited in _cites():
        entry = _entries(forum_id)[cited["entry"] - 1]
        if cited["kind"] == "sibling":
            assert f". {_manuscript(cited['forum']).title}. {SIBLING_VENUE}" in entry, entry
        else:
            assert SIBLING_VENUE not in entry, entry


def test_evidence_sentences_are_in_the_cited_papers_source_and_pdf() -> None:
    for forum_id, citance, cited in _cites():
        if cited["kind"] != "sibling":
            continue
        assert cited["evidence"], citance["text"]
        for evidence in cited["evidence"]:
            paragraphs = _manuscript(cited["forum"]).paragraphs_by_section().get(evidence["section"])
            assert paragraphs and any(evidence["text"] in paragraph for paragraph in paragraphs), evidence
            if _key()[cited["forum"]]["pdf"]:
                assert normalise(evidence["text"]) in pdf_text(cited["forum"]), evidence


def test_citing_sentences_are_in_the_pdf_text() -> None:
    for forum_id, citance in _citances():
        if _key()[forum_id]["pdf"]:
            assert normalise(citance["text"]) in pdf_text(forum_id), citance["text"]


def test_the_parser_keeps_each_citing_sentence_in_one_body_block_and_each_entry_in_its_own(
    parsed_blocks: dict[str, list[Any]],
) -> None:
    for forum_id, blocks in parsed_blocks.items():
        paper = _key()[forum_id]
        for citance in paper["citances"]:
            holders = [block for block in blocks if normalise(citance["text"]) in normalise(block.text)]
            assert [block.kind for block in holders] == ["paragraph"], (forum_id, citance["text"])
            assert holders[0].section_path[-1] == citance["section"], (forum_id, citance["text"])
        references = [normalise(block.text) for block in blocks if block.kind == "reference"]
        assert references == [normalise(entry) for entry in _entries(forum_id)], forum_id


def test_author_year_entries_hang(parsed_blocks: dict[str, list[Any]]) -> None:
    # Nothing numbers an author-year entry; its further lines are indented, as such lists are set.
    (forum_id,) = [forum_id for forum_id, paper in _key().items() if paper["reference_style"] == "author_year"]
    entries = [block for block in parsed_blocks[forum_id] if block.kind == "reference"]
    multi_line = [block.line_regions for block in entries if len(block.line_regions) > 1]
    assert multi_line, forum_id
    for lines in multi_line:
        assert all(line.x0 - lines[0].x0 > 10 for line in lines[1:]), forum_id  # 5 mm is about 14 points
