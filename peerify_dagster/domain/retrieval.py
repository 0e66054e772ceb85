"""Evidence retrieval over one manuscript's chunks: tokenizer, per-paper index, the registry of retrievers
(`RETRIEVER_CONFIGS`, the one list of their names), batch runner.

Retrieval is always restricted to the claim's own manuscript, so the unit of indexing is the
paper (`PaperIndex`). Retrievers are small objects with a `name` and a `search` method; the
reranked variants wrap a base retriever and any `(query, passages) -> scores` callable, so this
module never loads a model itself (no Dagster import here either).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import polars as pl
from rank_bm25 import BM25Okapi

STATUS_OK = "ok"
STATUS_NO_CHUNKS = "no_chunks"
STATUS_NO_HITS = "no_hits"
STATUS_ERROR = "error"

RUN_COLUMNS: tuple[str, ...] = (
    "claim_id",
    "paper_id",
    "retriever",
    "rank",
    "chunk_id",
    "score",
    "status",
    "error",
)
# retrieval_queries: the claims evidence is retrieved for, and where their gold evidence is.
QUERY_SCHEMA = {
    "venue": pl.String, "claim_id": pl.String, "paper_id": pl.String, "review_id": pl.String,
    "claim_text": pl.String, "kind": pl.String, "manuscript_label": pl.String, "rebuttal_label": pl.String,
    "evidence_section": pl.String, "evidence_sentence": pl.String, "source": pl.String,
    "gold_chunk_ids": pl.List(pl.String),
}
# Small on purpose: scientific claims lean on short words ("no", "not" aside) less than on
# names and numbers, and BM25's idf already discounts what is frequent inside one paper.
STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself
    yourselves e g ie eg etc s t via
    """.split()
)

# An atom is a decimal number ("93.4", "0.55") or a run of letters/digits ("imagenet", "1k").
# Atoms joined by hyphens form one compound token ("gpt-4", "ms-marco", "cross-encoder").
_ATOM = r"(?:\d+(?:\.\d+)+|[^\W_]+)"
_TOKEN_PATTERN = re.compile(rf"{_ATOM}(?:-{_ATOM})*")
_HYPHEN_VARIANTS = str.maketrans({"\u2010": "-", "\u2011": "-", "\u00ad": ""})
_POSSESSIVE = re.compile(r"['\u2019]s\b")
_APOSTROPHE = re.compile(r"['\u2019]")


def tokenize(text: str) -> list[str]:
    """Lowercased BM25 tokens: keeps decimals, names with digits, hyphenated compounds whole and split."""
    normalised = unicodedata.normalize("NFKC", text).translate(_HYPHEN_VARIANTS).lower()
    normalised = _APOSTROPHE.sub("", _POSSESSIVE.sub("", normalised))
    tokens: list[str] = []
    for match in _TOKEN_PATTERN.finditer(normalised):
        compound = match.group(0)
        parts = compound.split("-")
        candidates = [compound, *parts] if len(parts) > 1 else [compound]
        tokens.extend(token for token in candidates if token not in STOPWORDS)
    return tokens


class _NonNegativeIdfBM25(BM25Okapi):
    """BM25Okapi with Lucene's idf, log(1 + (N - n + 0.5) / (n + 0.5)).

    rank_bm25's Okapi idf is zero or negative for a term in half or more of the documents, which
    on a paper of two or three chunks wipes out exactly the terms that tell chunks apart.
    """

    def _calc_idf(self, nd: Mapping[str, int]) -> None:
        for word, document_frequency in nd.items():
            rarity = (self.corpus_size - document_frequency + 0.5) / (document_frequency + 0.5)
            self.idf[word] = math.log(1.0 + rarity)


