"""Where in a cited paper a citing sentence's claim is checked: sentence windows, their ranking, the query, and the
merged mode (the cited paper whole).

Two modes, as RefVerifier has them:

* `windows` (two-stage): the cited paper's prose is cut into windows of N consecutive sentences (stride 1, never
  across a paragraph), longer for causal and predictive claims (`window_length`); the windows are ranked for the
  citance by the project's own retrievers (`domain/retrieval.py`: bm25, dense, hybrid, each optionally reranked),
  and the top k are shown to the verifier.
* `merged`: every body block of the cited paper in one call, when it fits the verifier's window (`fits_window`,
  with the predictions' own token estimate).

Which blocks: windows come from prose only, the abstract and the paragraphs (main text and appendix); titles,
author lines, headings, captions, tables, text drawn in figures, reference entries and checklists are left out (a
caption or a table row is not a run of sentences, and reference entries would match the citance's own words).
A paragraph block whose text is a table's cells or code (a parser that misses a float or a listing reads it as a
paragraph) is given its own kind, `table` or `code` (`prose_kind`), and never mixed into prose windows. The merged
mode shows the paper as the verifier would read it, so it keeps captions and tables (results live there) and leaves
out only what is not the paper's own statement: title, author lines, headings, figure text, reference entries and
checklists.

Relevance: a window is shown only when it clears the retriever's relevance floor (`DEFAULT_RELEVANCE_FLOORS`); when
the cited paper has prose but no window clears it, the pair's status is `no_relevant_passage` and the verdict stage
answers Not Enough Information without a call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from peerify_dagster.domain.citations.options import DEFAULT_RELEVANCE_FLOORS
from peerify_dagster.domain.citations.sentences import split_sentences
from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.domain.layout.lines import NUMERIC_TOKEN
from peerify_dagster.domain.layout.regions import Region, regions_of_span
from peerify_dagster.domain.predictions import estimated_tokens, prompt_window
from peerify_dagster.domain.prompts import format_passages
from peerify_dagster.domain.retrieval import RETRIEVER_CONFIGS, PaperIndex, PassageScorer, build_retrievers, tokenize

# citation_evidence's statuses: passages shown; the cited paper's full text could not be had; it has no prose; it
# has prose but no window clears the relevance floor (no_relevant_passage).

WINDOW_KINDS = frozenset({"abstract", "paragraph"})
# A prose block read again: a table dump has mostly numbers among its words, code mostly assignments, calls and
# braces. Shares, not counts, so a results sentence with a few figures ("from 24.6 to 24.1") stays prose.
_CODE_TOKEN = re.compile(r"[={}]|^\w+(?:\.\w+)*\(|^(?:def|return|import|lambda|elif|print|var|const|#include)$")
TABLE_NUMERIC_SHARE = 0.4
CODE_TOKEN_SHARE = 0.2
MIN_TOKENS_TO_JUDGE = 6

NO_RELEVANT_PASSAGE_REASON = "no window of the cited paper clears the {retriever} relevance floor ({floors})"
MERGED_KINDS = frozenset({"abstract", "paragraph", "caption", "table"})

DEFAULT_WINDOW_SENTENCES = 3
# A causal ("X causes Y") or predictive ("X will improve Y") claim is rarely settled by one sentence of the cited
# paper: its support is a setup, a result and the authors' reading of it (the mechanism, the condition under which it
# holds), which a results paragraph spreads over several sentences; a descriptive, comparative or quantitative claim
# usually rests on one sentence and its neighbours. RefVerifier widens the window for these two types; five sentences
# keep such a paragraph's argument in one window while a window still fits many times into a verifier's prompt.
LONG_WINDOW_SENTENCES = 5
LONG_WINDOW_CLAIM_TYPES = frozenset({"causal", "predictive"})

@dataclass(frozen=True)
class Window:
    """Consecutive sentences of one prose block of a cited paper.

    `passage_id` is `<cited_key>:w<block order>.<first sentence>-<last sentence>` (0-based sentence positions in the
    block, both included), unique among every window of the paper whatever their lengths; `window_sentences` is the
    length asked for (`window_length`); `sentence_count` what the window holds (fewer in a shorter paragraph);
    `char_start` / `char_end` its offsets in the block's text; `regions` the boxes of the lines it lies on (the whole
    block's boxes when the block was not placed line by line); `page` the page it starts on."""

    passage_id: str
    cited_key: str
    text: str
    page: int
    regions: tuple[Region, ...]
    block_order: int
    first_sentence: int
    sentence_count: int
    window_sentences: int
    char_start: int
    char_end: int


