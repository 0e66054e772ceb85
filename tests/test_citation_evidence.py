"""Tests of domain/citations/evidence.py: sentence windows of a cited paper (counts, kinds, line boxes), window
length by claim type, ranking through the project's retrievers (bm25, hybrid with the real MiniLM model, a
reranker), the query a citance retrieves with, and the merged mode's passages and window check."""

from __future__ import annotations

import json

import pytest

from peerify_dagster.domain.citations.evidence import (
    DEFAULT_WINDOW_SENTENCES,
    LONG_WINDOW_SENTENCES,
    bm25_share,
    fits_window,
    merged_passages,
    no_relevant_passage_reason,
    prose_kind,
    query_of,
    rank_windows,
    sentence_windows,
    window_length,
)
from peerify_dagster.domain.citations.options import DEFAULT_RELEVANCE_FLOORS, CitationOptions, CitationOptionsError
from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.domain.layout.regions import LineRegion, Region, text_offset
from peerify_dagster.domain.predictions import CHARS_PER_TOKEN
from peerify_dagster.domain.prompts import format_passages
from peerify_dagster.domain.retrieval import PaperIndex
from peerify_dagster.resources.embedder import Embedder
from tests.real_data import REAL_DATA, needs

KEY = "sha256:cafe"
FIVE = ("We train on 1.4M PDFs from PubMed Central. The model is a two-layer bidirectional LSTM. "
        "Titles are extracted with 92.1% accuracy. Authors are harder, at 80.4% (see Fig. 2). "
        "Decoding uses the Viterbi algorithm.")


def block(kind: str, text: str, order: int, page: int = 1, regions: list[Region] | None = None,
          lines: list[LineRegion] | None = None) -> Block:
    return Block(kind, text, page, ["3 Extracting Metadata"], False, order, regions or [], lines or [])


def test_windows_of_n_consecutive_sentences_stride_one_inside_each_paragraph() -> None:
    windows = sentence_windows(KEY, [block("paragraph", FIVE, 7)], 3)

    assert [w.passage_id for w in windows] == [f"{KEY}:w7.0-2", f"{KEY}:w7.1-3", f"{KEY}:w7.2-4"]
    assert windows[0].text == ("We train on 1.4M PDFs from PubMed Central. The model is a two-layer bidirectional "
                               "LSTM. Titles are extracted with 92.1% accuracy.")
    assert windows[2].text == ("Titles are extracted with 92.1% accuracy. Authors are harder, at 80.4% (see Fig. 2). "
                               "Decoding uses the Viterbi algorithm.")
    assert all(FIVE[w.char_start:w.char_end] == w.text for w in windows)
    assert {(w.sentence_count, w.window_sentences, w.block_order) for w in windows} == {(3, 3, 7)}
    # A window as long as the paragraph is the paragraph; a longer one too (one window, all its sentences).
    assert [w.text for w in sentence_windows(KEY, [block("paragraph", FIVE, 7)], 5)] == [FIVE]
    short = sentence_windows(KEY, [block("abstract", "One result. Another result.", 0)], 3)
    assert [(w.passage_id, w.sentence_count, w.window_sentences) for w in short] == [(f"{KEY}:w0.0-1", 2, 3)]


def test_windows_never_cross_paragraphs_and_leave_out_everything_but_prose() -> None:
    blocks = [
        block("title", "Construction of the Literature Graph in Semantic Scholar", 0),
        block("abstract", "We describe a deployed system. It organises the literature.", 1),
        block("heading", "3 Extracting Metadata", 2),
        block("paragraph", "First paragraph ends here. It has two sentences.", 3),
        block("caption", "Table 1: Results of metadata extraction. Higher is better.", 4),
        block("table", "Field Precision Recall\nTitle 0.921 0.902", 5),
        block("figure", "LSTM CRF tokens", 6),
        block("paragraph", "Second paragraph. Also two sentences.", 7),
        block("reference", "Ammar, W. et al. 2018. Construction of the literature graph. In NAACL.", 8),
        block("checklist", "Did you report error bars? Yes. See Section 4.", 9),
    ]
    windows = sentence_windows(KEY, blocks, 2)

    assert [w.block_order for w in windows] == [1, 3, 7]
    assert not any("Ammar" in w.text or "Table 1" in w.text or "error bars" in w.text for w in windows)
    # A window spanning the two paragraphs would hold "two sentences. Second paragraph".
    assert not any("sentences. Second" in w.text for w in windows)