@dataclass
class PaperIndex:
    """The searchable chunks of one manuscript; BM25 is built on first use."""

    paper_id: str
    chunk_ids: Sequence[str]
    texts: Sequence[str]
    embeddings: np.ndarray | None = None
    _bm25: _NonNegativeIdfBM25 | None = field(default=None, init=False, repr=False)
    _positions: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.chunk_ids = list(self.chunk_ids)
        self.texts = list(self.texts)
        if len(self.chunk_ids) != len(self.texts):
            raise ValueError(
                f"paper {self.paper_id}: {len(self.chunk_ids)} chunk ids but {len(self.texts)} texts"
            )
        self._positions = {chunk_id: position for position, chunk_id in enumerate(self.chunk_ids)}
        if len(self._positions) != len(self.chunk_ids):
            raise ValueError(f"paper {self.paper_id}: chunk ids are not unique")
        if self.embeddings is not None:
            self.embeddings = np.asarray(self.embeddings, dtype=np.float32)
            if self.embeddings.ndim != 2 or self.embeddings.shape[0] != len(self.chunk_ids):
                raise ValueError(
                    f"paper {self.paper_id}: embeddings of shape {self.embeddings.shape} "
                    f"do not match {len(self.chunk_ids)} chunks"
                )

    def __len__(self) -> int:
        return len(self.chunk_ids)

    def position(self, chunk_id: str) -> int:
        return self._positions[chunk_id]

    @property
    def bm25(self) -> _NonNegativeIdfBM25:
        if self._bm25 is None:
            if not self.chunk_ids:
                raise ValueError(f"paper {self.paper_id}: cannot build BM25 over zero chunks")
            self._bm25 = _NonNegativeIdfBM25([tokenize(text) for text in self.texts])
        return self._bm25


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk; rank is 1-based."""

    chunk_id: str
    score: float
    rank: int


class Retriever(Protocol):
    name: str
    needs_query_vector: bool

    def search(self, index: PaperIndex, query_text: str, query_vector: np.ndarray | None, k: int) -> list[Hit]: ...


PassageScorer = Callable[[str, list[str]], Sequence[float]]


def _top_hits(index: PaperIndex, scores: np.ndarray, k: int, keep: np.ndarray | None = None) -> list[Hit]:
    # Stable sort so ties keep chunk order and a rerun gives the same ranking.
    order = np.argsort(-scores, kind="stable")
    if keep is not None:
        order = order[keep[order]]
    return [
        Hit(chunk_id=index.chunk_ids[position], score=float(scores[position]), rank=rank)
        for rank, position in enumerate(order[:k], start=1)
    ]


class Bm25Retriever:
    """Lexical retrieval; only chunks sharing at least one query term are returned.

    Returning zero-score chunks would rank them by chunk order, which can favour whatever
    happens to be stored first (in a pooled evaluation, the gold passages).
    """

    name = "bm25"
    needs_query_vector = False

    def search(self, index: PaperIndex, query_text: str, query_vector: np.ndarray | None, k: int) -> list[Hit]:
        # A paper whose chunks hold no tokens at all has nothing to match (and an average length of 0).
        if not len(index) or not index.bm25.avgdl:
            return []
        scores = np.asarray(index.bm25.get_scores(tokenize(query_text)), dtype=np.float64)
        return _top_hits(index, scores, k, keep=scores > 0)


class DenseRetriever:
    """Cosine similarity, which is the dot product because vectors are L2-normalised."""

    name = "dense"
    needs_query_vector = True

    def search(self, index: PaperIndex, query_text: str, query_vector: np.ndarray | None, k: int) -> list[Hit]:
        if not len(index):
            return []
        if index.embeddings is None:
            raise ValueError(f"paper {index.paper_id}: dense retrieval needs chunk embeddings, the index has none")
        if query_vector is None:
            raise ValueError(f"paper {index.paper_id}: dense retrieval needs a query vector")
        query_vector = np.asarray(query_vector, dtype=np.float32)
        if query_vector.shape != (index.embeddings.shape[1],):
            raise ValueError(
                f"paper {index.paper_id}: query vector of shape {query_vector.shape} does not match "
                f"chunk embeddings of dimension {index.embeddings.shape[1]}"
            )
        scores = index.embeddings @ query_vector
        return _top_hits(index, scores.astype(np.float64), k)


class HybridRetriever:
    """Reciprocal-rank fusion of BM25 and dense over the whole paper: score = sum 1 / (rrf_k + rank)."""

    name = "hybrid"
    needs_query_vector = True

    def __init__(self, rrf_k: int = 60) -> None:
        self.rrf_k = rrf_k
        self._rankers: tuple[Retriever, ...] = (Bm25Retriever(), DenseRetriever())

    def search(self, index: PaperIndex, query_text: str, query_vector: np.ndarray | None, k: int) -> list[Hit]:
        fused: dict[str, float] = {}
        for ranker in self._rankers:
            for hit in ranker.search(index, query_text, query_vector, len(index)):
                fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + 1.0 / (self.rrf_k + hit.rank)
        ordered = sorted(fused.items(), key=lambda item: (-item[1], index.position(item[0])))
        return [Hit(chunk_id, score, rank) for rank, (chunk_id, score) in enumerate(ordered[:k], start=1)]


@dataclass
class Reranked:
    """Takes the base retriever's top `pool`, rescores them with `scorer`, keeps the best `keep`."""

    base: Retriever
    scorer: PassageScorer
    pool: int = 20
    keep: int = 10

    @property
    def name(self) -> str:
        return f"{self.base.name}+rerank"

    @property
    def needs_query_vector(self) -> bool:
        return self.base.needs_query_vector

    def search(self, index: PaperIndex, query_text: str, query_vector: np.ndarray | None, k: int) -> list[Hit]:
        candidates = self.base.search(index, query_text, query_vector, self.pool)
        if not candidates:
            return []
        passages = [index.texts[index.position(hit.chunk_id)] for hit in candidates]
        scores = [float(score) for score in self.scorer(query_text, passages)]
        if len(scores) != len(candidates):
            raise ValueError(f"{self.name}: scorer returned {len(scores)} scores for {len(candidates)} passages")
        # Ties keep the base retriever's order.
        ordered = sorted(zip(candidates, scores), key=lambda pair: (-pair[1], pair[0].rank))
        return [
            Hit(hit.chunk_id, score, rank) for rank, (hit, score) in enumerate(ordered[: min(k, self.keep)], start=1)
        ]


