"""Verifier metrics per (configuration, verifier, slice) and token costs: hand-computed confusion matrices (a class
never predicted, a slice of a single class, parse failures, uncalled and missing claims counted as errors), the gold
labels taken from the slices, the RAG vs full-context token ratio on a constructed predictions frame, and both assets
materialised from a temporary lake into the catalog."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.assets.predictions import PREDICTION_SCHEMA
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain import metrics as m
from peerify_dagster.domain.slices import SLICE_SCHEMA
from peerify_dagster.partitions import add_venue_partitions, prediction_key
from peerify_dagster.resources.lake import Lake
from tests.support import ALL_ASSETS

S, P, N, D = "Supported", "Partially Supported", "Not Supported", "Not Determined"
VENUE = "toy"


def slice_rows(name: str, gold: dict[str, str]) -> list[dict]:
    return [{"venue": VENUE, "slice": name, "claim_id": claim, "paper_id": "P1", "gold_label": label,
             "gold_chunk_ids": [], "gold_call_ids": [], "gold_decision_ids": []} for claim, label in gold.items()]


def prediction(configuration: str, claim: str, label: str | None = None, *, status: str = "ok",
               parsed: bool | None = None, tokens: tuple[int, int] = (0, 0), verifier: str = "model-a",
               mode: str = "rag", source: str = "review", gold_label: str | None = None) -> dict:
    called = status == "ok"
    return {"venue": VENUE, "configuration": configuration, "verifier": verifier, "mode": mode,
            "retriever": "bm25" if mode == "rag" else None, "k": 10 if mode == "rag" else None, "claim_id": claim,
            "paper_id": "P1", "claim_source": source, "status": status, "evidence_chunk_ids": [], "label": label,
            "raw_label": label, "parse_ok": (label is not None) if parsed is None else parsed,
            "tokens_in": tokens[0] if called else None, "tokens_out": tokens[1] if called else None,
            "call_id": f"{configuration}-{claim}" if called else None, "error": None, "prompt_id": "verify",
            "gold_label": gold_label}


# LLMJudged c1..c6: right, wrong, right, a parse failure, a claim no call was made for, a claim without a row.
# Partially Supported and Not Determined are never predicted.
LLM_JUDGED = {"c1": S, "c2": S, "c3": N, "c4": N, "c5": P, "c6": D}
PAPER_SOURCED = {"pc1": S, "pc2": S, "pc3": S}  # a slice of a single class


def slices() -> pl.DataFrame:
    return pl.DataFrame(slice_rows("LLMJudged", LLM_JUDGED) + slice_rows("PaperSourced", PAPER_SOURCED),
                        schema=SLICE_SCHEMA)


def predictions() -> pl.DataFrame:
    rag = [
        prediction("rag", "c1", S, tokens=(100, 10)), prediction("rag", "c2", N, tokens=(200, 20)),
        prediction("rag", "c3", N, tokens=(300, 30)), prediction("rag", "c4", None, tokens=(400, 40)),
        prediction("rag", "c5", status="no_evidence"),
        # the answer-key label a prediction row carries is not the slice's gold: pc1 is Supported in the slice
        prediction("rag", "pc1", S, source="paper_sourced", gold_label=N, tokens=(50, 5)),
        prediction("rag", "pc2", N, source="paper_sourced", tokens=(50, 5)),
        # an answer that did not parse is a parse failure whatever its label field holds
        prediction("rag", "pc3", "garbled", parsed=False, source="paper_sourced", tokens=(50, 5)),
        prediction("rag", "ak1", S, source="answer_key", tokens=(70, 7)),  # in no slice
    ]
    oracle = [prediction("oracle", c, S, mode="oracle", source="paper_sourced", tokens=(30, 3))
              for c in ("pc1", "pc2", "pc3")]
    return pl.DataFrame(rag + oracle, schema=PREDICTION_SCHEMA)


def scored(frame: pl.DataFrame) -> dict[tuple[str, str], dict]:
    return {(r["configuration"], r["slice"]): r for r in frame.iter_rows(named=True)}


def cells(row: dict) -> dict[tuple[str, str], int]:
    return {(c["gold"], c["predicted"]): c["count"] for c in row["confusion"] if c["count"]}


def test_every_claim_of_the_slice_counts_and_errors_are_never_dropped():
    row = scored(m.slice_metrics(VENUE, predictions(), slices()))[("rag", "LLMJudged")]
    assert (row["status"], row["mode"], row["retriever"], row["k"]) == ("ok", "rag", "bm25", 10)
    assert (row["n_claims"], row["n_predicted"], row["n_parse_failures"], row["n_not_called"], row["n_missing"]) == \
        (6, 3, 1, 1, 1)
    assert cells(row) == {(S, S): 1, (S, N): 1, (N, N): 1, (N, "unparsed"): 1, (P, "unparsed"): 1,
                          (D, "unparsed"): 1}
    assert len(row["confusion"]) == 4 * 5  # every cell present, zeros included
    assert row["accuracy"] == pytest.approx(2 / 6)  # not 2/3: the three unanswered claims are errors
    per_class = {c["label"]: c for c in row["per_class"]}
    assert [(c["precision"], c["recall"], c["support"]) for c in per_class.values()] == \
        [(1.0, 0.5, 2), (0.0, 0.0, 1), (0.5, 0.5, 2), (0.0, 0.0, 1)]
    assert per_class[S]["f1"] == pytest.approx(2 / 3) and per_class[N]["f1"] == pytest.approx(0.5)
    assert per_class[P]["f1"] == per_class[D]["f1"] == 0.0  # never predicted: 0, still in the average
    assert row["macro_f1"] == pytest.approx((2 / 3 + 0.5) / 4)
    assert {d["label"]: d["count"] for d in row["predicted_distribution"]} == \
        {S: 1, P: 0, N: 2, D: 0, "unparsed": 3}
    assert row["parse_failure_rate"] == pytest.approx(1 / 4)  # one of the four calls made
    # tokens over the four claims a call was made for
    assert (row["tokens_in_per_claim"], row["tokens_out_per_claim"], row["tokens_per_claim"]) == \
        pytest.approx((250.0, 25.0, 275.0))


def test_a_slice_of_a_single_class_and_gold_from_the_slices():
    rows = scored(m.slice_metrics(VENUE, predictions(), slices()))
    row = rows[("rag", "PaperSourced")]
    # pc1 right (its prediction row's gold_label says Not Supported: the slice's Supported is the gold), pc2 wrong,
    # pc3 unparsed
    assert cells(row) == {(S, S): 1, (S, N): 1, (S, "unparsed"): 1}
    assert row["accuracy"] == pytest.approx(1 / 3)
    per_class = {c["label"]: c for c in row["per_class"]}
    assert (per_class[S]["precision"], per_class[S]["recall"], per_class[S]["f1"]) == pytest.approx((1.0, 1 / 3, 0.5))
    assert (per_class[N]["precision"], per_class[N]["support"]) == (0.0, 0)  # predicted once, never right
    assert row["macro_f1"] == pytest.approx(0.5 / 4)
    assert rows[("oracle", "PaperSourced")]["accuracy"] == 1.0
    # the majority-class baseline of a one-class slice: always Supported is always right, macro-F1 1/4
    assert (row["majority_label"], row["majority_accuracy"], row["majority_macro_f1"]) == (S, 1.0, 0.25)
    assert rows[("oracle", "PaperSourced")]["majority_accuracy"] == 1.0  # the slice's, whoever is scored


def test_the_majority_baseline_of_a_two_class_slice_comes_from_its_gold_labels():
    gold = {"t1": N, "t2": N, "t3": N, "t4": S}
    rows = [prediction("rag", claim, S) for claim in gold]  # a verifier saying Supported throughout
    row = m.slice_metrics(VENUE, pl.DataFrame(rows, schema=PREDICTION_SCHEMA),
                          pl.DataFrame(slice_rows("LLMJudged", gold), schema=SLICE_SCHEMA)) \
        .filter(pl.col("slice") == "LLMJudged").row(0, named=True)
    # always Not Supported: 3 of 4 right; F1 (Not Supported) = 2 * 3/4 * 1 / (3/4 + 1) = 6/7, the others 0
    assert (row["majority_label"], row["majority_accuracy"]) == (N, 0.75)
    assert row["majority_macro_f1"] == pytest.approx((6 / 7) / 4)
    assert row["accuracy"] == 0.25


def one_label_run(verifier: str, n_supported: int, n_other: int, n_unparsed: int = 0) -> list[dict]:
    labels = [S] * n_supported + [N] * n_other + [None] * n_unparsed
    return [prediction("rag", f"u{i}", label, verifier=verifier) for i, label in enumerate(labels)]


def test_a_verifier_answering_one_label_to_ninety_percent_or_more_is_warned_about_and_eighty_nine_is_not():
    gold = {f"u{i}": S if i < 95 else N for i in range(100)}
    runs = one_label_run("ninety", 90, 10) + one_label_run("eighty-nine", 89, 11) + one_label_run("unparsed", 9, 0, 91)
    frame = m.slice_metrics(VENUE, pl.DataFrame(runs, schema=PREDICTION_SCHEMA),
                            pl.DataFrame(slice_rows("LLMJudged", gold), schema=SLICE_SCHEMA))
    assert m.one_label_warnings(frame) == [
        "Verifier ninety (rag) answered Supported to 90 of 100 claims (90%) on LLMJudged: its accuracy mostly "
        "reflects the share of Supported claims; compare with the majority baseline 0.95 (always answering "
        "Supported).",
        # no usable label is no answer: 9 of its 9 answers say Supported
        "Verifier unparsed (rag) answered Supported to 9 of 9 claims (100%) on LLMJudged, and no usable label for 91 "
        "more: its accuracy mostly reflects the share of Supported claims; compare with the majority baseline 0.95 "
        "(always answering Supported).",
    ]
    markdown = m.metrics_markdown(frame)
    assert "**Warning:** Verifier ninety (rag) answered Supported to 90 of 100 claims (90%)" in markdown
    assert "Verifier eighty-nine" not in markdown
    # the predicted labels, and the baseline: always Supported, 95 of 100 right, F1 2 * .95 / 1.95 over 4 labels
    assert "| rag | eighty-nine | empty | Supported 89, Not Supported 11 | empty | empty | empty |" in markdown
    assert "| majority-class baseline | - | - | 0.95 / 0.24 (always Supported) | - | - | - |" in markdown


def test_rows_only_for_the_slices_a_configuration_covers_and_empty_slices_said_so():
    frame = m.slice_metrics(VENUE, predictions(), slices())
    # The four review slices other than LLMJudged have no claims: rag predicts review claims, so they show as empty;
    # the oracle predicts PaperSourced claims only, so it has no row for LLMJudged or the empty review slices.
    assert sorted(scored(frame)) == [("oracle", "PaperSourced"), *[("rag", name) for name in sorted(
        ["PaperSourced", "RebuttalSourced", "LLMJudged", "HighAgreement", "VerifiableOnly", "HumanVerified"])]]
    empty = frame.filter(pl.col("status") == "empty")
    assert sorted(empty["slice"]) == ["HighAgreement", "HumanVerified", "RebuttalSourced", "VerifiableOnly"]
    assert empty["accuracy"].null_count() == 4 and set(empty["n_claims"]) == {0}
    markdown = m.metrics_markdown(frame)
    assert "| rag | model-a | 0.33 / 0.12 (n=3) | empty | 0.33 / 0.29 (n=6) | empty | empty | empty |" in markdown
    assert "| oracle | model-a | 1.00 / 0.25 (n=3) | - | - | - | - | - |" in markdown
    # the baseline of every slice with claims, the predicted labels of each configuration
    assert "| majority-class baseline | - | 1.00 / 0.25 (always Supported) | - | 0.33 / 0.12 (always Supported) |" \
        in markdown
    assert "| rag | model-a | Supported 1, Not Supported 1, unparsed 1 | empty | Supported 1, Not Supported 2, " \
           "unparsed 3 | empty | empty | empty |" in markdown


def test_each_verifier_of_a_configuration_is_scored_on_its_own():
    both = pl.concat([predictions(), predictions().filter(pl.col("configuration") == "oracle").with_columns(
        verifier=pl.lit("model-b"), label=pl.lit(N))])
    oracle = m.slice_metrics(VENUE, both, slices()).filter(pl.col("configuration") == "oracle")
    assert dict(zip(oracle["verifier"], oracle["accuracy"])) == {"model-a": 1.0, "model-b": 0.0}


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: pl.concat([f, f.head(1)]), r"configuration 'rag', verifier 'model-a': more than one prediction row "
                                          r"for claims \['c1'\]"),
    (lambda f: f.with_columns(label=pl.when(pl.col("claim_id") == "c2").then(pl.lit("Maybe"))
                              .otherwise(pl.col("label"))), r"labels outside .* for claims \['c2'\]"),
])
def test_predictions_the_metrics_cannot_score_are_named(change, message):
    with pytest.raises(m.MetricsInputError, match=message):
        m.slice_metrics(VENUE, change(predictions()), slices())


def test_a_slice_claim_without_a_gold_label_is_named():
    bad = slices().with_columns(gold_label=pl.when(pl.col("claim_id") == "c3").then(None).otherwise("gold_label"))
    with pytest.raises(m.MetricsInputError, match=r"LLMJudged/c3"):
        m.slice_metrics(VENUE, predictions(), bad)


# -- token costs -------------------------------------------------------------------------------------------------------

def costs_frame() -> pl.DataFrame:
    """model-a: rag calls c1..c4; full-context calls c1..c3 (c4 too long for the window) and c5 (which rag does not
    cover); a second full-context configuration calls c1 only. model-b has rag only."""
    rows = [prediction("rag", c, S, tokens=(t, 10)) for c, t in (("c1", 200), ("c2", 300), ("c3", 400), ("c4", 500))]
    rows += [prediction("full", c, S, mode="full_context", tokens=(t, 10))
             for c, t in (("c1", 2000), ("c2", 3000), ("c3", 4000), ("c5", 9000))]
    rows += [prediction("full", "c4", status="too_long", mode="full_context")]
    rows += [prediction("afull", "c1", S, mode="full_context", tokens=(9000, 10))]
    rows += [prediction("rag", "c1", S, tokens=(100, 5), verifier="model-b")]
    return pl.DataFrame(rows, schema=PREDICTION_SCHEMA)


def test_token_ratio_to_full_context_over_the_claims_both_called():
    costs = {(r["verifier"], r["configuration"]): r for r in m.token_costs(VENUE, costs_frame()).iter_rows(named=True)}
    rag = costs[("model-a", "rag")]
    assert (rag["claims_called"], rag["tokens_in"], rag["tokens_out"]) == (4, 1400, 40)
    assert rag["tokens_per_claim"] == pytest.approx(1440 / 4)
    # against `full` (3 claims in common, not `afull`'s 1): c1..c3 cost 3010 per claim there, 310 here (c4 and c5,
    # called by one of the two only, left out of both sides)
    assert rag["full_context_configuration"] == "full"
    assert rag["full_context_tokens_per_claim"] == pytest.approx(3010.0)
    assert rag["ratio_to_full_context"] == pytest.approx(3010 / 310)
    full = costs[("model-a", "full")]
    assert (full["claims_called"], full["ratio_to_full_context"]) == (4, pytest.approx(1.0))
    other = costs[("model-b", "rag")]  # no full-context configuration of its own verifier
    assert (other["full_context_configuration"], other["ratio_to_full_context"]) == (None, None)
    assert "| model-a | rag | rag | 4 | 360.0 | full | 9.7 |" in m.token_costs_markdown(m.token_costs(VENUE,
                                                                                                        costs_frame()))


# -- the assets, materialised ------------------------------------------------------------------------------------------

def test_metrics_and_token_costs_materialise_from_the_lake_into_the_catalog(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.write_table("benchmark_slices", VENUE, slices())
    built = predictions()
    for configuration in ("rag", "oracle"):
        lake.write_table("predictions", prediction_key(VENUE, configuration),
                         built.filter(pl.col("configuration") == configuration))
    instance = dg.DagsterInstance.ephemeral()
    add_venue_partitions(instance, VENUE, ["rag", "oracle", "never-built"])
    result = dg.materialize(ALL_ASSETS, selection=["metrics", "token_costs"], instance=instance, partition_key=VENUE,
                            resources=build_resources(str(lake.root)), raise_on_error=False)
    assert result.success
    stored = lake.read_table("metrics", VENUE)
    assert stored.schema == pl.Schema(m.METRICS_SCHEMA)
    assert scored(stored)[("rag", "LLMJudged")]["accuracy"] == pytest.approx(2 / 6)
    assert set(lake.read_table("token_costs", VENUE)["configuration"]) == {"rag", "oracle"}
    materialised = {e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
                    for e in result.all_events if e.is_step_materialization}
    assert "| oracle | model-a | 1.00 / 0.25 (n=3) |" in materialised["metrics"]["accuracy_macro_f1"].value
    assert "| majority-class baseline | - | 1.00 / 0.25 (always Supported) |" in \
        materialised["metrics"]["accuracy_macro_f1"].value
    # the oracle says Supported to all three PaperSourced claims
    assert materialised["metrics"]["one_label_warnings"].value == [
        "Verifier model-a (oracle) answered Supported to 3 of 3 claims (100%) on PaperSourced: its accuracy mostly "
        "reflects the share of Supported claims; compare with the majority baseline 1.00 (always answering "
        "Supported)."]
    assert "ratio_to_full_context" in materialised["token_costs"]["token_costs"].value
    for metadata in materialised.values():  # every column says what it means in the UI
        assert all((column.description or "").strip() for column in metadata["dagster/column_schema"].value.columns)
    _, rows = lake.query("select slice, n_missing from metrics where configuration = 'rag' and status = 'ok' "
                         "order by slice")
    assert rows == [("LLMJudged", 1), ("PaperSourced", 0)]
    _, [(claims_called,)] = lake.query("select claims_called from token_costs where configuration = 'rag'")
    assert claims_called == 8  # every call of the configuration, the answer-key claim's too


def test_a_run_the_metrics_cannot_score_fails_naming_it(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.write_table("benchmark_slices", VENUE, slices())
    lake.write_table("predictions", prediction_key(VENUE, "rag"), pl.concat([predictions().head(2)] * 2))
    instance = dg.DagsterInstance.ephemeral()
    add_venue_partitions(instance, VENUE, ["rag"])
    result = dg.materialize(ALL_ASSETS, selection=["metrics"], instance=instance, partition_key=VENUE,
                            resources=build_resources(str(lake.root)), raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert "more than one prediction row for claims ['c1', 'c2']" in failure.event_specific_data.error.message
