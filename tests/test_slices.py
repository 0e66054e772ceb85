"""Benchmark slices: membership rules on constructed label tables, the venue's `slices:` options, every
great-expectations gate seen failing (naming the failing rows) and passing, and a blocking gate stopping what reads
the slices in a real materialisation (upstream tables written to a temporary lake, the asset and its checks run
unchanged)."""

from __future__ import annotations

import re

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.assets.arbitration import CANONICAL_SCHEMA
from peerify_dagster.assets.audit import HUMAN_AUDIT_SCHEMA
from peerify_dagster.assets.claims import CLAIM_TYPE_SCHEMA, PAPER_CLAIM_SCHEMA, REVIEW_CLAIM_SCHEMA
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain import slices as rules
from peerify_dagster.domain.venues import RegistryError, load_registry
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.quality.expectations import Expect, gate
from peerify_dagster.quality.slice_gates import GATES, gate_expectations
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from tests.support import ALL_ASSETS, write_registry

S, P, N, D = "Supported", "Partially Supported", "Not Supported", "Not Determined"
VENUE = "toy"


def _canonical(claim_id: str, source: str, label: str | None, provenance: str, decision_id: str | None = None):
    return {"venue": VENUE, "item_id": f"{claim_id}:{source}", "claim_id": claim_id, "paper_id": "P1",
            "review_id": "R1", "source": source, "label": label, "provenance": provenance,
            "decision_id": decision_id, "label_a": label, "label_b": label, "call_id_a": f"{claim_id}-{source}-a",
            "call_id_b": f"{claim_id}-{source}-b"}


def upstream() -> dict[str, pl.DataFrame]:
    """Review claims c1..c4, one PaperSourced claim and a two-item audit: c1 agreed on both sources (HighAgreement),
    c2's manuscript item is pending, c3's thread label came from a human decision and differs from its manuscript
    label, c4 had no manuscript (unlabelled); the audit settled c1 only."""
    canonical = [
        _canonical("c1", "thread", S, "agreed"), _canonical("c1", "manuscript", S, "agreed"),
        _canonical("c2", "thread", N, "agreed"), _canonical("c2", "manuscript", None, "pending"),
        _canonical("c3", "thread", P, "a_upheld", decision_id="d3"), _canonical("c3", "manuscript", D, "agreed"),
        _canonical("c4", "manuscript", None, "unlabelled"),
    ]
    claims = [{"venue": VENUE, "claim_id": c, "paper_id": "P1", "review_id": "R1", "claim_text": f"claim {c}"}
              for c in ("c1", "c2", "c3", "c4")]
    types = [{"venue": VENUE, "claim_id": c, "claim_type": t} for c, t in
             (("c1", "factual"), ("c2", "factual"), ("c3", "factual"), ("c4", None))]
    papers = [{"venue": VENUE, "claim_id": "pc1", "paper_id": "P1", "claim_text": "paper claim", "label": S,
               "gold_chunk_ids": ["P1-3"], "claim_call_id": "w1", "rephrase_call_id": "r1"}]
    audit = [{"venue": VENUE, "item_id": "c1:thread", "claim_id": "c1", "claim_type": "factual",
              "consensus_label": S, "consensus_source": "agreement"},
             {"venue": VENUE, "item_id": "c2:thread", "claim_id": "c2", "claim_type": "factual",
              "consensus_label": None, "consensus_source": "pending"}]
    return {
        "paper_claims": pl.DataFrame(papers, schema=PAPER_CLAIM_SCHEMA),
        "canonical_labels": pl.DataFrame(canonical, schema=CANONICAL_SCHEMA),
        "review_claims": pl.DataFrame(claims, schema=REVIEW_CLAIM_SCHEMA),
        "claim_types": pl.DataFrame(types, schema=CLAIM_TYPE_SCHEMA),
        "human_audit": pl.DataFrame(audit, schema=HUMAN_AUDIT_SCHEMA),
    }


def build(config: rules.SliceConfig | None = None, **replace: pl.DataFrame) -> rules.Slices:
    tables = {**upstream(), **replace}
    return rules.build_slices(VENUE, config or rules.SliceConfig(), tables["paper_claims"], tables["canonical_labels"],
                              tables["review_claims"], tables["claim_types"], tables["human_audit"])


def members(frame: pl.DataFrame, name: str) -> dict[str, str]:
    return dict(frame.filter(pl.col("slice") == name).select("claim_id", "gold_label").iter_rows())