@dataclass(frozen=True)
class RetrieverConfig:
    """A named retrieval configuration: a base retriever, optionally followed by the cross-encoder."""

    name: str
    base: Callable[[], Retriever]
    rerank: bool = False


RETRIEVER_CONFIGS: dict[str, RetrieverConfig] = {
    config.name: config
    for config in (
        RetrieverConfig("bm25", Bm25Retriever),
        RetrieverConfig("dense", DenseRetriever),
        RetrieverConfig("hybrid", HybridRetriever),
        RetrieverConfig("bm25+rerank", Bm25Retriever, rerank=True),
        RetrieverConfig("dense+rerank", DenseRetriever, rerank=True),
        RetrieverConfig("hybrid+rerank", HybridRetriever, rerank=True),
    )
}


def build_retrievers(
    names: Iterable[str], reranker: PassageScorer | None = None, pool: int = 20, keep: int = 10
) -> tuple[dict[str, Retriever], dict[str, str]]:
    """Instantiate the named configurations; those that cannot run come back with the reason."""
    available: dict[str, Retriever] = {}
    unavailable: dict[str, str] = {}
    for name in names:
        config = RETRIEVER_CONFIGS.get(name)
        if config is None:
            unavailable[name] = f"unknown retriever; known: {', '.join(RETRIEVER_CONFIGS)}"
        elif config.rerank and reranker is None:
            unavailable[name] = "needs a cross-encoder reranker and none is configured"
        elif config.rerank:
            available[name] = Reranked(config.base(), reranker, pool=pool, keep=keep)
        else:
            available[name] = config.base()
    return available, unavailable


Claim = tuple[str, str, str]
IndexSource = Mapping[str, PaperIndex] | Callable[[str], PaperIndex | None]
QueryEmbedder = Callable[[list[str]], np.ndarray]


def _run_row(
    claim_id: str,
    paper_id: str,
    retriever: str,
    status: str,
    hit: Hit | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "claim_id": claim_id,
        "paper_id": paper_id,
        "retriever": retriever,
        "rank": hit.rank if hit else None,
        "chunk_id": hit.chunk_id if hit else None,
        "score": hit.score if hit else None,
        "status": status,
        "error": error,
    }


def _group_by_paper(claims: Iterable[Claim]) -> dict[str, list[tuple[str, str]]]:
    grouped: dict[str, list[tuple[str, str]]] = {}
    for claim_id, paper_id, claim_text in claims:
        grouped.setdefault(paper_id, []).append((claim_id, claim_text))
    return grouped