def test_windows_are_placed_on_the_lines_of_their_own_sentences() -> None:
    sentences = ["Alpha is first here.", "Beta comes second.", "Gamma runs onto page two.", "Delta ends it."]
    text = " ".join(sentences)
    boxes = [Region(1, 72, 600, 288, 610), Region(1, 72, 611, 288, 621), Region(2, 72, 80, 288, 90),
             Region(2, 72, 91, 288, 101)]
    # One line per sentence; a line starts at the non-whitespace characters before it.
    lines = [LineRegion.of(text_offset(" ".join(sentences[:index])), box) for index, box in enumerate(boxes)]
    paragraph = block("paragraph", text, 4, regions=[Region(1, 72, 600, 288, 621), Region(2, 72, 80, 288, 101)],
                      lines=lines)

    first, across, last = sentence_windows(KEY, [paragraph], 2)

    assert first.regions == (Region(1, 72, 600, 288, 621),)  # two touching lines of one column: one box
    assert across.regions == (Region(1, 72, 611, 288, 621), Region(2, 72, 80, 288, 90))
    assert (first.page, across.page, last.page) == (1, 1, 2)
    assert last.regions == (Region(2, 72, 80, 288, 101),)
    # Without line boxes, a window has its block's boxes and page.
    unplaced = sentence_windows(KEY, [block("paragraph", text, 4, page=3, regions=[Region(3, 1, 2, 3, 4)])], 2)
    assert {w.regions for w in unplaced} == {(Region(3, 1, 2, 3, 4),)} and {w.page for w in unplaced} == {3}


@pytest.mark.parametrize(("claim_type", "expected"), [
    ("causal", LONG_WINDOW_SENTENCES), ("predictive", LONG_WINDOW_SENTENCES),
    ("comparative", DEFAULT_WINDOW_SENTENCES), ("quantitative", DEFAULT_WINDOW_SENTENCES),
    ("descriptive", DEFAULT_WINDOW_SENTENCES), (None, DEFAULT_WINDOW_SENTENCES),
])
def test_window_length_is_longer_for_causal_and_predictive_claims(claim_type, expected) -> None:
    assert window_length(claim_type) == expected
    assert LONG_WINDOW_SENTENCES > DEFAULT_WINDOW_SENTENCES


# A small cited paper: one paragraph holds the evidence of the citance, the others are near misses.
CITED = [
    block("abstract", "We describe ScienceParse, a system that extracts titles, authors and references from PDFs. "
                      "It is used in a literature graph of 280M nodes.", 0),
    block("paragraph", "Training data comes from PubMed Central. It consists of 1.4M PDFs and their metadata. "
                       "A heuristic labelling process aligns metadata strings with tokens.", 1),
    block("paragraph", "Entity linking uses a statistical model. Candidates come from a knowledge base. "
                       "The hybrid approach gives better results than rules.", 2),
    block("paragraph", "At test time we use Viterbi decoding. Titles are the longest run of title tokens. "
                       "Authors are every run of author tokens.", 3),
]
CITANCE = "ScienceParse was trained on 1.4M PDFs from PubMed Central [4]."


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def test_bm25_ranks_the_window_holding_the_evidence_first() -> None:
    windows = sentence_windows(KEY, CITED, 2)
    query = query_of(CITANCE, [(CITANCE.index("[4]"), CITANCE.index("[4]") + 3)])

    ranked = rank_windows(windows, query, "bm25", None, None, k=3)

    assert ranked[0][0].passage_id == f"{KEY}:w1.0-1"
    assert "1.4M PDFs" in ranked[0][0].text
    assert len(ranked) == 3 and all(a[1] >= b[1] for a, b in zip(ranked, ranked[1:]))
    assert rank_windows([], query, "bm25", None, None, k=3) == []


