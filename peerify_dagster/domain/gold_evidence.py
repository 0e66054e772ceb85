"""Claims with known evidence: read an answer key and find the chunks that hold each evidence sentence.

Gold is defined by text, not by chunk id, so it survives re-chunking: a chunk is gold for a claim
when it contains the claim's evidence sentence (whitespace-normalised).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Mapping

import yaml


class ClaimKeyError(ValueError):
    """An answer-key entry that cannot be used; the message names the claim."""


def normalise_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def load_claim_key(path: Path) -> list[dict]:
    """Rows: claim_id, paper_id, review_id, claim_text, kind, manuscript_label, rebuttal_label,
    evidence_section, evidence_sentence (None when the manuscript cannot decide the claim)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    rows = []
    for position, entry in enumerate(data.get("claims") or []):
        claim_id = entry.get("id") if isinstance(entry, dict) else None
        if not claim_id or not entry.get("forum") or not entry.get("claim"):
            raise ClaimKeyError(f"{Path(path).name}: claim #{position} ({claim_id or 'no id'}) needs id, forum and claim")
        evidence = entry.get("evidence") or {}
        rows.append({
            "claim_id": claim_id,
            "paper_id": entry["forum"],
            "review_id": entry.get("review_note_id"),
            "claim_text": entry["claim"],
            "kind": entry.get("kind"),
            "manuscript_label": entry.get("manuscript_label"),
            "rebuttal_label": entry.get("rebuttal_label"),
            "evidence_section": evidence.get("section"),
            "evidence_sentence": evidence.get("sentence"),
        })
    return rows


def gold_chunk_ids(
    claims: Iterable[Mapping], chunks_by_paper: Mapping[str, list[tuple[str, str]]]
) -> dict[str, set[str]]:
    """claim_id -> ids of the chunks of the claim's paper containing its evidence sentence; a claim that names its
    gold chunks (`gold_chunk_ids`, PaperSourced claims) keeps those of them the paper still has."""
    gold: dict[str, set[str]] = defaultdict(set)
    for claim in claims:
        if claim.get("gold_chunk_ids"):
            present = {chunk_id for chunk_id, _ in chunks_by_paper.get(claim["paper_id"], [])}
            if named := set(claim["gold_chunk_ids"]) & present:
                gold[claim["claim_id"]] = named
            continue
        sentence = claim.get("evidence_sentence")
        if not sentence:
            continue
        needle = normalise_space(sentence)
        for chunk_id, text in chunks_by_paper.get(claim["paper_id"], []):
            if needle in normalise_space(text):
                gold[claim["claim_id"]].add(chunk_id)
    return dict(gold)


def claims_without_manuscript(
    claims: Iterable[Mapping], chunks_by_paper: Mapping[str, list[tuple[str, str]]]
) -> set[str]:
    """Ids of the claims with an evidence sentence whose paper has no chunks (no PDF, or one that could not be
    parsed): their gold is known to exist but cannot be found, which the metrics must count, not drop."""
    return {claim["claim_id"] for claim in claims
            if claim.get("evidence_sentence") and not chunks_by_paper.get(claim["paper_id"])}
