"""A venue's `citations:` options (venues.yaml), validated when the registry is read.

Nothing leaves the machine unless the venue asks: no metadata service is queried by default, and arXiv and
open-access downloads are only tried once the venue lists them in `resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from peerify_dagster.domain.options import checked_options
from peerify_dagster.domain.retrieval import RETRIEVER_CONFIGS

# The offline metadata index (`peerify refs index`: DBLP, BibTeX collections, Crossref/OpenAlex records) is a source
# like the services, asked first; the services are asked over the network only for what it does not validate.
METADATA_INDEX = "index"
NETWORK_METADATA_SERVICES = ("crossref", "openalex", "semantic_scholar")
METADATA_SERVICES = (METADATA_INDEX, *NETWORK_METADATA_SERVICES)
# Where a cited paper's full text is looked for, in the order the issue gives: a local folder, the venue's own
# manuscripts (ML papers cite OpenReview papers), arXiv, then the open-access locations the metadata names.
SOURCE_LIBRARY, SOURCE_VENUE, SOURCE_ARXIV, SOURCE_OPEN_ACCESS = "library", "venue", "arxiv", "open_access"
RESOLVE_SOURCES = (SOURCE_LIBRARY, SOURCE_VENUE, SOURCE_ARXIV, SOURCE_OPEN_ACCESS)
OFFLINE_SOURCES = (SOURCE_LIBRARY, SOURCE_VENUE)
MODE_WINDOWS, MODE_MERGED = "windows", "merged"
EVIDENCE_MODES = (MODE_WINDOWS, MODE_MERGED)
# The retrievers a window ranking may use; a reranked one needs the reranker resource like the predictions' do.
WINDOW_RETRIEVERS = tuple(RETRIEVER_CONFIGS)

# The relevance floor, per base retriever, on its own scale. BM25 is read as a share of the most the query could
# score in the paper (evidence.bm25_share; raw BM25 grows with the paper's length): on the sample venue's papers an
# unrelated claim reaches at most 0.06, the windows a citing sentence was written from 0.08-0.4. Dense is the cosine
# of MiniLM vectors: an unrelated claim against an ML paper reaches 0.3-0.37, the window a claim was written from
# 0.5-0.8. Hybrid's fused score only ranks (1 / (60 + rank): the same numbers for any query), so a hybrid window must
# clear the floor of BM25 or of dense; a reranked retriever keeps its base's floor (a cross-encoder's scale is its own
# model's). Venues set them in `citations.relevance_floor`.
DEFAULT_RELEVANCE_FLOORS: Mapping[str, float] = {"bm25": 0.07, "dense": 0.4}


class CitationOptionsError(ValueError):
    """A `citations:` option that cannot be used; the message names the option."""


@dataclass(frozen=True)
class CitationOptions:
    metadata: tuple[str, ...] = ()  # of METADATA_SERVICES, asked in this order
    mailto: str | None = None  # Crossref's and OpenAlex's polite pool
    base_urls: Mapping[str, str] = field(default_factory=dict)  # service or "arxiv" -> API root (a mirror, a test)
    library: str | None = None  # folder of PDFs searched first (relative to the registry file)
    index: str | None = None  # the metadata index when `metadata` lists it (default: the lake's, <lake>/metadata_index)
    resolve: tuple[str, ...] = OFFLINE_SOURCES  # of RESOLVE_SOURCES, tried in this order
    retriever: str = "hybrid"
    k: int = 3  # passages of the cited paper shown per citance
    # base retriever (bm25, dense) -> the score a window must reach to be shown (DEFAULT_RELEVANCE_FLOORS)
    relevance_floor: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RELEVANCE_FLOORS))
    modes: tuple[str, ...] = (MODE_WINDOWS,)
    enrichment: bool = False  # the citance tagger (an LLM call per citance)
    # reviewers' own citations judged against the papers they cite (an LLM call per cited work resolved); the works
    # are found, checked and resolved in every build
    review_citations: bool = False

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> CitationOptions:
        options = checked_options(cls, raw, CitationOptionsError)
        for name, choices in (("metadata", METADATA_SERVICES), ("resolve", RESOLVE_SOURCES),
                              ("modes", EVIDENCE_MODES)):
            if name in options:
                options[name] = _choices(name, options[name], choices)
        if not options.get("modes", cls.modes):
            raise CitationOptionsError("modes must name at least one of " + str(list(EVIDENCE_MODES)))
        if options.get("retriever", cls.retriever) not in WINDOW_RETRIEVERS:
            raise CitationOptionsError(f"retriever must be one of {list(WINDOW_RETRIEVERS)}, "
                                       f"got {options['retriever']!r}")
        k = options.get("k", cls.k)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise CitationOptionsError(f"k must be a positive integer, got {k!r}")
        floors = options.get("relevance_floor") or {}
        if not isinstance(floors, Mapping) or not all(
                name in DEFAULT_RELEVANCE_FLOORS and isinstance(value, (int, float)) and not isinstance(value, bool)
                for name, value in floors.items()):
            raise CitationOptionsError(f"relevance_floor maps a retriever of {list(DEFAULT_RELEVANCE_FLOORS)} to a "
                                       f"number, got {floors!r}")
        options["relevance_floor"] = {**DEFAULT_RELEVANCE_FLOORS, **{name: float(v) for name, v in floors.items()}}
        base_urls = options.get("base_urls") or {}
        if not isinstance(base_urls, Mapping) or not all(
                key in (*NETWORK_METADATA_SERVICES, SOURCE_ARXIV) and isinstance(url, str)
                for key, url in base_urls.items()):
            raise CitationOptionsError(f"base_urls maps a service of {[*NETWORK_METADATA_SERVICES, SOURCE_ARXIV]} to a "
                                       f"URL, "
                                       f"got {base_urls!r}")
        options["base_urls"] = dict(base_urls)
        for name in ("mailto", "library", "index"):
            if options.get(name) is not None and not isinstance(options[name], str):
                raise CitationOptionsError(f"{name} must be a string, got {options[name]!r}")
        if not isinstance(options.get("enrichment", False), bool):
            raise CitationOptionsError(f"enrichment must be true or false, got {options['enrichment']!r}")
        if not isinstance(options.get("review_citations", False), bool):
            raise CitationOptionsError(f"review_citations must be true or false, got {options['review_citations']!r}")
        return cls(**options)

    def with_library(self, library: str | None) -> CitationOptions:
        """These options with another library folder searched first (`peerify verify --library`)."""
        resolve = (SOURCE_LIBRARY, *(source for source in self.resolve if source != SOURCE_LIBRARY))
        return CitationOptions(**{**vars(self), "library": library, "resolve": resolve})


def _choices(name: str, value: Any, choices: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CitationOptionsError(f"{name} must be a list of {list(choices)}, got {value!r}")
    unknown = [item for item in value if item not in choices]
    if unknown or len(set(value)) != len(value):
        raise CitationOptionsError(f"{name} must list each of {list(choices)} at most once, got {value!r}")
    return tuple(value)
