"""A published release (B1, B3, B4, B6 JSONL, see domain/release.py) as the tables of a venue: its benchmark slices,
the pooled passages as chunks, the claims as retrieval queries, the B6 author responses as claim threads, and every
imported row with its raw values (`release_rows`).

The importer is strict where the benchmark loader is lenient: every problem of every file (a malformed line, a
missing field, an unknown label, and the importer's own rules below) is collected, and any problem refuses the whole
import, so a venue never holds part of a release. Its own rules: review claims (B3, B4, B6) need a `review_id`, B6
rows an `author_response`, a B4 row equal `b2_label` and `b3_label` (it is the agreement file), a B1 label (when
given) is Supported, and no claim may occur twice in one file. `release_rows` keeps each row's line as written.

Slices: PaperSourced = B1 (gold Supported, gold chunk = its paragraph), LLMJudged = B3, HighAgreement = B4 (gold =
the agreed label), VerifiableOnly = the factual B3 claims, HumanVerified = B6; RebuttalSourced stays empty, since
the release's rebuttal-sourced file (B2) is not among the files. The release's claim types (methodology,
experimental, ..., subjective) become the project's two: `subjective` stays subjective, every other type is factual.
One claim (paper, review, normalised text) has one claim id in every file, so B4 can be checked against B3 and B6.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from peerify_dagster.domain.labels import SUPPORTED
from peerify_dagster.domain.llm_calls import estimate_tokens
from peerify_dagster.domain.predictions import SOURCE_PAPER, SOURCE_REVIEW
from peerify_dagster.domain.records import json_lines
from peerify_dagster.domain.release import (
    ERRORS_KEY,
    RELEASE_FILES,
    PooledPassages,
    ReleaseRowError,
    build_pooled_passages,
    load_release,
)
from peerify_dagster.domain.slices import (
    FACTUAL,
    HIGH_AGREEMENT,
    HUMAN_VERIFIED,
    LLM_JUDGED,
    PAPER_SOURCED,
    REBUTTAL_SOURCED,
    SLICES,
    VERIFIABLE_ONLY,
)

THREAD_MODE_RELEASE = "release"  # claim_threads.thread_mode of an imported author response
# The tables an import writes for its venue; a release venue's build computes only what follows from them.
IMPORTED_TABLES = ("benchmark_slices", "chunks", "retrieval_queries", "claim_threads", "release_rows")
SUBJECTIVE = "subjective"
KIND_GOLD, KIND_QUOTE = "paragraph", "quote"  # chunks.kind: a B1 gold paragraph, a B3 evidence quote

_LABEL_FIELDS = {"B1": ("label",), "B3": ("label",), "B4": ("b2_label", "b3_label"), "B6": ("label",)}
_EVIDENCE_FIELDS = {"B1": (), "B3": ("evidence",), "B4": ("b2_evidence", "b3_evidence"), "B6": ("evidence",)}
_IMPORT_REQUIRED = {"B3": ("review_id",), "B4": ("review_id",), "B6": ("review_id", "author_response")}
_WHITESPACE = re.compile(r"\s+")

RELEASE_ROW_SCHEMA: dict[str, pl.DataType] = {
    "venue": pl.String, "row_id": pl.String, "release_file": pl.String, "line": pl.Int64, "claim_id": pl.String,
    "paper_id": pl.String, "review_id": pl.String, "claim_text": pl.String, "claim_type_raw": pl.String,
    "labels": pl.List(pl.Struct({"field": pl.String, "raw": pl.String, "mapped": pl.String})),
    "evidence": pl.List(pl.String), "row_json": pl.String,
}


class ReleaseImportError(ValueError):
    """The release cannot be imported; `problems` names every file, line and reason."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in the release:\n" + "\n".join(problems))


def claim_id_for(paper_id: str, review_id: str | None, claim_text: str) -> str:
    """The same claim in every file of a release: paper, review and the text in NFKC, whitespace and case folded."""
    text = _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", claim_text)).strip().casefold()
    return "rel-" + hashlib.sha256(f"{paper_id}\x1f{review_id or ''}\x1f{text}".encode()).hexdigest()[:16]


def claim_type_of(raw: Any) -> str | None:
    if not isinstance(raw, str) or not raw.strip():
        return None
    return SUBJECTIVE if raw.strip().lower() == SUBJECTIVE else FACTUAL


def file_sha256(folder: Path) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in RELEASE_FILES.values()
            if (folder / name).is_file()}