def test_membership_rules_on_a_constructed_label_table():
    built = build()
    frame = built.frame
    assert frame.columns == list(rules.SLICE_COLUMNS)
    assert members(frame, rules.PAPER_SOURCED) == {"pc1": S}
    assert members(frame, rules.REBUTTAL_SOURCED) == {"c1": S, "c2": N, "c3": P}
    assert members(frame, rules.LLM_JUDGED) == {"c1": S, "c3": D}  # c2 pending, c4 unlabelled: left out
    assert members(frame, rules.HIGH_AGREEMENT) == {"c1": S}  # c3 differs across sources, c2 has no manuscript label
    assert members(frame, rules.VERIFIABLE_ONLY) == {"c1": S, "c3": D}  # factual claims of LLMJudged (the default)
    assert members(frame, rules.HUMAN_VERIFIED) == {"c1": S}
    assert built.excluded == {rules.LLM_JUDGED: {"pending": 1, "unlabelled": 1},
                              rules.HUMAN_VERIFIED: {"no_consensus": 1}}
    def row(name: str, claim: str) -> dict:
        return frame.filter((pl.col("slice") == name) & (pl.col("claim_id") == claim)).row(0, named=True)

    paper = row(rules.PAPER_SOURCED, "pc1")
    assert (paper["gold_chunk_ids"], paper["gold_call_ids"], paper["review_id"]) == (["P1-3"], ["w1", "r1"], None)
    upheld = row(rules.REBUTTAL_SOURCED, "c3")
    assert (upheld["gold_provenance"], upheld["gold_decision_ids"], upheld["claim_text"]) == ("a_upheld", ["d3"],
                                                                                            "claim c3")
    agreed = row(rules.HIGH_AGREEMENT, "c1")
    assert agreed["gold_provenance"] == "thread=agreed;manuscript=agreed"
    assert agreed["gold_call_ids"] == ["c1-thread-a", "c1-thread-b", "c1-manuscript-a", "c1-manuscript-b"]


def test_verifiable_only_base_and_untyped_claims_are_configurable_and_counted():
    types = upstream()["claim_types"].with_columns(
        pl.when(pl.col("claim_id") == "c2").then(pl.lit("subjective")).otherwise("claim_type").alias("claim_type"))
    built = build(rules.SliceConfig.from_mapping({"verifiable_only_base": "rebuttal_sourced"}), claim_types=types)
    assert members(built.frame, rules.VERIFIABLE_ONLY) == {"c1": S, "c3": P}
    assert built.excluded[rules.VERIFIABLE_ONLY] == {"subjective": 1}


@pytest.mark.parametrize("entry, message", [
    ({"verifiable_only_base": "everything"}, "slices: verifiable_only_base must be one of"),
    ({"min_size": {"Rebuttal": 3}}, "slices: min_size: unknown slice 'Rebuttal'"),
    ({"min_size": {"LLMJudged": -1}}, "slices: min_size.LLMJudged must be a non-negative integer"),
    ({"max_label_share": 1.5}, "slices: max_label_share must be a number in (0, 1]"),
    ({"minimum": 3}, "slices: unknown option(s) ['minimum']"),
])
def test_a_bad_slices_option_names_the_venue_and_the_key(entry, message, tmp_path):
    registry = write_registry(tmp_path, "Bad.cc/2024", source="api", seed=1, slices=entry)
    with pytest.raises(RegistryError, match=re.escape(f"venue 'Bad.cc/2024': {message}")):
        load_registry(registry)
    good = write_registry(tmp_path, "Good.cc/2024", source="api", seed=1, slices={"min_size": {"HumanVerified": 5}})
    assert rules.SliceConfig.from_mapping(load_registry(good)["Good.cc/2024"].slices).min_size[
        rules.HUMAN_VERIFIED] == 5


def run_gate(name: str, frame: pl.DataFrame, config: rules.SliceConfig | None = None) -> dg.AssetCheckResult:
    config = config or rules.SliceConfig()
    [blocking] = [b for n, b, _ in GATES if n == name]
    return gate(name, gate_expectations(frame, rules.label_distribution(frame), config)[name], blocking)


def _set(frame: pl.DataFrame, name: str, claim: str, **values) -> pl.DataFrame:
    hit = (pl.col("slice") == name) & (pl.col("claim_id") == claim)
    return frame.with_columns(*(pl.when(hit).then(pl.lit(v, dtype=frame.schema[c])).otherwise(c).alias(c)
                                for c, v in values.items()))


_SKEWED = rules.SliceConfig.from_mapping({"distribution_min_items": 2, "max_label_share": 0.6})
# gate -> (how the good slices are broken, the failing ids its metadata must name, config)
GATE_CASES = {
    "gold_labels_in_vocabulary": (lambda f: _set(_set(f, "RebuttalSourced", "c2", gold_label="Contradicted"),
                                                 "LLMJudged", "c3", gold_label=None),
                                  ["LLMJudged:c3", "RebuttalSourced:c2"], None),
    "one_row_per_claim_per_slice": (lambda f: pl.concat([f, f.filter(pl.col("claim_id") == "c1").head(1)]),
                                    ["RebuttalSourced:c1"], None),
    "paper_sourced_all_supported": (lambda f: _set(f, "PaperSourced", "pc1", gold_label=N), ["PaperSourced:pc1"],
                                    None),
    "high_agreement_in_both_sources": (lambda f: _set(f, "HighAgreement", "c1", gold_label=P),
                                       ["HighAgreement:c1"], None),
    "paper_sourced_gold_chunks_present": (lambda f: _set(f, "PaperSourced", "pc1", gold_chunk_ids=[]),
                                          ["PaperSourced:pc1"], None),
    "slice_sizes_at_least_minimum": (lambda f: f.filter(pl.col("slice") != "LLMJudged"), ["LLMJudged"], None),
    "label_distribution_within_bounds": (lambda f: _set(f, "LLMJudged", "c3", gold_label=S), ["LLMJudged:Supported"],
                                         _SKEWED),
}