def window_length(claim_type: str | None) -> int:
    """Sentences per window for a claim of this type: LONG_WINDOW_SENTENCES for causal and predictive claims,
    DEFAULT_WINDOW_SENTENCES otherwise (an unknown or missing type included)."""
    return LONG_WINDOW_SENTENCES if claim_type in LONG_WINDOW_CLAIM_TYPES else DEFAULT_WINDOW_SENTENCES


def prose_kind(block: Block) -> str:
    """The block's kind as a window sees it: `table` for a paragraph or abstract whose words are mostly numbers, `code`
    for one whose words are mostly code tokens, else the block's own kind."""
    if block.kind not in WINDOW_KINDS:
        return block.kind
    tokens = block.text.split()
    if len(tokens) < MIN_TOKENS_TO_JUDGE:
        return block.kind
    if sum(bool(NUMERIC_TOKEN.match(token)) for token in tokens) >= TABLE_NUMERIC_SHARE * len(tokens):
        return "table"
    if sum(bool(_CODE_TOKEN.search(token)) for token in tokens) >= CODE_TOKEN_SHARE * len(tokens):
        return "code"
    return block.kind


def sentence_windows(cited_key: str, blocks: Sequence[Block], window_sentences: int) -> list[Window]:
    """Every window of `window_sentences` consecutive sentences (stride 1) inside each prose block (abstract and
    paragraph, `prose_kind`) of the cited paper, in reading order; a block with fewer sentences is one window. Other
    kinds, tables and code read as paragraphs included, are left out (see the module docstring)."""
    if window_sentences < 1:
        raise ValueError(f"window_sentences must be at least 1, got {window_sentences}")
    windows: list[Window] = []
    for block in sorted(blocks, key=lambda item: item.order):
        if prose_kind(block) not in WINDOW_KINDS:
            continue
        spans = split_sentences(block.text)
        # Stride 1; a paragraph with fewer sentences than the window is one window.
        for first in range(max(len(spans) - window_sentences + 1, 1) if spans else 0):
            chosen = spans[first:first + window_sentences]
            start, end = chosen[0][0], chosen[-1][1]
            regions = tuple(regions_of_span(block.text, block.line_regions, start, end, block.regions))
            last = first + len(chosen) - 1
            windows.append(Window(
                passage_id=f"{cited_key}:w{block.order}.{first}-{last}", cited_key=cited_key,
                text=block.text[start:end], page=regions[0].page if regions else block.page, regions=regions,
                block_order=block.order, first_sentence=first, sentence_count=len(chosen),
                window_sentences=window_sentences, char_start=start, char_end=end,
            ))
    return windows


def floor_retrievers(retriever_name: str) -> tuple[str, ...]:
    """The base retrievers whose floors a window of `retriever_name` must clear one of: hybrid's two, else its own
    base's (a reranked configuration's base)."""
    base = RETRIEVER_CONFIGS[retriever_name].base().name
    return ("bm25", "dense") if base == "hybrid" else (base,)


def no_relevant_passage_reason(retriever_name: str, floors: Mapping[str, float] | None = None) -> str:
    """Why a ranking came back empty although the cited paper has prose windows, naming the floors."""
    chosen = {**DEFAULT_RELEVANCE_FLOORS, **(floors or {})}
    shown = " or ".join(f"{name} {chosen[name]:g}" for name in floor_retrievers(retriever_name))
    return NO_RELEVANT_PASSAGE_REASON.format(retriever=retriever_name, floors=shown)


def bm25_share(index: PaperIndex, query_text: str) -> np.ndarray:
    """Per window, its BM25 score as a share of the most the query could score in this paper (every query term at
    full saturation, idf * (k1 + 1); a term the paper never uses at the idf of a term in no window). Raw BM25 grows
    with the paper's length through idf, and a one-window paper scores its best window near zero; the share reads
    the same for a short paper and a long one."""
    tokens = tokenize(query_text)
    if not tokens or not index.bm25.avgdl:
        return np.zeros(len(index))
    bm25 = index.bm25
    unseen_idf = math.log(1.0 + (bm25.corpus_size + 0.5) / 0.5)
    attainable = sum(bm25.idf.get(token, unseen_idf) for token in tokens) * (bm25.k1 + 1)
    return np.asarray(bm25.get_scores(tokens)) / attainable