def validate_release(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """The loaded release; raises ReleaseImportError listing every problem of every file (nothing is imported)."""
    release = load_release(folder)
    problems = [(error["file"], error["line"] or 0, error["message"]) for error in release[ERRORS_KEY]]
    for kind, rows in ((kind, release[kind]) for kind in RELEASE_FILES):
        name, first_line = RELEASE_FILES[kind], {}
        for row in rows:
            reasons = []
            if missing := [f for f in _IMPORT_REQUIRED.get(kind, ()) if not row.get(f)]:
                reasons.append(f"missing or empty field(s) {', '.join(missing)}")
            if kind == "B1" and row.get("label", SUPPORTED) != SUPPORTED:
                reasons.append(f"label {row['label_raw']!r}: a paper-sourced claim is Supported by construction")
            if kind == "B4" and row["b2_label"] != row["b3_label"]:
                reasons.append(f"b2_label {row['b2_label_raw']!r} and b3_label {row['b3_label_raw']!r} differ: not an "
                               "agreement row")
            claim_id = claim_id_for(row["paper_id"], row.get("review_id"), row["claim"])
            if claim_id in first_line:
                reasons.append(f"the same claim (paper, review and text) as line {first_line[claim_id]}")
            first_line.setdefault(claim_id, row["source_line"])
            problems += [(name, row["source_line"], str(ReleaseRowError(name, row["source_line"], reason)))
                         for reason in reasons]
    if problems:
        raise ReleaseImportError([message for _, _, message in sorted(problems)])
    return release


def label_deviations(release: Mapping[str, list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """`file field` -> {"raw -> mapped": rows} for every label written otherwise than the project's spelling."""
    deviations: dict[str, Counter] = defaultdict(Counter)
    for kind, fields in _LABEL_FIELDS.items():
        for row in release.get(kind, []):
            for name in fields:
                if name in row and row[f"{name}_raw"] != row[name]:
                    deviations[f"{RELEASE_FILES[kind]} {name}"][f"{row[f'{name}_raw']} -> {row[name]}"] += 1
    return {key: dict(sorted(counts.items())) for key, counts in sorted(deviations.items())}


@dataclass
class ImportedRelease:
    """The rows of each imported table (IMPORTED_TABLES), and what the import reports."""

    venue: str
    tables: dict[str, list[dict[str, Any]]]
    deviations: dict[str, dict[str, int]]
    notes: list[str] = field(default_factory=list)
    sample: dict[str, Any] | None = None  # per_slice, seed, claims kept per slice
    file_sha256: dict[str, str] = field(default_factory=dict)  # release file name -> sha256 of the bytes imported

    def slice_sizes(self) -> dict[str, int]:
        sizes = Counter(row["slice"] for row in self.tables["benchmark_slices"])
        return {name: sizes.get(name, 0) for name in SLICES}


def _chunk_id(pool: PooledPassages, passage_id: str, paper_id: str) -> str:
    # A passage is a chunk of each paper it occurs in; a chunk id names one paper's chunk.
    return passage_id if len(pool.passages[passage_id]["paper_ids"]) == 1 else f"{passage_id}:{paper_id}"


def _slice_row(venue: str, name: str, claim_id: str, row: Mapping[str, Any], gold: str, source: str,
               chunk_ids: list[str] | None = None) -> dict[str, Any]:
    return {"venue": venue, "slice": name, "claim_id": claim_id, "paper_id": row["paper_id"],
            "review_id": row.get("review_id"), "claim_text": row["claim"],
            "claim_type": claim_type_of(row.get("claim_type")), "gold_label": gold, "gold_source": source,
            "gold_provenance": f"release:{row['row_id']}", "gold_chunk_ids": chunk_ids or [], "gold_call_ids": [],
            "gold_decision_ids": []}


def import_release(folder: Path, venue: str, per_slice: int | None = None, seed: int = 0) -> ImportedRelease:
    """The venue's tables from the release in `folder` (validated first: ReleaseImportError on any problem);
    `per_slice`: keep a seeded sample of at most that many claims of each slice."""
    release = validate_release(folder)
    pool = build_pooled_passages(release)
    ids = {row["row_id"]: claim_id_for(row["paper_id"], row.get("review_id"), row["claim"])
           for kind in RELEASE_FILES for row in release[kind]}
    paper_of = {row["row_id"]: row["paper_id"] for row in release["B1"]}
    gold_chunks = {row_id: [_chunk_id(pool, passage_id, paper_of[row_id]) for passage_id in passages]
                   for row_id, passages in pool.gold.items()}
    slices = [_slice_row(venue, PAPER_SOURCED, ids[r["row_id"]], r, SUPPORTED, "paper", gold_chunks.get(r["row_id"]))
              for r in release["B1"]]
    slices += [_slice_row(venue, LLM_JUDGED, ids[r["row_id"]], r, r["label"], "manuscript") for r in release["B3"]]
    slices += [_slice_row(venue, HIGH_AGREEMENT, ids[r["row_id"]], r, r["b3_label"], "thread+manuscript")
               for r in release["B4"]]
    slices += [{**_slice_row(venue, LLM_JUDGED, ids[r["row_id"]], r, r["label"], "manuscript"),
                "slice": VERIFIABLE_ONLY} for r in release["B3"] if claim_type_of(r.get("claim_type")) == FACTUAL]
    slices += [_slice_row(venue, HUMAN_VERIFIED, ids[r["row_id"]], r, r["label"], "human_audit")
               for r in release["B6"]]
    notes = [f"{REBUTTAL_SOURCED} is empty: the release's rebuttal-sourced file (B2) is not among its files "
             f"({', '.join(RELEASE_FILES.values())})"]
    if pool.skipped_claims:
        notes.append(f"{len(pool.skipped_claims)} B1 claim(s) have a paragraph without text, so no gold chunk: "
                     f"{[claim['claim_id'] for claim in pool.skipped_claims]}")
    sample = None
    if per_slice is not None:
        slices, sample = _sample(slices, per_slice, seed)
    kept = {row["claim_id"] for row in slices}
    # The lines as load_release numbered them (split on "\n" only: a U+2028 in a review is no line break).
    lines = {kind: {line.number: line.text for line in json_lines((folder / name).read_bytes())}
             for kind, name in RELEASE_FILES.items()}
    rows = [_release_row(venue, kind, row, ids[row["row_id"]], lines[kind][row["source_line"]])
            for kind in RELEASE_FILES for row in release[kind] if ids[row["row_id"]] in kept]
    papers = {row["paper_id"] for row in slices}
    tables = {
        "benchmark_slices": slices,
        "chunks": _chunks(venue, pool, papers),
        "retrieval_queries": _queries(venue, release, ids, kept, gold_chunks),
        "claim_threads": [{"venue": venue, "claim_id": ids[r["row_id"]], "paper_id": r["paper_id"],
                           "review_id": r["review_id"], "thread_mode": THREAD_MODE_RELEASE,
                           "thread_text": r["author_response"], "thread_tokens": estimate_tokens(r["author_response"])}
                          for r in release["B6"] if ids[r["row_id"]] in kept],
        "release_rows": rows,
    }
    deviations = label_deviations({kind: [r for r in release[kind] if ids[r["row_id"]] in kept]
                                   for kind in RELEASE_FILES})
    return ImportedRelease(venue, tables, deviations, notes, sample, file_sha256(folder))


def _sample(slices: list[dict[str, Any]], per_slice: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """At most `per_slice` claims of each slice, drawn with `seed` from the slice's claims in id order."""
    by_slice: dict[str, list[str]] = defaultdict(list)
    for row in slices:
        by_slice[row["slice"]].append(row["claim_id"])
    chosen = {name: set(random.Random(f"{seed}:{name}").sample(sorted(claims), min(per_slice, len(claims))))
              for name, claims in by_slice.items()}
    kept = [row for row in slices if row["claim_id"] in chosen[row["slice"]]]
    return kept, {"per_slice": per_slice, "seed": seed,
                  "claims_per_slice": {name: len(claims) for name, claims in sorted(chosen.items())}}


def _chunks(venue: str, pool: PooledPassages, papers: Iterable[str]) -> list[dict[str, Any]]:
    rows = []
    for paper_id in sorted(papers):
        for order, passage in enumerate(pool.paper_passages(paper_id)):
            section = passage["section"]
            rows.append({"venue": venue, "chunk_id": _chunk_id(pool, passage["passage_id"], paper_id),
                         "paper_id": paper_id, "section_path": [section] if section else [], "section": section,
                         "kind": KIND_GOLD if "gold" in passage["roles"] else KIND_QUOTE, "page": None,
                         "order": order, "word_count": len(passage["text"].split()), "text": passage["text"],
                         "text_sha256": hashlib.sha256(passage["text"].encode()).hexdigest()})
    return rows


def _queries(venue: str, release: Mapping[str, list[dict[str, Any]]], ids: Mapping[str, str], kept: set[str],
             gold_chunks: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    rows = [{"venue": venue, "claim_id": ids[r["row_id"]], "paper_id": r["paper_id"], "review_id": None,
             "claim_text": r["claim"], "kind": FACTUAL, "manuscript_label": SUPPORTED, "rebuttal_label": None,
             "evidence_section": r.get("section_name") or None, "evidence_sentence": None, "source": SOURCE_PAPER,
             "gold_chunk_ids": gold_chunks.get(r["row_id"], [])} for r in release["B1"] if ids[r["row_id"]] in kept]
    seen = set()
    for kind in ("B3", "B4", "B6"):  # a review claim once, as its first file gives it
        for r in release[kind]:
            claim_id = ids[r["row_id"]]
            if claim_id in kept and claim_id not in seen:
                seen.add(claim_id)
                rows.append({"venue": venue, "claim_id": claim_id, "paper_id": r["paper_id"],
                             "review_id": r["review_id"], "claim_text": r["claim"],
                             "kind": claim_type_of(r.get("claim_type")), "manuscript_label": None,
                             "rebuttal_label": None, "evidence_section": None, "evidence_sentence": None,
                             "source": SOURCE_REVIEW, "gold_chunk_ids": None})
    return rows


def _release_row(venue: str, kind: str, row: Mapping[str, Any], claim_id: str, line: str) -> dict[str, Any]:
    return {"venue": venue, "row_id": row["row_id"], "release_file": RELEASE_FILES[kind], "line": row["source_line"],
            "claim_id": claim_id, "paper_id": row["paper_id"], "review_id": row.get("review_id"),
            "claim_text": row["claim"], "claim_type_raw": row.get("claim_type"),
            "labels": [{"field": name, "raw": row[f"{name}_raw"], "mapped": row[name]}
                       for name in _LABEL_FIELDS[kind] if name in row],
            "evidence": [quote for name in _EVIDENCE_FIELDS[kind] for quote in row[name]],
            "row_json": line.strip()}