@pytest.mark.parametrize("name", [name for name, _, _ in GATES])
def test_each_gate_passes_on_good_slices_and_names_the_rows_that_fail_it(name):
    breaks, failing, config = GATE_CASES[name]
    good = build().frame
    passed = run_gate(name, good, config)
    assert passed.passed and passed.metadata["failing_count"].value == 0
    failed = run_gate(name, breaks(good), config)
    assert not failed.passed
    assert failed.metadata["failing_ids"].value == failing
    assert failed.metadata["failing_count"].value == len(failing)
    blocking = dict((n, b) for n, b, _ in GATES)[name]
    assert failed.severity == (dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN)


def test_a_failing_gate_shows_the_failing_slice_and_share_as_top_level_check_metadata():
    """The UI lists top-level entries on the check's page; the JSON blob hides behind "Show JSON"."""
    good = build().frame
    skewed = run_gate("label_distribution_within_bounds", _set(good, "LLMJudged", "c3", gold_label=S), _SKEWED)
    shown = {key: value.value for key, value in skewed.metadata.items()}
    assert (shown["failing_slice"], shown["failing_gold_label"], shown["bound"]) == ("LLMJudged", S, 0.6)
    assert shown["share"] > 0.6
    assert skewed.description.startswith("1 failing: first failing_slice LLMJudged")
    small = run_gate("slice_sizes_at_least_minimum", good.filter(pl.col("slice") != "LLMJudged"))
    assert {key: small.metadata[key].value for key in ("failing_slice", "size")} == {"failing_slice": "LLMJudged",
                                                                                     "size": 0}
    assert "failing_slice" not in run_gate("label_distribution_within_bounds", good, _SKEWED).metadata


def test_high_agreement_claim_missing_from_a_source_fails_the_subset_gate():
    good = build().frame
    orphan = good.filter(~((pl.col("slice") == "LLMJudged") & (pl.col("claim_id") == "c1")))
    result = run_gate("high_agreement_in_both_sources", orphan)
    assert not result.passed and result.metadata["failing_ids"].value == ["HighAgreement:c1"]


def test_the_mechanism_refuses_an_unknown_expectation():
    with pytest.raises(ValueError, match="'ExpectNothing' is not a great-expectations expectation"):
        gate("x", [Expect(pl.DataFrame({"a": [1]}), "ExpectNothing", ("a",))], blocking=False)


# -- a blocking gate in a real materialisation -------------------------------------------------------------------------

@dg.asset(partitions_def=venue_partitions, group_name="slices")
def slice_reader(benchmark_slices: pl.DataFrame) -> pl.DataFrame:
    """Stands in for what reads the slices (predictions, metrics, releases)."""
    return benchmark_slices.group_by("slice").len()


def materialise_slices(tmp_path, tables: dict[str, pl.DataFrame], **registry_entry) -> dg.ExecuteInProcessResult:
    lake = Lake(tmp_path / "lake")
    for table, frame in tables.items():
        lake.write_table(table, VENUE, frame)
    registry = write_registry(tmp_path, VENUE, source="api", seed=1, **registry_entry)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, [VENUE])
    resources = build_resources(str(tmp_path / "lake"), venue_registry=VenueRegistryResource(path=str(registry)))
    return dg.materialize([*ALL_ASSETS, slice_reader], selection=dg.AssetSelection.assets("benchmark_slices",
                                                                                          "slice_reader"),
                          instance=instance, partition_key=VENUE, resources=resources, raise_on_error=False)


def _started(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.step_key for e in result.all_events if e.is_step_start}


def test_a_blocking_gate_stops_what_reads_the_slices(tmp_path):
    result = materialise_slices(tmp_path / "good", upstream())
    assert result.success and "slice_reader" in _started(result)
    evaluations = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(evaluations) == {name for name, _, _ in GATES} and all(c.passed for c in evaluations.values())
    [markdown] = [e.event_specific_data.materialization.metadata["slices"].value for e in result.all_events
                  if e.is_step_materialization and e.asset_key == dg.AssetKey("benchmark_slices")]
    assert "| LLMJudged | 2 | 1 | 0 | 0 | 1 | 0 | pending 1, unlabelled 1 |" in markdown

    # the venue asks for more RebuttalSourced claims than it has: the release path stops, naming the slice
    short = materialise_slices(tmp_path / "short", upstream(), slices={"min_size": {"RebuttalSourced": 4}})
    failed = [c for c in short.get_asset_check_evaluations() if not c.passed]
    assert [(c.check_name, c.metadata["failing_ids"].value) for c in failed] == [
        ("slice_sizes_at_least_minimum", ["RebuttalSourced"])]
    assert failed[0].blocking and not short.success and "slice_reader" not in _started(short)