def test_hybrid_and_dense_rank_windows_with_real_embeddings(embedder: Embedder) -> None:
    windows = sentence_windows(KEY, CITED, 2)
    query = query_of(CITANCE, [(CITANCE.index("[4]"), CITANCE.index("[4]") + 3)])
    vectors = embedder.embed([w.text for w in windows])
    query_vector = embedder.embed([query])[0]

    hybrid = rank_windows(windows, query, "hybrid", vectors, query_vector, k=2)
    # With the floor below any cosine, dense ranks every window.
    dense = rank_windows(windows, query, "dense", vectors, query_vector, k=len(windows), floors={"dense": -1.0})

    assert "1.4M PDFs" in hybrid[0][0].text and len(hybrid) == 2
    # Reciprocal-rank fusion of two rankings: a score of at most 2 / (60 + 1).
    assert 0 < hybrid[0][1] <= 2 / 61
    assert "1.4M PDFs" in dense[0][0].text
    assert sorted(w.passage_id for w, _ in dense) == sorted(w.passage_id for w in windows)
    with pytest.raises(ValueError, match="embeddings"):
        rank_windows(windows, query, "dense", None, query_vector, k=2)


def test_a_reranker_reorders_and_a_reranked_retriever_needs_one() -> None:
    windows = sentence_windows(KEY, CITED, 2)

    def prefers_viterbi(query: str, passages: list[str]) -> list[float]:
        return [float("Viterbi" in passage) for passage in passages]

    ranked = rank_windows(windows, "titles authors PDFs", "bm25+rerank", None, None, k=2, reranker=prefers_viterbi)
    plain = rank_windows(windows, "titles authors PDFs", "bm25", None, None, k=2)

    assert "Viterbi" in ranked[0][0].text and "Viterbi" not in plain[0][0].text
    with pytest.raises(ValueError, match="bm25\\+rerank.*reranker"):
        rank_windows(windows, "titles", "bm25+rerank", None, None, k=2)
    with pytest.raises(ValueError, match="unknown retriever"):
        rank_windows(windows, "titles", "tf-idf", None, None, k=2)


@needs(REAL_DATA / "pdfs")
def test_real_cited_paper_windows_rank_the_training_data_passage_first(embedder: Embedder) -> None:
    """N18-3011 (the Semantic Scholar literature graph paper, which the S2ORC paper cites) as GROBID parsed it; the
    citing sentence is written for the test, the cited paper's text is the real one."""
    parse = json.loads((REAL_DATA / "pdfs" / "N18-3011.json").read_text())["pdf_parse"]
    paragraphs = [p["text"] for p in parse["body_text"] if p["section"] == "Extracting Metadata"]
    blocks = [block("paragraph", text, order) for order, text in enumerate(paragraphs)]
    windows = sentence_windows(KEY, blocks, window_length("descriptive"))
    citance = "The ScienceParse system was trained on 1.4M PDFs of PubMed Central (Ammar et al., 2018)."
    marker = citance.index("(Ammar")
    query = query_of(citance, [(marker, citance.index(")", marker) + 1)])
    vectors = embedder.embed([w.text for w in windows])

    for name in ("bm25", "hybrid"):
        ranked = rank_windows(windows, query, name, vectors, embedder.embed([query])[0], k=3)
        assert "1.4M PDFs" in ranked[0][0].text, name


def spans(text: str, *markers: str) -> list[tuple[int, int]]:
    return [(text.index(marker), text.index(marker) + len(marker)) for marker in markers]


def test_query_drops_markers_and_weighs_the_clause_of_its_own_entry() -> None:
    numeric = "A improves B [1], while C harms D [2]."
    both = spans(numeric, "[1]", "[2]")
    assert query_of(numeric, both) == "A improves B, while C harms D."
    assert query_of(numeric, both, [both[0]]) == "A improves B, while C harms D. A improves B"
    assert query_of(numeric, both, [both[1]]) == "A improves B, while C harms D. while C harms D."

    narrative = "Smith et al. (2020) show that dropout helps, whereas Lee (2021) find it hurts."
    names = spans(narrative, "Smith et al. (2020)", "Lee (2021)")
    assert query_of(narrative, names, [names[0]]).endswith(". show that dropout helps")

    grouped = "Transformers scale well (Smith 2019; Lee 2020), but RNNs do not (Wu 2021)."
    keys = spans(grouped, "Smith 2019", "Lee 2020", "Wu 2021")
    assert query_of(grouped, keys) == "Transformers scale well, but RNNs do not."
    # A semicolon inside a group of markers cuts no clause.
    assert query_of(grouped, keys, [keys[0]]) == "Transformers scale well, but RNNs do not. Transformers scale well"
    # Every marker of the sentence cites this entry: nothing to weigh.
    assert query_of("Dropout helps [3, 7-9].", spans("Dropout helps [3, 7-9].", "[3, 7-9]")) == "Dropout helps."


