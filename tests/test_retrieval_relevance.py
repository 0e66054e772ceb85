"""Retrieval metrics in two relevance modes: strict (the chunks holding the gold evidence; any of them found is a hit)
and section (any chunk of the gold evidence's section, as the Peerify reference code scores); gold evidence located
after Unicode, ligature, whitespace and hyphenation normalisation; unlocatable gold counted apart from claims without
gold; nDCG never above 1; and the asset materialised from a temporary lake, one row per (retriever, relevance)."""

from __future__ import annotations

import math

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.assets.retrieval import METRIC_SCHEMA, RUN_SCHEMA
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain.gold_evidence import (
    RELEVANCE_SECTION,
    RELEVANCE_STRICT,
    PaperChunk,
    claims_gold_unlocatable,
    gold_chunk_ids,
    normalise_evidence,
    section_key,
)
from peerify_dagster.domain.retrieval import QUERY_SCHEMA
from peerify_dagster.domain.retrieval_metrics import evaluate_runs, ndcg_at_k
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.lake import Lake
from tests.support import ALL_ASSETS

VENUE = "toy"
LOG2_3 = math.log2(3)

CHUNKS = {"P": [
    PaperChunk("P:0", "We study retrieval for peer review.", ("1 Introduction",)),
    PaperChunk("P:1", "Table 2 lists the datasets we evaluate on.", ("4 Experiments", "4.1 Datasets")),
    # the extracted text keeps the ligature glyphs and a word hyphenated across a line break
    PaperChunk("P:2", "We ﬁne-\ntune the eﬃcient encoder for 12,000\n steps on ﬂoating-point hard-\nware.",
               ("4 Experiments", "4.1 Datasets")),
    PaperChunk("P:3", "Recall@10 rises to 0.81 over all three datasets.", ("5 Results",)),
    PaperChunk("P:4", "Recall@10 rises to 0.81 over all three datasets.", ("A Extra results",)),  # a duplicate
]}


def claim(claim_id: str, sentence: str | None, section: str | None = None, **fields) -> dict:
    return {"claim_id": claim_id, "paper_id": "P", "evidence_sentence": sentence, "evidence_section": section,
            "gold_chunk_ids": None, **fields}


def ranked(claim_id: str, retriever: str, *chunk_ids: str) -> list[dict]:
    return [{"claim_id": claim_id, "retriever": retriever, "rank": rank, "chunk_id": chunk_id}
            for rank, chunk_id in enumerate(chunk_ids, start=1)]


def test_a_ligature_broken_hyphenated_sentence_is_located_after_normalisation():
    sentence = "We fine-tune the efficient encoder for 12,000 steps on floating-point hardware."
    assert gold_chunk_ids([claim("c1", sentence)], CHUNKS) == {"c1": {"P:2"}}
    assert normalise_evidence("eﬃ-\n cient ﬁ ﬂ ﬀ ﬃ ﬄ\u00ad") == "efficient fi fl ff ffi ffl"


def test_section_keys_compare_numbers_or_headings():
    assert section_key("4.2 Transfer on 3D Object Detection") == section_key("## 4.2 Transfer") == "4.2"
    assert section_key("A.3 Experimental Setup") == "A.3"
    assert section_key("A  Runtime") == section_key("a runtime") == "a runtime"
    assert section_key("") is None and section_key(None) is None


