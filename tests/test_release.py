"""Tests of domain/release.py: the release importer on small files written here and on the shared release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.release import (
    RELEASE_FILES,
    build_pooled_passages,
    load_release,
    passage_id_for,
    passage_text,
    split_evidence_quotes,
)
from peerify_dagster.domain.retrieval import Bm25Retriever, retrieve_claims
from peerify_dagster.domain.retrieval_metrics import evaluate_runs

SHARED_RELEASE = Path(__file__).resolve().parents[2] / "shared" / "peerify-release"
EXPECTED_ROWS = {"B1": 295, "B3": 455, "B4": 128, "B6": 106}


@pytest.fixture(scope="module")
def shared_release() -> dict:
    if not SHARED_RELEASE.is_dir():
        pytest.skip(f"shared Peerify release not present at {SHARED_RELEASE}")
    return load_release(SHARED_RELEASE)


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        ("", []),
        (None, []),
        ("Plain quote without marks.", ["Plain quote without marks."]),
        ('Abstract: "We propose a new method here." Section 3: "It runs twice as fast."',
         ["We propose a new method here.", "It runs twice as fast."]),
        ("\u201cCurly quoted evidence sentence.\u201d and \u201cAnother curly quoted one.\u201d",
         ["Curly quoted evidence sentence.", "Another curly quoted one."]),
        ([{"quote": "From an object.", "section": "Intro"}, "From a string."], ["From an object.", "From a string."]),
    ],
)
def test_split_evidence_quotes(evidence, expected: list[str]) -> None:
    assert split_evidence_quotes(evidence) == expected


def write_jsonl(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def b1_row(paper_id: str, claim: str, paragraph: str) -> str:
    return json.dumps({"claim": claim, "original_claim": claim + " (original)", "paragraph": paragraph,
                       "paper_id": paper_id, "label": "Supported"})


def test_bad_rows_are_reported_by_file_and_line_and_the_rest_loads(tmp_path: Path) -> None:
    write_jsonl(tmp_path / RELEASE_FILES["B1"], [b1_row("P1", "claim one", "Paragraph one."), "{not json"])
    write_jsonl(tmp_path / RELEASE_FILES["B3"], [
        json.dumps({"claim": "c", "paper_id": "P1", "label": "Contradicted",
                    "evidence": ["q1", {"quote": "q2"}], "section": "Intro"}),
        json.dumps({"claim": "c", "paper_id": "P1", "label": "Maybe", "evidence": "x"}),
        json.dumps({"claim": "c", "paper_id": "P1", "label": "Undetermined", "evidence": 42}),
    ])
    write_jsonl(tmp_path / RELEASE_FILES["B4"], [
        json.dumps({"claim": "c", "paper_id": "P1", "b2_label": "Contradicted", "b3_label": "partially supported"}),
    ])
    # B6 is missing altogether.

    release = load_release(tmp_path)

    assert [row["row_id"] for row in release["B1"]] == ["B1:1"]
    assert [row["label"] for row in release["B3"]] == ["Not Supported"]
    assert release["B3"][0]["label_raw"] == "Contradicted"
    assert release["B3"][0]["evidence"] == ["q1", "q2"]
    assert release["B3"][0]["section"] == ["Intro"]
    assert (release["B4"][0]["b2_label"], release["B4"][0]["b3_label"]) == ("Not Supported", "Partially Supported")
    assert release["B6"] == []
    messages = {(error["file"], error["line"]): error["message"] for error in release["errors"]}
    assert set(messages) == {
        (RELEASE_FILES["B1"], 2), (RELEASE_FILES["B3"], 2), (RELEASE_FILES["B3"], 3), (RELEASE_FILES["B6"], None),
    }
    assert "'Maybe' is not a known label" in messages[(RELEASE_FILES["B3"], 2)]
    assert messages[(RELEASE_FILES["B3"], 3)].startswith(f"{RELEASE_FILES['B3']}:3: ")
    assert "missing" in messages[(RELEASE_FILES["B6"], None)]


def test_load_release_refuses_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no-release"):
        load_release(tmp_path / "no-release")


def test_pool_deduplicates_paragraphs_and_keeps_gold_out_of_distractors() -> None:
    paragraph = "Shared gold paragraph.\n<!-- image -->"
    release = {
        "B1": [
            {"row_id": "B1:1", "paper_id": "P1", "claim": "a", "original_claim": "a0", "paragraph": paragraph},
            {"row_id": "B1:2", "paper_id": "P1", "claim": "b", "original_claim": "b0", "paragraph": paragraph},
            {"row_id": "B1:3", "paper_id": "P2", "claim": "c", "original_claim": "c0", "paragraph": "Other paragraph."},
        ],
        "B3": [{"row_id": "B3:1", "paper_id": "P1", "evidence": ["Shared gold paragraph.", "A distractor quote."]}],
    }
    pool = build_pooled_passages(release)
    gold_id = passage_id_for("Shared gold paragraph.")

    assert passage_text(paragraph) == "Shared gold paragraph."
    assert pool.gold == {"B1:1": {gold_id}, "B1:2": {gold_id}, "B1:3": {passage_id_for("Other paragraph.")}}
    assert len(pool.passages) == 3
    assert pool.passages[gold_id]["roles"] == ["gold", "distractor"]
    assert len(pool.by_paper["P1"]) == 2 and len(pool.by_paper["P2"]) == 1
    assert pool.paper_index("P2").chunk_ids == [passage_id_for("Other paragraph.")]
    assert pool.paper_index("unknown") is None
    assert len(pool.global_index()) == 3
    assert pool.claim_queries("original_claim")[0] == ("B1:1", "P1", "a0")


def test_shared_release_loads_every_row_with_normalised_labels(shared_release: dict) -> None:
    assert {kind: len(shared_release[kind]) for kind in EXPECTED_ROWS} == EXPECTED_ROWS
    assert shared_release["errors"] == []
    label_fields_of = {"B1": ["label"], "B3": ["label"], "B6": ["label"], "B4": ["b2_label", "b3_label"]}
    for kind, label_fields in label_fields_of.items():
        for row in shared_release[kind]:
            for name in label_fields:
                assert row[name] in LABELS, (row["row_id"], row[name])
                assert row[f"{name}_raw"]
    raw_contradicted = [row for row in shared_release["B3"] if row["label_raw"] == "Contradicted"]
    assert raw_contradicted and {row["label"] for row in raw_contradicted} == {"Not Supported"}
    for row in shared_release["B3"] + shared_release["B6"]:
        assert isinstance(row["evidence"], list) and all(isinstance(quote, str) for quote in row["evidence"])
        assert isinstance(row["section"], list)
    for row in shared_release["B4"]:
        assert isinstance(row["b2_evidence"], list) and isinstance(row["b3_evidence"], list)


def test_shared_release_pool_and_bm25_recall(shared_release: dict) -> None:
    pool = build_pooled_passages(shared_release)
    b1_rows = shared_release["B1"]
    assert len(pool.claims) == len(b1_rows) and not pool.skipped_claims
    for row in b1_rows:
        (gold_id,) = pool.gold[row["row_id"]]
        assert gold_id in pool.passages
        assert gold_id in pool.by_paper[row["paper_id"]]
    assert sum("distractor" in passage["roles"] for passage in pool.passages.values()) > len(pool.gold) / 2

    rows = retrieve_claims(pool.claim_queries("claim"), pool.paper_index, [Bm25Retriever()], None, k=10)
    (result,) = evaluate_runs(rows, pool.gold, ks=(1, 5, 10))
    assert result["n_claims"] == len(b1_rows)
    assert 0.0 < result["recall@10"] < 1.0
    assert result["recall@1"] <= result["recall@5"] <= result["recall@10"]
    # Retrieval stays within the claim's paper.
    paper_of_claim = {claim["claim_id"]: claim["paper_id"] for claim in pool.claims}
    for row in rows:
        if row["chunk_id"] is not None:
            assert row["chunk_id"] in pool.by_paper[paper_of_claim[row["claim_id"]]]