def retrieve_claims(
    claims: Iterable[Claim],
    indexes: IndexSource,
    retrievers: Mapping[str, Retriever] | Iterable[Retriever],
    embed_queries: QueryEmbedder | None,
    k: int = 10,
) -> list[dict[str, Any]]:
    """Run every retriever for every (claim_id, paper_id, claim_text) against that paper's index only.

    Rows follow RUN_COLUMNS, one per hit with status "ok". Every claim appears for every
    retriever: a claim whose paper has no index or no chunks gets one row per retriever with
    status "no_chunks" (rank and chunk_id None), a search that found nothing one "no_hits" row,
    and a failure (an index that would not load, embeddings absent for a dense retriever, a
    scorer error) one "error" row carrying the reason, while the rest of the batch carries on.
    Papers are processed one at a time so a loader only needs one index in memory.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    retriever_list = list(retrievers.values()) if isinstance(retrievers, Mapping) else list(retrievers)
    needs_vectors = any(retriever.needs_query_vector for retriever in retriever_list)
    if needs_vectors and embed_queries is None:
        names = [retriever.name for retriever in retriever_list if retriever.needs_query_vector]
        raise ValueError(f"retrievers {names} need query vectors but no embed_queries was given")
    load_index = indexes.get if isinstance(indexes, Mapping) else indexes

    rows: list[dict[str, Any]] = []
    for paper_id, paper_claims in _group_by_paper(claims).items():
        rows.extend(_paper_rows(paper_id, paper_claims, load_index, retriever_list, embed_queries, k))
    return rows


def _paper_rows(
    paper_id: str,
    paper_claims: list[tuple[str, str]],
    load_index: Callable[[str], PaperIndex | None],
    retrievers: list[Retriever],
    embed_queries: QueryEmbedder | None,
    k: int,
) -> list[dict[str, Any]]:
    def every_claim(status: str, error: str | None = None) -> list[dict[str, Any]]:
        return [
            _run_row(claim_id, paper_id, retriever.name, status, error=error)
            for claim_id, _ in paper_claims
            for retriever in retrievers
        ]

    try:
        index = load_index(paper_id)
    except Exception as exc:  # one unreadable paper must not stop the batch
        return every_claim(STATUS_ERROR, f"loading the index of paper {paper_id} failed: {exc!r}")
    if index is None or not len(index):
        return every_claim(STATUS_NO_CHUNKS)
    query_vectors: np.ndarray | None = None
    if any(retriever.needs_query_vector for retriever in retrievers):
        try:
            query_vectors = np.asarray(embed_queries([text for _, text in paper_claims]), dtype=np.float32)
        except Exception as exc:
            return every_claim(STATUS_ERROR, f"embedding the claims of paper {paper_id} failed: {exc!r}")

    rows: list[dict[str, Any]] = []
    for position, (claim_id, claim_text) in enumerate(paper_claims):
        query_vector = query_vectors[position] if query_vectors is not None else None
        for retriever in retrievers:
            try:
                hits = retriever.search(index, claim_text, query_vector, k)
            except Exception as exc:  # reported per claim and retriever, the others still run
                rows.append(_run_row(claim_id, paper_id, retriever.name, STATUS_ERROR, error=str(exc)))
                continue
            if not hits:
                rows.append(_run_row(claim_id, paper_id, retriever.name, STATUS_NO_HITS))
            rows.extend(_run_row(claim_id, paper_id, retriever.name, STATUS_OK, hit) for hit in hits)
    return rows


def paper_index_loader(chunks: pl.DataFrame, chunk_embeddings: pl.DataFrame) -> Callable[[str], PaperIndex | None]:
    """paper id -> the paper's search index (chunks in manuscript order with their vectors), None without chunks."""
    vectors = chunk_embeddings.select("chunk_id", "embedding")
    joined = chunks.select("paper_id", "chunk_id", "text", "order").join(vectors, on="chunk_id", how="left")

    def load_index(paper_id: str) -> PaperIndex | None:
        # One paper at a time: no venue-wide matrix is ever held.
        paper = joined.filter(pl.col("paper_id") == paper_id).sort("order")
        if paper.is_empty():
            return None
        return PaperIndex(paper_id, paper["chunk_id"].to_list(), paper["text"].to_list(),
                          np.asarray(paper["embedding"].to_list(), dtype=np.float32))

    return load_index
