"""Claims with known evidence: read an answer key and find the chunks that hold each claim's gold evidence.

Gold is defined by text, not by chunk id, so it survives re-chunking: a chunk is gold for a claim when it contains
the claim's evidence sentence, both sides normalised (`normalise_evidence`) so that what PDF extraction does to text
(ligature glyphs, line breaks, words hyphenated across lines) does not hide it. Two relevance modes:

- strict: the chunks holding the gold evidence (the evidence sentence; a PaperSourced claim's named gold chunks);
- section (as the Peerify reference code scores): also every chunk of the gold evidence's section, sections compared
  by their number ("4.2 Transfer" ~ "4.2") or, unnumbered, by their normalised heading; a chunk belongs to a
  section when the section is anywhere on its section path (its subsections count too).

A claim has gold by design when it names gold chunks or an evidence sentence (review claims and answer-key claims the
manuscript cannot decide have none). A claim with gold whose paper has chunks but none of them holds it is
*unlocatable*: counted apart, never mistaken for a claim without gold.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

RELEVANCE_STRICT = "strict"
RELEVANCE_SECTION = "section"
RELEVANCE_MODES = (RELEVANCE_STRICT, RELEVANCE_SECTION)

_SOFT_HYPHEN = "\u00ad"
_HYPHENS = str.maketrans({"\u2010": "-", "\u2011": "-"})  # NFKC leaves the Unicode hyphen as it is
_HYPHEN_JOIN = re.compile(r"(?<=\w)-\s*(?=\w)")
_SECTION_NUMBER = re.compile(r"^#*\s*([A-Z]?\.?\d+(?:\.\d+)*)")


def normalise_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def normalise_evidence(text: str) -> str:
    """The form evidence is matched in: Unicode NFKC (which also splits the ligatures ﬁ ﬂ ﬀ ﬃ ﬄ into letters), soft
    hyphens dropped, a hyphen between word characters joined with any whitespace after it (so "exam-\\nple",
    "example", "fine-tuning" and "fine-\\ntuning" meet), whitespace runs as one space."""
    text = unicodedata.normalize("NFKC", text).replace(_SOFT_HYPHEN, "").translate(_HYPHENS)
    return normalise_space(_HYPHEN_JOIN.sub("", text))


def section_key(heading: str | None) -> str | None:
    """What two section headings are compared by: the section number ("4.2 Transfer" -> "4.2", "A.3 Setup" -> "A.3"),
    else the normalised, case-folded heading; None for no heading."""
    if not heading or not heading.strip():
        return None
    heading = unicodedata.normalize("NFKC", heading).strip()
    if number := _SECTION_NUMBER.match(heading):
        return number.group(1)
    return normalise_space(heading.lstrip("#")).casefold()


@dataclass(frozen=True)
class PaperChunk:
    chunk_id: str
    text: str
    section_path: tuple[str, ...] = ()


class ClaimKeyError(ValueError):
    """An answer-key entry that cannot be used; the message names the claim."""


def load_claim_key(path: Path) -> list[dict]:
    """Rows: claim_id, paper_id, review_id, claim_text, kind, manuscript_label, rebuttal_label,
    evidence_section, evidence_sentence (None when the manuscript cannot decide the claim)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    rows = []
    for position, entry in enumerate(data.get("claims") or []):
        claim_id = entry.get("id") if isinstance(entry, dict) else None
        if not claim_id or not entry.get("forum") or not entry.get("claim"):
            raise ClaimKeyError(f"{Path(path).name}: claim #{position} ({claim_id or 'no id'}) needs id, forum and "
                                f"claim")
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


def has_gold(claim: Mapping) -> bool:
    """Whether the claim has gold evidence by design: named gold chunks or an evidence sentence."""
    return bool(claim.get("gold_chunk_ids")) or bool(claim.get("evidence_sentence"))


def gold_chunk_ids(claims: Iterable[Mapping], chunks_by_paper: Mapping[str, Sequence[PaperChunk]],
                   relevance: str = RELEVANCE_STRICT) -> dict[str, set[str]]:
    """claim_id -> ids of the chunks of the claim's paper that are relevant to it under `relevance`; claims with no
    relevant chunk are absent. Strict: the chunks containing the evidence sentence (normalised), or the named gold
    chunks the paper still has (PaperSourced claims). Section: those plus every chunk of the evidence's section."""
    if relevance not in RELEVANCE_MODES:
        raise ValueError(f"unknown relevance mode {relevance!r}; modes: {list(RELEVANCE_MODES)}")
    gold: dict[str, set[str]] = defaultdict(set)
    matchable: dict[str, list[tuple[str, str, set[str | None]]]] = {}  # paper -> (chunk id, text, section keys)
    for claim in claims:
        if not has_gold(claim):
            continue
        paper_id = claim["paper_id"]
        if paper_id not in matchable:  # each paper's chunks normalised once, not once per claim
            matchable[paper_id] = [(c.chunk_id, normalise_evidence(c.text), {section_key(h) for h in c.section_path})
                                   for c in chunks_by_paper.get(paper_id, [])]
        named = set(claim.get("gold_chunk_ids") or [])
        needle = normalise_evidence(claim["evidence_sentence"]) if claim.get("evidence_sentence") else None
        section = section_key(claim.get("evidence_section")) if relevance == RELEVANCE_SECTION else None
        for chunk_id, text, sections in matchable[paper_id]:
            if chunk_id in named or (needle and needle in text) or (section and section in sections):
                gold[claim["claim_id"]].add(chunk_id)
    return dict(gold)


def claims_without_manuscript(claims: Iterable[Mapping],
                              chunks_by_paper: Mapping[str, Sequence[PaperChunk]]) -> set[str]:
    """Ids of the claims with gold evidence whose paper has no chunks (no PDF, or one that could not be parsed): their
    gold is known to exist but cannot be found, which the metrics must count, not drop."""
    return {claim["claim_id"] for claim in claims if has_gold(claim) and not chunks_by_paper.get(claim["paper_id"])}


def claims_gold_unlocatable(claims: Iterable[Mapping], chunks_by_paper: Mapping[str, Sequence[PaperChunk]],
                            gold: Mapping[str, set[str]]) -> set[str]:
    """Ids of the claims with gold evidence whose paper has chunks but none of them is relevant (`gold`): the evidence
    sentence is in no chunk even after normalisation, or the named gold chunks are gone."""
    return {claim["claim_id"] for claim in claims
            if has_gold(claim) and chunks_by_paper.get(claim["paper_id"]) and not gold.get(claim["claim_id"])}