def _clears_floor(index: PaperIndex, query_text: str, query_vector: np.ndarray | None, retriever_name: str,
                  floors: Mapping[str, float]) -> np.ndarray:
    """Per window, whether it clears the floor of one of the retriever's bases (`floor_retrievers`)."""
    clears = np.zeros(len(index), dtype=bool)
    for name in floor_retrievers(retriever_name):
        if name == "bm25":
            clears |= bm25_share(index, query_text) >= floors["bm25"]
        elif name == "dense" and index.embeddings is not None and query_vector is not None:
            clears |= index.embeddings @ np.asarray(query_vector, dtype=np.float32) >= floors["dense"]
    return clears


def rank_windows(
    windows: Sequence[Window],
    query_text: str,
    retriever_name: str,
    window_vectors: np.ndarray | None,
    query_vector: np.ndarray | None,
    k: int,
    reranker: PassageScorer | None = None,
    floors: Mapping[str, float] | None = None,
) -> list[tuple[Window, float]]:
    """The top `k` windows for the query with the named retriever configuration of `RETRIEVER_CONFIGS` (the windows
    are the passages of a `PaperIndex`, so bm25 / dense / hybrid and their reranked variants rank them exactly as they
    rank a manuscript's chunks), best first, with the retriever's score, among the windows that clear the relevance
    floor (`floors`: base retriever -> floor, over DEFAULT_RELEVANCE_FLOORS; see there): an empty list when the
    paper has windows but none is relevant. `window_vectors` (one row per window) and `query_vector` are needed by
    dense and hybrid; `reranker` by a `+rerank` configuration. Raises ValueError for a configuration that cannot run
    (unknown, or reranked without a reranker) or missing vectors."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not windows:
        return []
    # A reranker rescores at least the predictions' pool of 20, and never fewer windows than are asked for; it keeps
    # its whole pool so that the floor, not the pool's tail, decides what is cut.
    pool = max(20, k)
    available, unavailable = build_retrievers([retriever_name], reranker, pool=pool, keep=pool)
    if retriever_name in unavailable:
        raise ValueError(f"retriever {retriever_name!r}: {unavailable[retriever_name]}")
    index = PaperIndex(windows[0].cited_key, [window.passage_id for window in windows],
                       [window.text for window in windows], window_vectors)
    hits = available[retriever_name].search(index, query_text, query_vector, len(index))
    clears = _clears_floor(index, query_text, query_vector, retriever_name,
                           {**DEFAULT_RELEVANCE_FLOORS, **(floors or {})})
    relevant = [hit for hit in hits if clears[index.position(hit.chunk_id)]]
    return [(windows[index.position(hit.chunk_id)], hit.score) for hit in relevant[:k]]


# A clause ends at a semicolon, at a comma right after a citation marker (a parenthetical or numeric marker closes the
# claim it supports: "A improves B [1], C harms D [2]"), and at a comma before a contrasting conjunction (narrative
# markers open their claim: "Smith (2020) show X, while Lee (2021) show Y").
# "and" / "or" are left out: after a comma they mostly close a list ("A, B, and C [1]"), not a clause.
_CLAUSE_CONJUNCTION = re.compile(r",\s+(?=(?:while|whereas|but|although|though|yet|however|unlike|in contrast)\b)",
                                 re.IGNORECASE)
_EMPTY_BRACKETS = re.compile(r"[(\[]\s*[,;\s]*[)\]]")
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([,;:.!?)\]])")


def _without_markers(text: str, spans: Sequence[tuple[int, int]], offset: int = 0) -> str:
    """`text` (which starts at `offset` of the citance) without the parts the marker spans cover, brackets left empty
    by them and the spaces they leave before punctuation."""
    kept, position = [], offset
    for start, end in sorted(spans):
        if end <= position or start >= offset + len(text):
            continue
        kept.append(text[position - offset:max(start, position) - offset])
        position = max(position, end)
    kept.append(text[position - offset:])
    joined = _EMPTY_BRACKETS.sub(" ", " ".join(kept))
    joined = re.sub(r"\s+", " ", joined)
    joined = _SPACE_BEFORE_PUNCTUATION.sub(r"\1", joined)
    return re.sub(r"^[\s,;:]+|[\s,;:]+$", "", joined)


def _bracket_depths(text: str) -> list[int]:
    depths, depth = [], 0
    for char in text:
        depth = max(depth - (char in ")]"), 0)
        depths.append(depth)
        depth += char in "(["
    return depths


def _clause_bounds(text: str, marker_spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    cuts = {match.start() for match in re.finditer(";", text)}
    cuts |= {match.start() for match in _CLAUSE_CONJUNCTION.finditer(text)}
    for _, end in marker_spans:
        after = re.match(r"\s*,", text[end:])
        if after:
            cuts.add(end + after.end() - 1)
    # Nothing inside brackets cuts: "(Smith 2019; Lee 2020)" is one group of markers, not two clauses.
    depths = _bracket_depths(text)
    cuts = {cut for cut in cuts if not depths[cut]}
    bounds, start = [], 0
    for cut in sorted(cuts):
        if cut > start:
            bounds.append((start, cut))
        start = cut + 1
    bounds.append((start, len(text)))
    return bounds


def query_of(citance_text: str, marker_spans: Sequence[tuple[int, int]],
             own_spans: Sequence[tuple[int, int]] | None = None) -> str:
    """The text that retrieves evidence for one cited entry: the citance with every citation marker removed.

    `marker_spans`: (start, end) offsets in `citance_text` of every marker of the sentence; `own_spans`: those of
    the markers citing this entry (None: all of them). When the sentence also cites other works through other
    markers, the clause holding this entry's marker (cut at semicolons, at a comma closing a marker, and at a comma
    before "while", "whereas", "but", ...) is appended once more: repeating its words doubles their weight in BM25's
    query-term sum and pulls the query's embedding towards them, while the rest of the sentence still counts (a
    clause cut wrongly costs a little weight, never the words)."""
    base = _without_markers(citance_text, marker_spans)
    own = list(own_spans) if own_spans is not None else list(marker_spans)
    if not own or set(own) >= set(marker_spans):
        return base
    clauses = [(start, end) for start, end in _clause_bounds(citance_text, marker_spans)
               if any(start <= marker_start < end for marker_start, _ in own)]
    emphasis = " ".join(_without_markers(citance_text[start:end], marker_spans, start) for start, end in clauses)
    return f"{base} {emphasis}".strip() if emphasis and emphasis != base else base


def merged_passages(cited_key: str, blocks: Sequence[Block]) -> list[tuple[str, str]]:
    """The cited paper whole, for the merged mode: (passage id `<cited_key>:b<block order>`, text) of every body
    block (abstract, paragraphs, captions and tables; see the module docstring) in reading order."""
    return [(f"{cited_key}:b{block.order}", block.text) for block in sorted(blocks, key=lambda item: item.order)
            if block.kind in MERGED_KINDS and block.text.strip()]


@dataclass(frozen=True)
class WindowFit:
    """Whether passages fit a model's prompt: their estimated tokens against what the window leaves them. Truthy when
    they fit; `reason` says why not, naming both sizes."""

    needed_tokens: int
    available_tokens: int
    fits: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fits", self.needed_tokens <= self.available_tokens)

    def __bool__(self) -> bool:
        return self.fits

    @property
    def reason(self) -> str | None:
        if self.fits:
            return None
        return (f"the cited paper (about {self.needed_tokens} tokens) does not fit the {self.available_tokens} tokens "
                "the verifier's window leaves after the prompt and the answer")


def fits_window(passages: Sequence[tuple[str, str]], context_window: int, max_output_tokens: int | None,
                template_text: str) -> WindowFit:
    """Whether the passages, as the verifier is shown them (`format_passages`), fit the model's context window less
    its answer and `template_text` (the prompt rendered with everything but the passages), by the predictions' own
    estimate (`predictions.prompt_window`: a token per 3 characters, which over-counts, so what fits fits)."""
    return WindowFit(estimated_tokens(format_passages(passages)),
                     prompt_window(context_window, max_output_tokens, template_text))