def test_strict_and_section_differ_where_the_section_holds_other_chunks():
    # The gold sentence is in P:2 (section 4.1 Datasets); the retriever ranks P:1 (same section) first, P:2 third.
    claims = [claim("c1", "We fine-tune the efficient encoder", "4.1 Datasets")]
    run = ranked("c1", "bm25", "P:1", "P:0", "P:2")
    strict = gold_chunk_ids(claims, CHUNKS, RELEVANCE_STRICT)
    section = gold_chunk_ids(claims, CHUNKS, RELEVANCE_SECTION)
    assert (strict, section) == ({"c1": {"P:2"}}, {"c1": {"P:1", "P:2"}})
    [by_strict] = evaluate_runs(run, strict, ks=(1, 5))
    [by_section] = evaluate_runs(run, section, ks=(1, 5))
    assert (by_strict["recall@1"], by_strict["recall@5"], by_strict["mrr@5"]) == (0.0, 1.0, pytest.approx(1 / 3))
    assert (by_section["recall@1"], by_section["recall@5"], by_section["mrr@5"]) == (1.0, 1.0, 1.0)
    assert by_section["ndcg@5"] == pytest.approx((1 + 1 / 2) / (1 + 1 / LOG2_3))
    # A section heading on the chunk's path counts too: "4 Experiments" holds both 4.1 chunks.
    assert gold_chunk_ids([claim("c2", "We fine-tune the efficient encoder", "4 Experiments")], CHUNKS,
                          RELEVANCE_SECTION) == {"c2": {"P:1", "P:2"}}


def test_duplicated_gold_is_one_hit_and_ndcg_never_exceeds_one():
    claims = [claim("c1", "Recall@10 rises to 0.81 over all three datasets.", "5 Results")]
    gold = gold_chunk_ids(claims, CHUNKS)
    assert gold == {"c1": {"P:3", "P:4"}}  # the evidence is in two chunks
    [both] = evaluate_runs(ranked("c1", "dense", "P:3", "P:4", "P:0"), gold, ks=(1, 10))
    assert (both["recall@1"], both["recall@10"], both["mrr@10"], both["ndcg@10"]) == (1.0, 1.0, 1.0, 1.0)
    [one] = evaluate_runs(ranked("c1", "dense", "P:4", "P:0"), gold, ks=(1, 10))
    assert one["recall@10"] == 1.0  # finding either copy finds the evidence, not half of it
    assert one["ndcg@10"] == pytest.approx(1 / (1 + 1 / LOG2_3))
    # The reference scorer's ideal DCG counts one relevant item: both copies retrieved would score 1 + 1/log2(3).
    assert ndcg_at_k(["P:3", "P:4", "P:3"], {"P:3", "P:4"}, 10) <= 1.0


def test_unlocatable_gold_is_counted_apart_from_claims_without_gold():
    claims = [
        claim("c1", "Table 2 lists the datasets we evaluate on."),
        claim("c2", "A sentence the manuscript never says.", "9 Nowhere"),
        claim("c3", None),  # no gold by design: the manuscript cannot decide it
        claim("c4", "Anything.", paper_id="Q"),  # its paper has no chunks
    ]
    run = ranked("c1", "bm25", "P:1") + ranked("c2", "bm25", "P:0") + ranked("c3", "bm25", "P:0") + \
        [{"claim_id": "c4", "retriever": "bm25", "rank": None, "chunk_id": None}]
    for relevance in (RELEVANCE_STRICT, RELEVANCE_SECTION):
        gold = gold_chunk_ids(claims, CHUNKS, relevance)
        unlocatable = claims_gold_unlocatable(claims, CHUNKS, gold)
        assert unlocatable == {"c2"}
        [row] = evaluate_runs(run, gold, ks=(1,), without_manuscript={"c4"}, gold_unlocatable=unlocatable)
        assert (row["n_claims"], row["n_claims_scored"], row["n_claims_without_manuscript"],
                row["n_claims_without_gold"], row["n_claims_gold_unlocatable"]) == (2, 1, 1, 1, 1)
        assert row["recall@1"] == 0.5  # c1 found, c4 (lost manuscript) a miss; c2 and c3 not averaged


def test_named_gold_chunks_that_are_gone_are_unlocatable():
    claims = [claim("pc1", None, "4.1 Datasets", gold_chunk_ids=["P:gone"])]
    strict = gold_chunk_ids(claims, CHUNKS)
    assert strict == {} and claims_gold_unlocatable(claims, CHUNKS, strict) == {"pc1"}
    # the section still locates it
    assert gold_chunk_ids(claims, CHUNKS, RELEVANCE_SECTION) == {"pc1": {"P:1", "P:2"}}


