"""Gold evidence from an answer key: loading, and matching evidence sentences to chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from peerify_dagster.domain.gold_evidence import ClaimKeyError, PaperChunk, gold_chunk_ids, load_claim_key

CLAIM_KEY = Path(__file__).resolve().parents[1] / "peerify_dagster" / "sample_venue" / "claim_key.yaml"


def test_sample_claim_key_loads_with_evidence_for_decidable_claims():
    rows = load_claim_key(CLAIM_KEY)
    assert len(rows) >= 30 and len({r["claim_id"] for r in rows}) == len(rows)
    decidable = [r for r in rows if r["manuscript_label"] != "Not Determined"]
    assert decidable and all(r["evidence_sentence"] for r in decidable)
    assert all(r["evidence_sentence"] is None for r in rows if r["kind"] == "subjective")


def test_gold_matches_sentences_across_line_breaks_and_only_in_the_claims_paper():
    claims = [
        {"claim_id": "c1", "paper_id": "P1", "evidence_sentence": "We train for 40 epochs."},
        {"claim_id": "c2", "paper_id": "P2", "evidence_sentence": "We train for 40 epochs."},
        {"claim_id": "c3", "paper_id": "P1", "evidence_sentence": None},
    ]
    chunks = {
        "P1": [PaperChunk("P1:0", "Setup. We train\nfor  40 epochs. Then we stop."), PaperChunk("P1:1", "Unrelated.")],
        "P2": [PaperChunk("P2:0", "We train for 4 epochs.")],
    }
    assert gold_chunk_ids(claims, chunks) == {"c1": {"P1:0"}}


def test_claim_key_entry_without_forum_is_named(tmp_path):
    path = tmp_path / "key.yaml"
    path.write_text("claims:\n  - id: X-1\n    claim: Something.\n")
    with pytest.raises(ClaimKeyError, match="X-1"):
        load_claim_key(path)
