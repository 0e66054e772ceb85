"""Importer for the published Peerify release (B1, B3, B4, B6 JSONL) and its pooled-passage evaluation set.

Labels are mapped to the project's vocabulary on import with the raw spelling kept beside them
(`label_raw`, `b2_label_raw`, `b3_label_raw`) for lineage. Evidence fields, written as a string,
a list of strings or a list of {"quote", "section"} objects, become lists of quotes (the raw
value is kept as JSON text in `<field>_raw`); section fields become lists of strings. A row
that cannot be used is reported with its file, line and reason, and the rest still loads.

The pooled passages follow evaluation 4 of the release README: B1 gold paragraphs (deduplicated
by text hash) plus the B3 evidence quotes as distractors, grouped per paper and as one pool.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from peerify_dagster.domain.labels import normalise_label
from peerify_dagster.domain.records import RecordError, json_lines
from peerify_dagster.domain.retrieval import PaperIndex

RELEASE_FILES: dict[str, str] = {
    "B1": "B1_golden_supported.jsonl",
    "B3": "B3_reviewer_paper.jsonl",
    "B4": "B4_agreement.jsonl",
    "B6": "B6_human.jsonl",
}
ERRORS_KEY = "errors"

_REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "B1": ("claim", "original_claim", "paragraph", "paper_id"),
    "B3": ("claim", "paper_id", "label"),
    "B4": ("claim", "paper_id", "b2_label", "b3_label"),
    "B6": ("claim", "paper_id", "label"),
}
_LABEL_FIELDS: dict[str, tuple[str, ...]] = {
    "B1": ("label",),
    "B3": ("label",),
    "B4": ("b2_label", "b3_label"),
    "B6": ("label",),
}
# Present as lists on every row of the kind, empty when the file leaves them out (B6 has no section).
_EVIDENCE_FIELDS: dict[str, tuple[str, ...]] = {
    "B1": (),
    "B3": ("evidence",),
    "B4": ("b2_evidence", "b3_evidence"),
    "B6": ("evidence",),
}
_SECTION_FIELDS: dict[str, tuple[str, ...]] = {"B1": (), "B3": ("section",), "B4": (), "B6": ("section",)}
# Text fields, a string (or null) wherever a row has them: ids, claims, passages and responses become table columns.
_TEXT_FIELDS = ("paper_id", "review_id", "claim", "original_claim", "paragraph", "section_name", "claim_type",
                "author_response", "combined_author_response")

# Quotes inside an evidence string: curly or straight double quotes around at least a few words.
_QUOTED = re.compile(r"\u201c([^\u201d]{20,}?)\u201d|\"([^\"]{20,}?)\"")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_WHITESPACE = re.compile(r"\s+")


class ReleaseRowError(RecordError):
    """A release row that could not be used; the message is `file:line: reason`."""

    def as_row(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "reason": self.reason, "message": str(self)}


def split_evidence_quotes(value: Any) -> list[str]:
    """Evidence as a list of quote strings, whatever shape the labeller wrote it in."""
    if value is None:
        return []
    if isinstance(value, list):
        quotes: list[str] = []
        for item in value:
            quote = item.get("quote") if isinstance(item, dict) else item
            if not isinstance(quote, str):
                raise ValueError(f"evidence item {item!r} is neither a string nor a {{'quote': ...}} object")
            quotes.extend(split_evidence_quotes(quote))
        return quotes
    if not isinstance(value, str):
        raise ValueError(f"evidence of type {type(value).__name__} is neither a string nor a list")
    quoted = [(curly or straight).strip() for curly, straight in _QUOTED.findall(value)]
    if quoted:
        return quoted
    stripped = value.strip()
    return [stripped] if stripped else []


def _as_list(value: Any, field_name: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise ValueError(f"{field_name} must be a string or a list of strings, got {value!r}")


def _normalise_row(kind: str, row: Any) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    for name in _TEXT_FIELDS:
        if row.get(name) is not None and not isinstance(row[name], str):
            raise ValueError(f"field {name} must be a string, got {type(row[name]).__name__}")
    missing = [name for name in _REQUIRED_FIELDS[kind] if not row.get(name)]
    if missing:
        raise ValueError(f"missing or empty field(s) {', '.join(missing)}")
    normalised = dict(row)
    for name in _LABEL_FIELDS[kind]:
        if name not in row:
            continue
        label = normalise_label(row[name])
        if label is None:
            raise ValueError(f"{name} {row[name]!r} is not a known label")
        normalised[name] = label
        normalised[f"{name}_raw"] = row[name]
    for name in _EVIDENCE_FIELDS[kind]:
        normalised[name] = split_evidence_quotes(row.get(name))
        # JSON text, because the raw value is a string in some rows and a list of objects in others.
        normalised[f"{name}_raw"] = json.dumps(row.get(name), ensure_ascii=False)
    for name in _SECTION_FIELDS[kind]:
        normalised[name] = _as_list(row.get(name), name)
    return normalised


def load_release(folder: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Load the four release files: {"B1": rows, "B3": rows, "B4": rows, "B6": rows, "errors": rows}.

    Each row gains `row_id` ("B1:12", the file key and 1-based line) and `source_line`. Error
    rows carry file, line, reason and a readable message; a missing file is one error row.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"release folder {folder} does not exist")
    release: dict[str, list[dict[str, Any]]] = {kind: [] for kind in RELEASE_FILES}
    errors: list[dict[str, Any]] = []
    for kind, file_name in RELEASE_FILES.items():
        path = folder / file_name
        if not path.is_file():
            errors.append(ReleaseRowError(file_name, None, "file is missing").as_row())
            continue
        for line in json_lines(path.read_bytes()):
            try:
                if line.problem is not None:
                    raise ValueError(line.problem)
                row = _normalise_row(kind, line.record)
            except ValueError as exc:
                errors.append(ReleaseRowError(file_name, line.number, str(exc)).as_row())
                continue
            row["row_id"] = f"{kind}:{line.number}"
            row["source_line"] = line.number
            release[kind].append(row)
    release[ERRORS_KEY] = errors
    return release


def passage_text(raw: str) -> str:
    """Passage text as indexed: Markdown comments (`<!-- image -->`) dropped, whitespace collapsed."""
    return _WHITESPACE.sub(" ", _HTML_COMMENT.sub(" ", unicodedata.normalize("NFKC", raw))).strip()


def passage_id_for(text: str) -> str:
    return "p-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class PooledPassages:
    """Passages, their grouping per paper, the B1 claims and each claim's gold passage id.

    A passage records every paper it occurs in and whether it is a gold paragraph, a
    distractor quote or both, and its section when known; `skipped_claims` lists B1 rows whose paragraph had no
    text.
    """

    passages: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_paper: dict[str, list[str]] = field(default_factory=dict)
    claims: list[dict[str, Any]] = field(default_factory=list)
    gold: dict[str, set[str]] = field(default_factory=dict)
    skipped_claims: list[dict[str, Any]] = field(default_factory=list)

    def paper_passages(self, paper_id: str) -> list[dict[str, Any]]:
        return [self.passages[passage_id] for passage_id in self.by_paper.get(paper_id, [])]

    def all_passages(self) -> list[dict[str, Any]]:
        return list(self.passages.values())

    def claim_queries(self, text_field: str = "claim") -> list[tuple[str, str, str]]:
        """(claim_id, paper_id, text) triples for `retrieve_claims`; text_field is claim or original_claim."""
        return [(claim["claim_id"], claim["paper_id"], claim[text_field]) for claim in self.claims]

    def _index(
        self, index_id: str, passages: list[dict[str, Any]], vectors: Mapping[str, np.ndarray] | None
    ) -> PaperIndex:
        ids = [passage["passage_id"] for passage in passages]
        matrix = np.stack([vectors[passage_id] for passage_id in ids]) if vectors is not None and ids else None
        return PaperIndex(index_id, ids, [passage["text"] for passage in passages], matrix)

    def paper_index(self, paper_id: str, vectors: Mapping[str, np.ndarray] | None = None) -> PaperIndex | None:
        """One paper's passages as a PaperIndex (None for an unknown paper); vectors: passage id -> embedding."""
        if paper_id not in self.by_paper:
            return None
        return self._index(paper_id, self.paper_passages(paper_id), vectors)

    def global_index(self, vectors: Mapping[str, np.ndarray] | None = None) -> PaperIndex:
        """Every passage of every paper in one index: the harder, unrestricted setting."""
        return self._index("global-pool", self.all_passages(), vectors)

    def add_passage(self, paper_id: str, raw_text: str, role: str, source_row: str,
                    section: str | None = None) -> str | None:
        text = passage_text(raw_text)
        if not text:
            return None
        passage_id = passage_id_for(text)
        passage = self.passages.setdefault(passage_id, {"passage_id": passage_id, "text": text, "paper_ids": [],
                                                        "roles": [], "source_rows": [], "section": None})
        passage["section"] = passage["section"] or section
        # A quote that is also a gold paragraph stays one passage: it is gold, not a distractor.
        for key, value in (("paper_ids", paper_id), ("roles", role), ("source_rows", source_row)):
            if value not in passage[key]:
                passage[key].append(value)
        paper_list = self.by_paper.setdefault(paper_id, [])
        if passage_id not in paper_list:
            paper_list.append(passage_id)
        return passage_id


def build_pooled_passages(release: Mapping[str, list[dict[str, Any]]]) -> PooledPassages:
    """Passage pool of README evaluation 4; claim ids are B1 row ids, gold is the claim's paragraph. A passage's
    section is the B1 `section_name` of its paragraph; the quotes' `section` fields describe where a labeller
    looked rather than name one section, so a distractor has none."""
    pool = PooledPassages()
    for row in release.get("B1", []):
        gold_id = pool.add_passage(row["paper_id"], row["paragraph"], "gold", row["row_id"],
                                   row.get("section_name") or None)
        if gold_id is None:
            pool.skipped_claims.append({"claim_id": row["row_id"], "reason": "gold paragraph has no text"})
            continue
        pool.claims.append(
            {
                "claim_id": row["row_id"],
                "paper_id": row["paper_id"],
                "claim": row["claim"],
                "original_claim": row["original_claim"],
            }
        )
        pool.gold[row["row_id"]] = {gold_id}
    for row in release.get("B3", []):
        for quote in row.get("evidence", []):
            pool.add_passage(row["paper_id"], quote, "distractor", row["row_id"])
    return pool