def test_retrieval_metrics_materialise_one_row_per_retriever_and_relevance(tmp_path):
    lake = Lake(tmp_path / "lake")
    queries = [
        {"venue": VENUE, "claim_id": "k1", "paper_id": "P", "source": "answer_key", "claim_text": "fine-tuning",
         "evidence_section": "4.1 Datasets", "evidence_sentence": "We fine-tune the efficient encoder"},
        {"venue": VENUE, "claim_id": "k2", "paper_id": "P", "source": "answer_key", "claim_text": "nowhere",
         "evidence_section": "9 Nowhere", "evidence_sentence": "A sentence the manuscript never says."},
        {"venue": VENUE, "claim_id": "pc1", "paper_id": "P", "source": "paper_sourced", "claim_text": "results",
         "evidence_section": "5 Results", "gold_chunk_ids": ["P:3"]},
        {"venue": VENUE, "claim_id": "r1", "paper_id": "P", "source": "review", "claim_text": "a review claim"},
    ]
    lake.write_table("retrieval_queries", VENUE, pl.DataFrame(queries, schema=QUERY_SCHEMA))
    chunks = [{"venue": VENUE, "paper_id": "P", "chunk_id": c.chunk_id, "text": c.text,
               "section_path": list(c.section_path), "order": order} for order, c in enumerate(CHUNKS["P"])]
    lake.write_table("chunks", VENUE, pl.DataFrame(chunks))
    runs = [*ranked("k1", "bm25", "P:1", "P:2"), *ranked("k2", "bm25", "P:0"), *ranked("pc1", "bm25", "P:4", "P:3"),
            *ranked("r1", "bm25", "P:0")]
    runs = [{"venue": VENUE, "paper_id": "P", "status": "ok", **r} for r in runs]
    runs.append({"venue": VENUE, "retriever": "bm25+rerank", "status": "unavailable", "error": "no cross-encoder"})
    lake.write_table("retrieval_runs", VENUE, pl.DataFrame(runs, schema=RUN_SCHEMA))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, [VENUE])
    result = dg.materialize(ALL_ASSETS, selection=["retrieval_metrics"], instance=instance, partition_key=VENUE,
                            resources=build_resources(str(lake.root)), raise_on_error=False)
    assert result.success
    frame = lake.read_table("retrieval_metrics", VENUE)
    assert frame.schema == pl.Schema(METRIC_SCHEMA)
    rows = {(r["retriever"], r["relevance"]): r for r in frame.iter_rows(named=True)}
    assert sorted(rows) == [("bm25", "section"), ("bm25", "strict"), ("bm25+rerank", "section"),
                            ("bm25+rerank", "strict")]
    strict, section = rows[("bm25", "strict")], rows[("bm25", "section")]
    for row in (strict, section):  # k1 and pc1 scored, k2 unlocatable, r1 without gold by design
        assert (row["n_claims"], row["n_claims_scored"], row["n_claims_gold_unlocatable"],
                row["n_claims_without_gold"]) == (2, 2, 1, 1)
    # k1: gold P:2 at rank 2 (strict) or P:1 of its section at rank 1; pc1: P:3 at rank 2, P:4 is in another section
    assert (strict["recall@1"], strict["mrr@10"]) == (0.0, pytest.approx(0.5))
    assert (section["recall@1"], section["mrr@10"]) == (0.5, pytest.approx(0.75))
    assert rows[("bm25+rerank", "strict")]["status"] == "unavailable"
    [metadata] = [e.event_specific_data.materialization.metadata for e in result.all_events
                  if e.is_step_materialization]
    assert metadata["claims_with_gold"].value == 3
    assert metadata["claims_gold_unlocatable"].value == {"strict": ["k2"], "section": ["k2"]}
    assert all((column.description or "").strip() for column in metadata["dagster/column_schema"].value.columns)
