"""What the web app's venue and claim pages show, shaped from the lake's tables with no Dagster and no web import:
the venue's slices and metrics (with the majority baselines and the one-label warning the report uses), the claim
browser's index and its filters, and one claim with everything known about it (the review text with the claim's
span, what each labeller saw and answered, the gold label and its provenance, every configuration's passages and
verdict, and where each passage lies on the manuscript's pages).

Every function takes plain polars frames (a table not built for the venue is passed as None) and returns plain
values, so the pages hold no logic and the tests need no server.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from peerify_dagster.domain.arbitration import AGREED, UNLABELLED
from peerify_dagster.domain.citations.review_citations import ARXIV, AUTHOR_YEAR, DOI, TITLE
from peerify_dagster.domain.claims import SOURCE_FOLLOWUP, _content_words, _sentence_spans
from peerify_dagster.domain.frames import one_where, rows_where
from peerify_dagster.domain.labelling import SOURCE_MANUSCRIPT, SOURCE_THREAD
from peerify_dagster.domain.llm_calls import answer_justification
from peerify_dagster.domain.metrics import ANSWER_KEY, one_label_warning
from peerify_dagster.domain.predictions import (
    MODE_FULL_CONTEXT,
    SOURCE_ANSWER_KEY,
    SOURCE_PAPER,
    SOURCE_REVIEW,
    STATUS_OK,
)
from peerify_dagster.domain.regions import boxes_on_page, page_sizes_of, pages_of
from peerify_dagster.domain.report import accuracy_and_f1, slice_order, slice_statistics
from peerify_dagster.domain.slices import SLICES

PER_PAGE = 50
# Disagreement filters of the claim browser: key -> what it keeps.
LABELLERS_DISAGREE, PREDICTION_WRONG = "labellers", "prediction"
DISAGREEMENTS = {LABELLERS_DISAGREE: "labellers disagree", PREDICTION_WRONG: "prediction differs from gold"}
CLAIM_KINDS = {SOURCE_REVIEW: "review claim", SOURCE_PAPER: "paper-sourced claim", SOURCE_ANSWER_KEY: "answer key"}
SOURCE_NAMES = {SOURCE_THREAD: "rebuttal thread", SOURCE_MANUSCRIPT: "manuscript"}
# How the claim's span in the review text was found (review_claims.span_kind), plus the page's own best match.
SPAN_BEST_MATCH = "best_match"
SPAN_HOW = {"exact": "the claim's words, as extracted", "sentence": "the sentence holding the claim's words",
            SPAN_BEST_MATCH: "the sentence sharing most of the claim's words (the extractor paraphrased it)"}
NO_POSITIONS = ("This lake's chunks record no positions on the page (`chunks.regions`): rebuild the venue with the "
                "current parser to have passages outlined on the manuscript.")
# How a review cites a work (review_citations.kind), as the claim page names it.
CITED_WORK_KINDS = {AUTHOR_YEAR: "author-year mention", ARXIV: "arXiv id", DOI: "DOI", TITLE: "quoted title"}
_KIND_ORDER = {kind: order for order, kind in enumerate(CLAIM_KINDS)}
_SECTION_LEAD = re.compile(r"(?:[A-Z][A-Za-z ]{0,40}:\s+)?(?:[-*\u2022]\s+|\d+[.)]\s+)?")


# -- the venue overview --------------------------------------------------------------------------------------------
def slice_rows(slices: pl.DataFrame | None) -> list[dict]:
    """Per slice (all six): claims, papers and claims per gold label (the report's table)."""
    if slices is None:
        return []
    return slice_statistics(slices).to_dicts()


def metric_rows(metrics: pl.DataFrame | None) -> list[dict]:
    """Per configuration and slice: the scores beside the majority baseline, the predicted-label distribution and,
    when the verifier answered one label to (nearly) everything, the report's plain warning."""
    if metrics is None or metrics.is_empty():
        return []
    warnings = {(row["configuration"], row["verifier"], row["slice"]): one_label_warning(row)
                for row in metrics.iter_rows(named=True)}
    return [{**row, "warning": warnings[(row["configuration"], row["verifier"], row["slice"])]}
            for row in accuracy_and_f1(metrics).iter_rows(named=True)]


# -- the claim browser ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClaimIndex:
    """A venue's claims as the browser filters them: one row per claim (`claims`), its slice memberships with the
    gold label in each (`memberships`; the answer key counts as the slice `answer key`), every configuration's
    verdict (`verdicts`), and the claims whose two labellers did not agree on some evidence source."""

    claims: pl.DataFrame  # claim_id, kind, paper_id, review_id, claim_text, claim_type, section, order
    memberships: pl.DataFrame  # claim_id, slice, gold_label
    verdicts: pl.DataFrame  # claim_id, configuration, label, status
    labellers_disagree: frozenset[str]

    @property
    def slices(self) -> list[str]:
        present = set(self.memberships["slice"])
        return [name for name in (*SLICES, ANSWER_KEY) if name in present]

    @property
    def configurations(self) -> list[str]:
        return sorted(set(self.verdicts["configuration"]))


_MEMBERSHIP_SCHEMA = {"claim_id": pl.String, "slice": pl.String, "gold_label": pl.String}
_VERDICT_SCHEMA = {"claim_id": pl.String, "configuration": pl.String, "label": pl.String, "status": pl.String}


def claim_index(queries: pl.DataFrame, review_claims: pl.DataFrame | None, slices: pl.DataFrame | None,
                canonical: pl.DataFrame | None, predictions: pl.DataFrame | None) -> ClaimIndex:
    """The browser's index of a venue. `queries` (retrieval_queries) lists every claim the venue verifies (review,
    paper-sourced and answer-key claims, with their text and kind); review_claims adds where a review claim sits."""
    claims = queries.select("claim_id", pl.col("source").alias("kind"), "paper_id", "review_id", "claim_text",
                            pl.col("kind").alias("claim_type"))
    if review_claims is not None:
        claims = claims.join(review_claims.select("claim_id", "section", pl.col("claim_order").alias("order")),
                             on="claim_id", how="left")
    else:
        claims = claims.with_columns(pl.lit(None, pl.String).alias("section"), pl.lit(None, pl.Int64).alias("order"))
    claims = claims.with_columns(pl.col("kind").replace_strict(_KIND_ORDER, default=len(_KIND_ORDER),
                                                               return_dtype=pl.Int64).alias("_kind_order")) \
        .sort("_kind_order", "paper_id", "review_id", "order", "claim_id", nulls_last=True).drop("_kind_order")
    answer_key = queries.filter((pl.col("source") == SOURCE_ANSWER_KEY) & pl.col("manuscript_label").is_not_null())
    parts = [answer_key.select("claim_id", pl.lit(ANSWER_KEY).alias("slice"),
                               pl.col("manuscript_label").alias("gold_label"))]
    if slices is not None:
        parts.insert(0, slices.select(*_MEMBERSHIP_SCHEMA))
    memberships = pl.concat([part.cast(_MEMBERSHIP_SCHEMA) for part in parts])
    verdicts = predictions.select(*_VERDICT_SCHEMA).cast(_VERDICT_SCHEMA) if predictions is not None \
        else pl.DataFrame(schema=_VERDICT_SCHEMA)
    disagree = frozenset() if canonical is None else frozenset(
        canonical.filter(~pl.col("provenance").is_in([AGREED, UNLABELLED]))["claim_id"])
    return ClaimIndex(claims, memberships, verdicts, disagree)


@dataclass(frozen=True)
class ClaimFilter:
    """What the browser's form asks for; empty strings and None mean "any"."""

    slice: str | None = None
    gold_label: str | None = None
    configuration: str | None = None
    predicted_label: str | None = None
    disagreement: str | None = None
    page: int = 1

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ClaimFilter:
        """From the page's query string; unknown values are kept (they match nothing), a bad page number is page 1."""
        page = query.get("page", "1")
        return cls(*(query.get(name) or None for name in
                     ("slice", "gold_label", "configuration", "predicted_label", "disagreement")),
                   page=int(page) if page.isdigit() and int(page) > 0 else 1)

    def query(self, **changes: Any) -> dict[str, str]:
        """The filter as query parameters (what links to another page of it carry), with `changes` applied."""
        values = {"slice": self.slice, "gold_label": self.gold_label, "configuration": self.configuration,
                  "predicted_label": self.predicted_label, "disagreement": self.disagreement, "page": self.page,
                  **changes}
        return {name: str(value) for name, value in values.items() if value not in (None, "")}


@dataclass(frozen=True)
class ClaimPage:
    """One page of the browser: its rows, how many claims match, and the page count."""

    rows: list[dict]
    total: int
    page: int
    pages: int


def filter_claims(index: ClaimIndex, wanted: ClaimFilter, per_page: int = PER_PAGE) -> ClaimPage:
    """The claims matching every part of `wanted`, one page of them, each with its memberships and verdicts.

    Gold label: the claim's gold label in the chosen slice (any slice when none is chosen). Configuration and
    predicted label: a verdict of that configuration (any, when none is chosen) with that label. Disagreement:
    `labellers` keeps claims whose two labellers did not agree on some evidence source; `prediction` keeps claims
    where a verdict (of the chosen configuration) differs from the claim's gold label in a slice (the chosen one),
    an answer without a label counting as different and a claim the verifier was not called for (no manuscript,
    no thread) not counting."""
    memberships = index.memberships
    if wanted.slice:
        memberships = memberships.filter(pl.col("slice") == wanted.slice)
    if wanted.gold_label:
        memberships = memberships.filter(pl.col("gold_label") == wanted.gold_label)
    verdicts = index.verdicts
    if wanted.configuration:
        verdicts = verdicts.filter(pl.col("configuration") == wanted.configuration)
    if wanted.predicted_label:
        verdicts = verdicts.filter(pl.col("label") == wanted.predicted_label)
    keep = index.claims.select("claim_id")
    if wanted.slice or wanted.gold_label:
        keep = keep.join(memberships.select("claim_id").unique(), on="claim_id", how="semi")
    if wanted.configuration or wanted.predicted_label:
        keep = keep.join(verdicts.select("claim_id").unique(), on="claim_id", how="semi")
    if wanted.disagreement == LABELLERS_DISAGREE:
        keep = keep.filter(pl.col("claim_id").is_in(list(index.labellers_disagree)))
    elif wanted.disagreement == PREDICTION_WRONG:
        wrong = verdicts.filter(pl.col("status") == STATUS_OK).join(memberships, on="claim_id").filter(
            pl.col("label").is_null() | (pl.col("label") != pl.col("gold_label")))
        keep = keep.join(wrong.select("claim_id").unique(), on="claim_id", how="semi")
    elif wanted.disagreement:
        keep = keep.clear()
    matching = index.claims.join(keep, on="claim_id", how="semi")
    pages = max(1, math.ceil(matching.height / per_page))
    page = min(wanted.page, pages)
    shown = matching.slice((page - 1) * per_page, per_page)
    ids = shown["claim_id"].to_list()
    member_of = _grouped(index.memberships.filter(pl.col("claim_id").is_in(ids)))
    verdicts_of = _grouped(index.verdicts.filter(pl.col("claim_id").is_in(ids)).sort("configuration"))
    rows = [{**row, "kind_name": CLAIM_KINDS.get(row["kind"], row["kind"]),
             "memberships": member_of.get(row["claim_id"], []), "verdicts": verdicts_of.get(row["claim_id"], []),
             "labellers_disagree": row["claim_id"] in index.labellers_disagree}
            for row in shown.iter_rows(named=True)]
    return ClaimPage(rows, matching.height, page, pages)


def _grouped(frame: pl.DataFrame) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in frame.iter_rows(named=True):
        grouped.setdefault(row["claim_id"], []).append(row)
    return grouped


# -- one claim -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MarkedText:
    """A text with one span marked: before, marked, after, and how the span was found (SPAN_HOW key; None: no
    span)."""

    before: str
    marked: str
    after: str
    how: str | None

    @property
    def how_text(self) -> str | None:
        return SPAN_HOW.get(self.how) if self.how else None


def mark_claim(text: str, claim_text: str, start: int | None, end: int | None, kind: str | None) -> MarkedText:
    """The source text with the claim's span marked: the extractor's offsets when they hold, else the sentence
    sharing most of the claim's content words (a paraphrased claim), else nothing marked."""
    if start is not None and end is not None and 0 <= start < end <= len(text):
        return MarkedText(text[:start], text[start:end], text[end:], kind or "exact")
    words = _content_words(claim_text)
    best, best_share = None, 0.0
    for span_start, span_end in _sentence_spans(text) if words else []:
        share = len(words & _content_words(text[span_start:span_end])) / len(words)
        if share > best_share:
            best, best_share = (span_start, span_end), share
    if best is None:
        return MarkedText(text, "", "", None)
    # A review's first item of a section shares its sentence with the section's label ("Weaknesses: - ...").
    start = _SECTION_LEAD.match(text, best[0], best[1]).end()
    return MarkedText(text[:start], text[start:best[1]], text[best[1]:], SPAN_BEST_MATCH)


@dataclass
class Passage:
    """A chunk as one configuration or retriever saw it: rank and score when a retriever ranked it."""

    chunk_id: str
    rank: int | None
    score: float | None
    text: str | None
    section: str | None
    page: int | None
    pages: list[int]


@dataclass
class ConfigurationView:
    """One configuration's handling of the claim: its verdict and the passages it was shown."""

    configuration: str
    verifier: str | None
    mode: str | None
    retriever: str | None
    k: int | None
    status: str | None
    label: str | None
    raw_label: str | None
    parse_ok: bool | None
    error: str | None
    call_id: str | None
    justification: str | None
    passages: list[Passage]


@dataclass
class LabellerView:
    """One labeller's answer on one evidence source, and what it was shown."""

    labeller: str
    model: str | None
    label: str | None
    raw_label: str | None
    parse_ok: bool | None
    justification: str | None
    evidence_quotes: list[str]
    evidence_chunk_ids: list[str]
    evidence_mode: str | None
    evidence_text: str | None
    evidence_tokens: int | None
    call_id: str | None
    error: str | None


@dataclass
class SourceView:
    """One evidence source (thread or manuscript): both labellers and the canonical label with its provenance."""

    source: str
    name: str
    labellers: list[LabellerView]
    canonical: dict | None

    @property
    def same_evidence(self) -> bool:
        """Whether both labellers were shown the same text (then the page shows it once)."""
        return len({labeller.evidence_text for labeller in self.labellers}) <= 1


@dataclass
class CitedWorkView:
    """One work the claim's review cites (review_citations): how the review cites it and the sentence, whether that
    sentence is the claim's, the submission's entry it is, its reference check, the full text it resolved to, and each
    verifier's verdict on the reviewer's sentence (review_citation_verdicts rows, with the passages shown)."""

    citation_id: str
    kind: str
    text: str
    sentence: str
    in_claim: bool
    entry_id: str | None
    entry_text: str | None
    entry_reason: str | None
    check_status: str | None
    check_reasons: list[str]
    resolution_status: str | None
    source: str | None
    locator: str | None
    cited_key: str | None
    resolution_reason: str | None
    verdicts: list[dict]

    @property
    def kind_name(self) -> str:
        return CITED_WORK_KINDS.get(self.kind, self.kind)


@dataclass
class ClaimDetail:
    """Everything the claim page shows about one claim."""

    claim: dict  # claim_id, kind, kind_name, paper_id, review_id, claim_text, claim_type, section, ...
    source_text: MarkedText | None  # the review (or follow-up) text with the claim marked; None: no review text
    source_title: str | None
    paper: dict | None  # paper_claims row (paragraph, gold chunks, call ids) of a paper-sourced claim
    sources: list[SourceView]
    memberships: list[dict]  # benchmark_slices rows: slice, gold_label, provenance, call ids, decision ids
    configurations: list[ConfigurationView]
    rankings: dict[str, list[Passage]]  # retriever -> its ranking of the paper's chunks for the claim
    chunks: dict[str, dict]  # chunk_id -> the chunk row (text, page, regions)
    pdf_sha256: str | None
    pdf_pages: int | None
    page_sizes: dict[int, tuple[float, float]]
    has_positions: bool
    default_chunk_id: str | None = None  # the passage the page view opens on
    notes: list[str] = field(default_factory=list)
    cited_works: list[CitedWorkView] = field(default_factory=list)  # the works the claim's review cites


@dataclass(frozen=True)
class ClaimTables:
    """The venue's tables the claim page reads (None: not built), and the ledger's parsed answers by call id."""

    queries: pl.DataFrame
    review_claims: pl.DataFrame | None = None
    reviews: pl.DataFrame | None = None
    followups: pl.DataFrame | None = None
    paper_claims: pl.DataFrame | None = None
    claim_labels: pl.DataFrame | None = None
    canonical: pl.DataFrame | None = None
    slices: pl.DataFrame | None = None
    predictions: pl.DataFrame | None = None
    retrieval_runs: pl.DataFrame | None = None
    chunks: pl.DataFrame | None = None
    manuscript_pdfs: pl.DataFrame | None = None
    parsed_manuscripts: pl.DataFrame | None = None
    review_citations: pl.DataFrame | None = None
    review_citation_verdicts: pl.DataFrame | None = None


def claim_call_ids(tables: ClaimTables, claim_id: str) -> list[str]:
    """The ledger calls whose answers the claim page quotes (the labellers' and the verifiers'): fetch their parsed
    answers and pass them to `claim_detail`."""
    ids = [row["call_id"] for row in rows_where(tables.predictions, claim_id=claim_id)]
    ids += [row["call_id"] for row in rows_where(tables.claim_labels, claim_id=claim_id)]
    return sorted({call_id for call_id in ids if call_id})


def claim_detail(tables: ClaimTables, claim_id: str, answers: Mapping[str, str | None]) -> ClaimDetail | None:
    """The claim page of `claim_id`, or None when the venue has no such claim. `answers`: the ledger's parsed
    answer (JSON text) of each call in `claim_call_ids`, for the justifications predictions do not store."""
    query = one_where(tables.queries, claim_id=claim_id)
    if query is None:
        return None
    claim = {**query, "kind": query["source"], "kind_name": CLAIM_KINDS.get(query["source"], query["source"]),
             "claim_type": query["kind"]}
    extracted = one_where(tables.review_claims, claim_id=claim_id)
    notes: list[str] = []
    source_text, source_title = None, None
    if extracted is not None:
        claim.update(section=extracted["section"], span_kind=extracted["span_kind"],
                     span_reason=extracted["span_reason"], source_id=extracted["source_id"],
                     origin=extracted["source"], extractor_call_id=extracted["call_id"])
        text, source_title = _source_text(tables, extracted)
        if text is None:
            notes.append("The review's text is not in this lake (its reviews table is not built).")
        else:
            source_text = mark_claim(text, extracted["claim_text"], extracted["span_start"], extracted["span_end"],
                                     extracted["span_kind"])
    chunk_rows = {row["chunk_id"]: row for row in rows_where(tables.chunks, paper_id=query["paper_id"])}
    has_positions = tables.chunks is not None and "regions" in tables.chunks.columns
    configurations = [_configuration_view(row, tables, chunk_rows, answers)
                      for row in sorted(rows_where(tables.predictions, claim_id=claim_id),
                                        key=lambda r: r["configuration"])]
    rankings = _rankings(tables, claim_id, chunk_rows)
    pdf = one_where(tables.manuscript_pdfs, paper_id=query["paper_id"])
    parsed = one_where(tables.parsed_manuscripts, paper_id=query["paper_id"])
    sizes = page_sizes_of(parsed)
    if has_positions and chunk_rows and not sizes:
        notes.append("This lake's parsed manuscripts record no page sizes (`parsed_manuscripts.page_sizes`): passages "
                     "cannot be outlined on the page.")
    elif not has_positions and chunk_rows:
        notes.append(NO_POSITIONS)
    detail = ClaimDetail(
        claim=claim, source_text=source_text, source_title=source_title,
        paper=one_where(tables.paper_claims, claim_id=claim_id), sources=_source_views(tables, claim_id, answers),
        memberships=sorted(rows_where(tables.slices, claim_id=claim_id), key=lambda r: slice_order(r["slice"])),
        configurations=configurations, rankings=rankings, chunks=chunk_rows,
        pdf_sha256=pdf["sha256"] if pdf and pdf.get("status") == "ok" else None,
        pdf_pages=pdf["pages"] if pdf and pdf.get("status") == "ok" else None,
        page_sizes=sizes, has_positions=has_positions and bool(sizes), notes=notes)
    detail.default_chunk_id = _first_passage(detail)
    detail.cited_works = cited_works(tables, query.get("review_id"), _claim_span(source_text, extracted))
    if detail.pdf_sha256 is None and chunk_rows:
        notes.append("The manuscript PDF is not in this lake, so its pages cannot be shown.")
    return detail


def _claim_span(source_text: MarkedText | None, extracted: Mapping | None) -> tuple[int, int] | None:
    """Where the claim sits in its review's text (the span the page marks), None for a follow-up's claim or an
    unplaced one: the review's cited works are offsets in the review's text."""
    if source_text is None or not source_text.marked or extracted is None or extracted["source"] == SOURCE_FOLLOWUP:
        return None
    return len(source_text.before), len(source_text.before) + len(source_text.marked)


def cited_works(tables: ClaimTables, review_id: str | None, claim_span: tuple[int, int] | None) -> list[CitedWorkView]:
    """The works review `review_id` cites, those in a sentence the claim's span (offsets in the review's text)
    overlaps first, each with its verdicts by verifier; none without a review or its review_citations table."""
    if not review_id:
        return []
    works = []
    for row in rows_where(tables.review_citations, review_id=review_id):
        sentence_end = row["sentence_start"] + len(row["sentence"] or "")
        in_claim = claim_span is not None and row["sentence_start"] < claim_span[1] and sentence_end > claim_span[0]
        judged = sorted(rows_where(tables.review_citation_verdicts, citation_id=row["citation_id"]),
                        key=lambda verdict: verdict["verifier"] or "")
        works.append(CitedWorkView(
            citation_id=row["citation_id"], kind=row["kind"], text=row["text"], sentence=row["sentence"],
            in_claim=in_claim, entry_id=row["entry_id"], entry_text=row["entry_text"],
            entry_reason=row["entry_reason"], check_status=row["check_status"],
            check_reasons=list(row["check_reasons"] or []), resolution_status=row["resolution_status"],
            source=row["source"], locator=row["locator"], cited_key=row["cited_key"],
            resolution_reason=row["resolution_reason"], verdicts=judged))
    return sorted(works, key=lambda work: not work.in_claim)


def _source_text(tables: ClaimTables, extracted: Mapping) -> tuple[str | None, str | None]:
    """The full text the claim's offsets refer to: the review's assembled text, or the reviewer follow-up's."""
    if extracted["source"] == SOURCE_FOLLOWUP:
        followup = one_where(tables.followups, comment_id=extracted["source_id"])
        return (followup["text"], f"Reviewer follow-up {extracted['source_id']}") if followup else (None, None)
    review = one_where(tables.reviews, review_id=extracted["review_id"])
    return (review["review_text"], f"Review {extracted['review_id']}") if review else (None, None)


def _passage(chunk_id: str, chunks: Mapping[str, dict], rank: int | None = None,
             score: float | None = None) -> Passage:
    chunk = chunks.get(chunk_id) or {}
    return Passage(chunk_id, rank, score, chunk.get("text"), chunk.get("section"), chunk.get("page"),
                   pages_of(chunk) if chunk else [])


def _configuration_view(row: Mapping, tables: ClaimTables, chunks: Mapping[str, dict],
                        answers: Mapping[str, str | None]) -> ConfigurationView:
    scores = {}
    if row.get("retriever"):
        scores = {run["chunk_id"]: (run["rank"], run["score"])
                  for run in rows_where(tables.retrieval_runs, claim_id=row["claim_id"], retriever=row["retriever"])}
    passages = [_passage(chunk_id, chunks, *scores.get(chunk_id, (None, None)))
                for chunk_id in row.get("evidence_chunk_ids") or []]
    return ConfigurationView(
        configuration=row["configuration"], verifier=row.get("verifier"), mode=row.get("mode"),
        retriever=row.get("retriever"), k=row.get("k"), status=row.get("status"), label=row.get("label"),
        raw_label=row.get("raw_label"), parse_ok=row.get("parse_ok"), error=row.get("error"),
        call_id=row.get("call_id"), justification=answer_justification(answers.get(row.get("call_id") or "")),
        passages=passages)


def _rankings(tables: ClaimTables, claim_id: str, chunks: Mapping[str, dict]) -> dict[str, list[Passage]]:
    rankings: dict[str, list[Passage]] = {}
    runs = sorted((run for run in rows_where(tables.retrieval_runs, claim_id=claim_id) if run["chunk_id"]),
                  key=lambda run: (run["retriever"], run["rank"]))
    for run in runs:
        rankings.setdefault(run["retriever"], []).append(_passage(run["chunk_id"], chunks, run["rank"], run["score"]))
    return rankings


def _source_views(tables: ClaimTables, claim_id: str, answers: Mapping[str, str | None]) -> list[SourceView]:
    labels = rows_where(tables.claim_labels, claim_id=claim_id)
    canonical = {row["source"]: row for row in rows_where(tables.canonical, claim_id=claim_id)}
    views = []
    for source in sorted({row["source"] for row in labels} | set(canonical),
                         key=lambda s: (s not in SOURCE_NAMES, s)):
        labellers = [LabellerView(
            labeller=row["labeller"], model=row.get("model"), label=row.get("label"), raw_label=row.get("raw_label"),
            parse_ok=row.get("parse_ok"),
            justification=row.get("justification") or answer_justification(answers.get(row.get("call_id") or "")),
            evidence_quotes=row.get("evidence_quotes") or [], evidence_chunk_ids=row.get("evidence_chunk_ids") or [],
            evidence_mode=row.get("evidence_mode"), evidence_text=row.get("evidence_text"),
            evidence_tokens=row.get("evidence_tokens"), call_id=row.get("call_id"), error=row.get("error"))
            for row in sorted((r for r in labels if r["source"] == source), key=lambda r: r["labeller"])]
        views.append(SourceView(source, SOURCE_NAMES.get(source, source), labellers, canonical.get(source)))
    return views


def _first_passage(detail: ClaimDetail) -> str | None:
    """The passage the page view opens on: the gold chunk of a paper-sourced claim, else the first passage a
    configuration chose for the claim (retrieved or gold, not the whole manuscript in order), else the top of the
    first ranking, else the first passage of a full-context configuration; one on a known page."""
    chosen = [view for view in detail.configurations if view.mode != MODE_FULL_CONTEXT]
    candidates = list((detail.paper or {}).get("gold_chunk_ids") or [])
    candidates += [p.chunk_id for view in chosen for p in view.passages]
    candidates += [p.chunk_id for ranking in detail.rankings.values() for p in ranking]
    candidates += [p.chunk_id for view in detail.configurations for p in view.passages]
    for chunk_id in candidates:
        if chunk_id in detail.chunks and pages_of(detail.chunks[chunk_id]):
            return chunk_id
    return None


def page_view(detail: ClaimDetail, chunk_id: str | None, page: int | None = None) -> dict | None:
    """What the manuscript pane shows for one passage: the page (the passage's first, or `page` when it is one of
    the passage's), the pages it spans, and its boxes on that page; None without a PDF or a placed passage."""
    if detail.pdf_sha256 is None:
        return None
    chunk = detail.chunks.get(chunk_id or "")
    pages = pages_of(chunk) if chunk else []
    if not pages:
        return None
    shown = page if page in pages else pages[0]
    return {"chunk_id": chunk_id, "chunk": chunk, "page": shown, "pages": pages,
            "boxes": boxes_on_page(chunk.get("regions"), shown, detail.page_sizes) if detail.has_positions else []}
