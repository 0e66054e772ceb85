"""Chunk invariants: stable ids, bounded sizes, intact sentences, section-aware merging."""

from __future__ import annotations

import hashlib
import statistics

import pytest

from peerify_dagster.domain.chunking import chunk_document, chunk_stats, split_sentences
from peerify_dagster.domain.layout import Block
from peerify_dagster.resources.document_parser import DocumentParser
from tests import fixtures_pdf


def _block(kind: str, text: str, section: list[str], order: int, in_appendix: bool = False, page: int = 1) -> Block:
    return Block(kind, text, page, section, in_appendix, order)


def _sentences(count: int, words_each: int, label: str) -> list[str]:
    filler = " ".join(["word"] * max(words_each - 3, 1))
    return [f"{label} sentence {index} {filler}." for index in range(count)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We use BM25, e.g. in Fig. 3. It works.", ["We use BM25, e.g. in Fig. 3.", "It works."]),
        ("Smith et al. (2020) agree, i.e. it holds. Next one.", ["Smith et al. (2020) agree, i.e. it holds.", "Next one."]),
        ("The gain is 3.5 points in Sec. 3 of the paper. Done!", ["The gain is 3.5 points in Sec. 3 of the paper.", "Done!"]),
        ("J. Smith wrote it. Really? Yes.", ["J. Smith wrote it.", "Really?", "Yes."]),
    ],
)
def test_sentence_splitter_respects_abbreviations_and_decimals(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_long_paragraph_splits_between_sentences_within_bounds() -> None:
    sentences = _sentences(30, 20, "Long")
    blocks = [_block("paragraph", " ".join(sentences), ["2 Method"], 0)]
    chunks = chunk_document("p1", blocks, target_words=130, max_words=220, min_words=25)
    assert len(chunks) > 1
    assert all(25 <= chunk.word_count <= 220 for chunk in chunks)
    # Every sentence sits whole in exactly one chunk, and nothing is lost or reordered.
    for sentence in sentences:
        assert sum(sentence in chunk.text for chunk in chunks) == 1
    assert " ".join(chunk.text for chunk in chunks) == " ".join(sentences)


def test_single_overlong_sentence_is_cut_between_words() -> None:
    sentence = " ".join(f"w{index}" for index in range(500)) + "."
    chunks = chunk_document("p1", [_block("paragraph", sentence, ["1 Intro"], 0)], max_words=220)
    assert all(chunk.word_count <= 220 for chunk in chunks)
    assert " ".join(chunk.text for chunk in chunks) == sentence


def test_tiny_fragments_merge_within_a_section_only() -> None:
    blocks = [
        _block("heading", "1 Intro", ["1 Intro"], 0),
        _block("paragraph", " ".join(_sentences(3, 20, "Intro")), ["1 Intro"], 1),
        _block("paragraph", "A short tail.", ["1 Intro"], 2),
        _block("heading", "2 Method", ["2 Method"], 3),
        _block("paragraph", "Tiny method note.", ["2 Method"], 4),
    ]
    chunks = chunk_document("p1", blocks)
    assert [chunk.section for chunk in chunks] == ["1 Intro", "2 Method"]
    assert chunks[0].text.endswith("A short tail.")
    assert chunks[1].text == "Tiny method note."


def test_kinds_follow_blocks_and_headings_are_not_chunks() -> None:
    long_text = " ".join(_sentences(2, 20, "Body"))
    blocks = [
        _block("title", "A Title", [], 0),
        _block("abstract", long_text, ["Abstract"], 1),
        _block("table", "Model | F1\n" + "\n".join(f"M{index} | {index}.0 | {index}.5 | {index}.9" for index in range(8)), ["3 Results"], 2),
        _block("caption", "Table 1: " + long_text, ["3 Results"], 3),
        _block("reference", "[1] " + long_text, ["References"], 4),
        _block("paragraph", long_text, ["A Proofs"], 5, in_appendix=True),
    ]
    chunks = chunk_document("p1", blocks)
    assert [chunk.kind for chunk in chunks] == ["abstract", "table", "caption", "reference", "appendix"]
    assert not any(chunk.text == "A Title" for chunk in chunks)


def test_ids_are_stable_and_derived_from_order_and_text() -> None:
    blocks = [_block("paragraph", " ".join(_sentences(12, 20, "Stable")), ["1 Intro"], 0)]
    first, second = chunk_document("paper-7", blocks), chunk_document("paper-7", blocks)
    assert [chunk.chunk_id for chunk in first] == [chunk.chunk_id for chunk in second]
    for chunk in first:
        digest = hashlib.sha256(chunk.text.encode("utf-8")).hexdigest()
        assert chunk.text_sha256 == digest
        assert chunk.chunk_id == f"paper-7:{chunk.order:04d}:{digest[:12]}"
    assert len({chunk.chunk_id for chunk in first}) == len(first)


def test_chunks_of_a_parsed_pdf_keep_sentences_and_sections() -> None:
    document = DocumentParser().parse(fixtures_pdf.structured_paper(), "structured.pdf")
    chunks = chunk_document(document.paper_id, document.blocks)
    again = chunk_document(document.paper_id, DocumentParser().parse(fixtures_pdf.structured_paper(), "structured.pdf").blocks)
    assert [chunk.chunk_id for chunk in chunks] == [chunk.chunk_id for chunk in again]
    assert all(chunk.text.strip() for chunk in chunks)
    for sentence in fixtures_pdf.CROSS_PAGE_SENTENCES:
        holders = [chunk for chunk in chunks if sentence in chunk.text]
        assert len(holders) == 1 and holders[0].section == "2 Method"
    reference_chunks = [chunk for chunk in chunks if chunk.kind == "reference"]
    assert reference_chunks and all(chunk.section == "References" for chunk in reference_chunks)
    stats = chunk_stats(chunks)
    assert stats["n_chunks"] == len(chunks) and stats["n_empty"] == 0 and stats["n_runaway"] == 0
    assert max(chunk.word_count for chunk in chunks) <= 220


def test_chunk_stats_reports_the_distribution() -> None:
    blocks = [
        _block("paragraph", " ".join(["w"] * size) + ".", [f"{index} S"], index)
        for index, size in enumerate([30, 40, 50, 60, 400])
    ]
    chunks = chunk_document("p1", blocks, max_words=220)
    stats = chunk_stats(chunks, max_words=220)
    sizes = sorted(chunk.word_count for chunk in chunks)
    assert stats["n_chunks"] == len(chunks)
    assert stats["median_words"] == statistics.median(sizes)
    assert stats["mean_words"] == pytest.approx(sum(sizes) / len(sizes))
    assert sizes[0] <= stats["p90_words"] <= sizes[-1]
    assert stats["n_empty"] == 0 and stats["n_runaway"] == 0
    runaway = chunk_stats(chunks, max_words=20)
    assert runaway["n_runaway"] == sum(1 for size in sizes if size > 30)