def test_merged_passages_are_the_body_blocks_in_reading_order() -> None:
    blocks = [
        block("paragraph", "Second paragraph.", 5), block("title", "A title", 0), block("abstract", "Abstract.", 1),
        block("heading", "1 Intro", 2), block("caption", "Table 1: Results.", 3), block("table", "a b\n1 2", 4),
        block("figure", "axis label", 6), block("reference", "Smith 2020.", 7), block("checklist", "Yes.", 8),
    ]
    assert merged_passages(KEY, blocks) == [(f"{KEY}:b1", "Abstract."), (f"{KEY}:b3", "Table 1: Results."),
                                            (f"{KEY}:b4", "a b\n1 2"), (f"{KEY}:b5", "Second paragraph.")]


def test_fits_window_counts_the_passages_as_shown_against_what_the_window_leaves() -> None:
    template = "t" * (100 * CHARS_PER_TOKEN)  # 100 tokens of prompt
    body = "x" * (800 * CHARS_PER_TOKEN - len(format_passages([("p", "")])))
    fit = fits_window([("p", body)], context_window=1000, max_output_tokens=100, template_text=template)
    assert fit and fit.needed_tokens == 800 and fit.available_tokens == 800 and fit.reason is None

    over = fits_window([("p", body + "x")], context_window=1000, max_output_tokens=100, template_text=template)
    assert not over and over.needed_tokens == 801
    assert "801 tokens" in over.reason and "800 tokens" in over.reason
    # Every passage's id is counted too: the same text in two passages needs more.
    assert fits_window([("p1", body[:10]), ("p2", body[10:])], 1000, 100, template).needed_tokens > 800
    assert fits_window([], 1000, None, "").available_tokens == 1000


# -- prose only, a relevance floor, a window of the citance's own claim (issue 34) ---------------------------------
TABLE_DUMP = ("Method Recall@5 Precision Spikes Perplexity Dropout Noise 0.81 0.77 14 24.6 0.1 6.2 0.84 0.79 2 24.1 "
              "0.2 11.4 0.86 0.80 3 24.3 0.3 17.9 0.88 0.82 4 24.0 0.1 8.8")
CODE_DUMP = ("def train(model, data): for batch in data: loss = model(batch); loss.backward(); optimizer.step(); "
             "return model.eval()")
RESULTS = ("At 124M parameters the clipping rule cuts loss spikes from 14 to 2, and perplexity improves from 24.6 "
           "to 24.1.")
CLIPPING_PAPER = [
    block("abstract", "Loss spikes waste compute in language model pre-training. We clip the gradient norm at a "
                      "running quantile of its recent history.", 0),
    block("paragraph", TABLE_DUMP, 1),
    block("paragraph", "Label noise in web-scraped image datasets comes mostly from fine-grained confusions. "
                       "We relabel a sample of every dataset by hand and estimate noise rates of 6 to 18 percent.", 2),
    block("paragraph", RESULTS + " Dropout of 0.1 is used throughout.", 3),
    block("paragraph", CODE_DUMP, 4),
]


def test_tables_and_code_read_as_paragraphs_are_their_own_kinds_and_never_windows() -> None:
    assert [prose_kind(b) for b in CLIPPING_PAPER] == ["abstract", "table", "paragraph", "paragraph", "code"]
    # A results sentence full of figures is still prose; a short line is too short to judge.
    assert prose_kind(block("paragraph", RESULTS, 0)) == "paragraph"
    assert prose_kind(block("paragraph", "Table 2 0.81 0.77", 0)) == "paragraph"

    windows = sentence_windows(KEY, CLIPPING_PAPER, 3)

    assert sorted({w.block_order for w in windows}) == [0, 2, 3]
    # The merged mode still shows the paper whole, the table's numbers included.
    assert f"{KEY}:b1" in dict(merged_passages(KEY, CLIPPING_PAPER))


