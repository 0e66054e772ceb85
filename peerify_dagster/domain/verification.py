"""Which claims a verifier is asked about, and why the others are not.

Every claim of the venue keeps one verification row per verifier: claims with retrieved passages
are sent to the model (`ok`); a claim whose paper has no chunks (no PDF, a truncated or unparseable
one) is `no_manuscript`, and a claim whose paper has chunks but whose ranking gave no passage is
`no_evidence`. Neither makes a model call, and neither is given a label.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

STATUS_OK = "ok"
STATUS_NO_MANUSCRIPT = "no_manuscript"
STATUS_NO_EVIDENCE = "no_evidence"


@dataclass(frozen=True)
class PlannedVerification:
    claim: Mapping[str, Any]  # a retrieval_queries row: claim_id, paper_id, claim_text, manuscript_label, ...
    status: str
    evidence_chunk_ids: list[str]  # top passages in rank order; empty unless status is ok
    reason: str | None = None  # why no call is made


def plan_verifications(
    claims: Iterable[Mapping[str, Any]],
    run_rows: Iterable[Mapping[str, Any]],
    papers_with_chunks: Collection[str],
    retriever: str,
    evidence_k: int,
) -> list[PlannedVerification]:
    """One entry per claim, in claim order: its top `evidence_k` passages of `retriever` (retrieval_runs rows),
    or the status and reason for which it gets no call."""
    hits: dict[str, list[tuple[int, str]]] = defaultdict(list)
    problems: dict[str, str] = {}
    unavailable: str | None = None
    for row in run_rows:
        if row["retriever"] != retriever:
            continue
        if row["status"] == "ok" and row["rank"] <= evidence_k:
            hits[row["claim_id"]].append((row["rank"], row["chunk_id"]))
        elif row["status"] == "unavailable":
            unavailable = f"unavailable: {row.get('error')}"
        elif row["status"] != "ok":
            problems[row["claim_id"]] = row["status"] + (f": {row['error']}" if row.get("error") else "")
    planned = []
    for claim in claims:
        claim_id, paper_id = claim["claim_id"], claim["paper_id"]
        if paper_id not in papers_with_chunks:
            planned.append(PlannedVerification(claim, STATUS_NO_MANUSCRIPT, [],
                                               f"paper {paper_id} has no usable manuscript (no chunks)"))
        elif hits.get(claim_id):
            planned.append(PlannedVerification(claim, STATUS_OK, [chunk for _, chunk in sorted(hits[claim_id])]))
        else:
            why = problems.get(claim_id) or unavailable or "no rows for this claim"
            planned.append(PlannedVerification(claim, STATUS_NO_EVIDENCE, [],
                                               f"retriever {retriever} gave no passages ({why})"))
    return planned