def test_different_claims_get_different_windows_and_no_table_dump(embedder: Embedder) -> None:
    windows = sentence_windows(KEY, CLIPPING_PAPER, 2)
    vectors = embedder.embed([w.text for w in windows])
    claims = {"spikes": "Quantile clipping cuts loss spikes from 14 to 2 and improves perplexity [3].",
              "noise": "Web-scraped image datasets have label noise of 6 to 18 percent [3]."}
    tops = {}
    for name, citance in claims.items():
        query = query_of(citance, spans(citance, "[3]"))
        ranked = rank_windows(windows, query, "hybrid", vectors, embedder.embed([query])[0], k=3)
        assert all(w.block_order in (0, 2, 3) for w, _ in ranked), name
        tops[name] = ranked[0][0]
    assert "loss spikes from 14 to 2" in tops["spikes"].text
    assert "fine-grained confusions" in tops["noise"].text


# Shares two words with the cited paper ("statistical model"), nothing of its content.
OFF_TOPIC = "A statistical model predicts protein structures from amino-acid sequences [7]."


@pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
def test_a_claim_the_cited_paper_does_not_address_gets_no_window(embedder: Embedder, retriever: str) -> None:
    windows = sentence_windows(KEY, CITED, 2)
    vectors = embedder.embed([w.text for w in windows])
    off = query_of(OFF_TOPIC, spans(OFF_TOPIC, "[7]"))
    on = query_of(CITANCE, spans(CITANCE, "[4]"))

    assert rank_windows(windows, off, retriever, vectors, embedder.embed([off])[0], k=3) == []
    kept = rank_windows(windows, on, retriever, vectors, embedder.embed([on])[0], k=3)
    assert kept and "1.4M PDFs" in kept[0][0].text
    # A venue's floor of 0 lets every window through again: the floor, not the retriever, cut them.
    assert rank_windows(windows, off, retriever, vectors, embedder.embed([off])[0], k=3,
                        floors={"bm25": 0.0, "dense": -1.0})


def test_the_no_relevant_passage_reason_names_each_floor_the_retriever_is_held_to() -> None:
    assert no_relevant_passage_reason("hybrid") == (
        f"no window of the cited paper clears the hybrid relevance floor (bm25 {DEFAULT_RELEVANCE_FLOORS['bm25']:g} "
        f"or dense {DEFAULT_RELEVANCE_FLOORS['dense']:g})")
    assert no_relevant_passage_reason("bm25+rerank", {"bm25": 0.2}).endswith("(bm25 0.2)")


def test_bm25_share_reads_the_same_for_a_one_window_paper() -> None:
    one = [block("paragraph", "Training data comes from PubMed Central. It consists of 1.4M PDFs.", 0)]
    [window] = sentence_windows(KEY, one, 3)
    index = PaperIndex(KEY, [window.passage_id], [window.text])
    on = query_of(CITANCE, spans(CITANCE, "[4]"))

    # Raw BM25 of a one-window paper is near zero (every idf is log(1 + 0.5 / 1.5)); its share is not.
    assert DEFAULT_RELEVANCE_FLOORS["bm25"] < bm25_share(index, on)[0] <= 1
    assert bm25_share(index, "amino acid sequences")[0] == 0
    assert [w for w, _ in rank_windows([window], on, "bm25", None, None, k=3)] == [window]


def test_the_relevance_floor_is_a_venue_option() -> None:
    assert CitationOptions().relevance_floor == DEFAULT_RELEVANCE_FLOORS
    assert CitationOptions.from_mapping({"relevance_floor": {"dense": 0.6}}).relevance_floor == {
        **DEFAULT_RELEVANCE_FLOORS, "dense": 0.6}
    for bad in ({"hybrid": 0.1}, {"bm25": "high"}, [0.1]):
        with pytest.raises(CitationOptionsError, match="relevance_floor maps a retriever of"):
            CitationOptions.from_mapping({"relevance_floor": bad})
