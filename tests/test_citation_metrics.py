"""Tests of domain/citations/metrics.py: every figure computed by hand on a tiny venue of three manuscripts, beside
RefVerifier's published figure where there is one, and the report section."""

from __future__ import annotations

import polars as pl
import pytest

from peerify_dagster.domain.citations.metrics import (
    CITATION_METRICS_SCHEMA,
    REFVERIFIER,
    STAGES,
    CitationGold,
    citation_metrics,
    citation_report_markdown,
    format_value,
)

MARKER = pl.Struct({"text": pl.String, "style": pl.String, "start": pl.Int64, "end": pl.Int64,
                    "entry_ids": pl.List(pl.String), "unresolved_keys": pl.List(pl.String)})


def marker(entry_ids: list[str], unresolved: list[str] = ()) -> dict:
    return {"text": "[1]", "style": "numeric", "start": 0, "end": 3, "entry_ids": entry_ids,
            "unresolved_keys": list(unresolved)}


# P1: three citances, one marker of c2 names an entry the list lacks ("9"), c3's second key matched nothing; P2: one
# citance; P3: no references section and no citance.
CITANCES = pl.DataFrame([
    {"paper_id": "P1", "citance_id": "P1:c1", "text": "A improves B [1].", "markers": [marker(["P1:r1"])],
     "resolution": "all"},
    {"paper_id": "P1", "citance_id": "P1:c2", "text": "C harms D [2, 9].", "markers": [marker(["P1:r2"], ["9"])],
     "resolution": "some"},
    {"paper_id": "P1", "citance_id": "P1:c3", "text": "E holds (Smith 2020; Wu 2021).",
     "markers": [marker(["P1:r3"]), marker([], ["Wu 2021"])], "resolution": "some"},
    {"paper_id": "P2", "citance_id": "P2:c1", "text": "F holds [1].", "markers": [marker(["P2:r1"])],
     "resolution": "all"},
], schema={"paper_id": pl.String, "citance_id": pl.String, "text": pl.String, "markers": pl.List(MARKER),
           "resolution": pl.String})
BIBLIOGRAPHY = pl.DataFrame({
    "paper_id": ["P1", "P1", "P1", "P1", "P2", "P3"],
    "entry_id": ["P1:r1", "P1:r2", "P1:r3", "P1:r4", "P2:r1", "P3:none"],
    "parse_status": ["parsed", "parsed", "partial", "unparsed", "parsed", "no_references"],
    "doi": ["10.1/x", None, None, None, "10.2/y", None],
    "arxiv_id": [None, "2101.00001", None, None, None, None],
})
CHECKS = pl.DataFrame({"entry_id": ["P1:r1", "P1:r2", "P1:r3", "P1:r4", "P2:r1"],
                       "status": ["validated", "suspicious", "unvalidatable", "unvalidatable", "validated"]})

def _attempts(*outcomes: str) -> list[dict]:
    return [{"source": "library", "outcome": outcome, "locator": None, "detail": None} for outcome in outcomes]


# P1:r2's file failed the right-paper check; P1:r4's was refused by the parser (never compared); P2:r1 is the venue's
# own manuscript (no file compared either).
CITED = pl.DataFrame({"entry_id": ["P1:r1", "P1:r2", "P1:r3", "P1:r4", "P2:r1", "P3:none"],
                      "status": ["resolved", "rejected", "resolved", "rejected", "resolved", "unresolved"],
                      "source": ["library", "library", "library", "library", "venue", None],
                      "attempts": [_attempts("resolved"), _attempts("wrong_paper"), _attempts("resolved"),
                                   _attempts("encrypted"), [], []]},
                     schema_overrides={"attempts": pl.List(pl.Struct({"source": pl.String, "outcome": pl.String,
                                                                      "locator": pl.String, "detail": pl.String}))})
EVIDENCE = pl.DataFrame([
    # windows: c1's evidence is the second passage; c2's paper could not be had; P2's passage is not its evidence.
    ("P1:c1", "P1:r1", "windows", "hybrid", 1, "k1:w0.0-2", "Unrelated stuff.", "ok"),
    ("P1:c1", "P1:r1", "windows", "hybrid", 2, "k1:w3.0-2", "We show A improves B clearly. Next sentence.", "ok"),
    ("P1:c3", "P1:r3", "windows", "hybrid", 1, "k3:w1.0-2", "E is true here.", "ok"),
    ("P1:c2", "P1:r2", "windows", "hybrid", None, None, None, "no_cited_paper"),
    ("P2:c1", "P2:r1", "windows", "hybrid", 1, "k5:w2.0-2", "Nothing relevant.", "ok"),
    ("P1:c1", "P1:r1", "merged", None, 1, "k1:b4", "A improves B clearly. And more.", "ok"),
    ("P1:c2", "P1:r2", "merged", None, None, None, None, "no_cited_paper"),
], schema=["citance_id", "entry_id", "mode", "retriever", "rank", "passage_id", "text", "status"], orient="row")
VERDICTS = pl.DataFrame([
    ("P1:c1", "P1:r1", "m1", "windows", "ok", "Supported"),
    ("P1:c2", "P1:r2", "m1", "windows", "no_cited_paper", "Not Enough Information"),
    ("P1:c3", "P1:r3", "m1", "windows", "ok", "Partially Supported"),
    ("P2:c1", "P2:r1", "m1", "windows", "parse_failed", None),
    *((citance, entry, "m2", "windows", "ok", "Supported")
      for citance, entry in (("P1:c1", "P1:r1"), ("P1:c2", "P1:r2"), ("P1:c3", "P1:r3"), ("P2:c1", "P2:r1"))),
], schema=["citance_id", "entry_id", "verifier", "mode", "status", "label"], orient="row")
GOLD = CitationGold(
    # c1 spelled differently (case, spacing); c2 found; two gold sentences of P1 were not detected; c3 is not gold.
    citing_sentences={"P1": ["a improves  B [1] .", "C harms D [2, 9].", "G is cited [4].", "H too [5]."]},
    # c3's gold is longer than its passage, which lies inside it.
    evidence={("P1:c1", "P1:r1"): ["A improves B clearly."], ("P1:c2", "P1:r2"): ["C harms D."],
              ("P1:c3", "P1:r3"): ["We find that E is true here, and more."], ("P2:c1", "P2:r1"): ["F holds always."]},
    verdicts={("P1:c1", "P1:r1"): "Supported", ("P1:c2", "P1:r2"): "Not Enough Information",
              ("P1:c3", "P1:r3"): "Supported", ("P2:c1", "P2:r1"): "Not Supported"},
)


@pytest.fixture(scope="module")
def rows() -> dict[tuple[str, str], dict]:
    computed = citation_metrics(CITANCES, BIBLIOGRAPHY, CHECKS, CITED, EVIDENCE, VERDICTS, GOLD)
    keyed = {(row["stage"], row["metric"]): row for row in computed}
    assert len(keyed) == len(computed), "a (stage, metric) pair is given twice"
    return keyed


def figure(rows, stage: str, metric: str) -> tuple[float | None, int, float | None]:
    row = rows[(stage, metric)]
    return row["value"], row["n"], row["refverifier"]


def test_rows_fit_the_table_schema_in_stage_order() -> None:
    computed = citation_metrics(CITANCES, BIBLIOGRAPHY, CHECKS, CITED, EVIDENCE, VERDICTS, GOLD)
    frame = pl.DataFrame(computed, schema=CITATION_METRICS_SCHEMA)
    assert frame.height == len(computed)
    stages = [row["stage"] for row in computed]
    assert stages == sorted(stages, key=STAGES.index)
    assert all(row["note"] for row in computed)


def test_detection(rows) -> None:
    assert figure(rows, "detection", "citances per manuscript") == (pytest.approx(4 / 3), 3, None)
    assert figure(rows, "detection", "markers resolved share") == (pytest.approx(3 / 5), 5, None)
    assert figure(rows, "detection", "citances with every marker resolved share") == (0.5, 4, None)
    # Against P1's gold: 3 detected, 2 of them gold; 4 gold sentences.
    assert figure(rows, "detection", "precision") == (pytest.approx(2 / 3), 3, 0.980)
    assert figure(rows, "detection", "recall") == (0.5, 4, 1.0)
    assert figure(rows, "detection", "f1") == (pytest.approx(4 / 7), 4, 0.990)
    assert "0.986 / 0.991 / 0.989" in rows[("detection", "f1")]["note"]


def test_parsing_and_reference_checks(rows) -> None:
    assert figure(rows, "parsing", "entries per manuscript") == (pytest.approx(5 / 3), 3, None)
    assert figure(rows, "parsing", "manuscripts without references") == (1.0, 3, None)
    assert [figure(rows, "parsing", f"{s} share")[0] for s in ("parsed", "partial", "unparsed")] == [0.6, 0.2, 0.2]
    assert figure(rows, "parsing", "with DOI share") == (0.4, 5, None)
    assert figure(rows, "parsing", "with arXiv id share") == (0.2, 5, None)
    assert [figure(rows, "reference_checks", f"{s} share") for s in ("validated", "suspicious", "unvalidatable")] \
        == [(0.4, 5, None), (0.2, 5, None), (0.4, 5, None)]


def test_resolution_beside_refverifiers_chain(rows) -> None:
    # P3:none (no references section) is no entry; of the five: r1, r3, P2:r1 resolved.
    assert figure(rows, "resolution", "resolved share") == (0.6, 5, pytest.approx(0.576, abs=5e-4))
    assert figure(rows, "resolution", "resolved share with identifier") == (pytest.approx(2 / 3), 3, 0.926)
    assert figure(rows, "resolution", "resolved share without identifier") == (0.5, 2, 0.454)
    assert figure(rows, "resolution", "rejected wrong papers") == (1.0, 3, None)
    assert "93%" in rows[("resolution", "rejected wrong papers")]["note"]


def test_localisation(rows) -> None:
    assert figure(rows, "localisation", "pairs with passages share (windows, hybrid)") == (0.75, 4, None)
    # c1: evidence at rank 2 (hit, 1/2); c3: at rank 1 (hit, 1); c2: no passages (miss); P2: not its evidence (miss).
    assert figure(rows, "localisation", "hit rate (windows, hybrid)") == (0.5, 4, 0.68)
    assert figure(rows, "localisation", "MRR (windows, hybrid)") == (pytest.approx(1.5 / 4), 4, 0.96)
    assert "1 without passages count as misses" in rows[("localisation", "hit rate (windows, hybrid)")]["note"]
    # Merged mode shows the whole paper: nothing ranked, no comparable figure.
    assert figure(rows, "localisation", "pairs with passages share (merged)") == (0.5, 2, None)
    # Every gold pair counts: the two gold pairs merged mode never showed are misses, not left out (1 hit of 4).
    assert figure(rows, "localisation", "hit rate (merged)") == (0.25, 4, None)
    assert "n/a: merged mode shows the whole paper" in rows[("localisation", "hit rate (merged)")]["note"]


def test_verdict_distribution_and_the_one_label_verifier(rows) -> None:
    shares = [figure(rows, "verdicts", f"{label} share (m1, windows)")[0]
              for label in ("Supported", "Partially Supported", "Not Supported", "Not Enough Information")]
    assert shares == [0.25, 0.25, 0.0, 0.25]
    assert figure(rows, "verdicts", "no verdict share (m1, windows)") == (0.25, 4, None)
    assert "parse_failed 1" in rows[("verdicts", "no verdict share (m1, windows)")]["note"]
    assert figure(rows, "verdicts", "no cited paper share (m1, windows)") == (0.25, 4, None)
    assert ("verdicts", "one label (m1, windows)") not in rows
    assert figure(rows, "verdicts", "one label (m2, windows)") == (1.0, 4, None)
    assert rows[("verdicts", "one label (m2, windows)")]["note"].startswith(
        "Verifier m2 (windows) answered Supported to 4 of 4 citations (100%)")


def test_pairs_given_not_enough_information_for_want_of_a_relevant_passage_are_counted_apart() -> None:
    verdicts = VERDICTS.with_columns(status=pl.when((pl.col("verifier") == "m1") & (pl.col("citance_id") == "P1:c3"))
                                     .then(pl.lit("no_relevant_passage")).otherwise("status"),
                                     label=pl.when((pl.col("verifier") == "m1") & (pl.col("citance_id") == "P1:c3"))
                                     .then(pl.lit("Not Enough Information")).otherwise("label"))
    computed = {(row["stage"], row["metric"]): row
                for row in citation_metrics(CITANCES, BIBLIOGRAPHY, CHECKS, CITED, EVIDENCE, verdicts, GOLD)}
    assert figure(computed, "verdicts", "no relevant passage share (m1, windows)") == (0.25, 4, None)
    assert figure(computed, "verdicts", "no cited paper share (m1, windows)") == (0.25, 4, None)
    assert "no passage of it relevant" in computed[("verdicts", "Not Enough Information share (m1, windows)")]["note"]
    assert figure(computed, "verdicts", "no relevant passage share (m2, windows)") == (0.0, 4, None)


def test_verdict_agreement_beside_the_majority_baseline(rows) -> None:
    # m1 answers S, NEI (no cited paper), PS, none against gold S, NEI, S, NS: 2 of 4 agree.
    assert figure(rows, "verdicts", "agreement (m1, windows)") == (0.5, 4, 0.71)
    # F1: Supported 2/3 (P 1, R 1/2), Partially 0, Not Supported 0, NEI 1.
    assert figure(rows, "verdicts", "macro-F1 (m1, windows)")[0] == pytest.approx(5 / 12)
    # Always Supported (2 of 4 gold): agreement 1/2, F1 of Supported 2/3 and 0 elsewhere.
    assert figure(rows, "verdicts", "majority-label baseline agreement (m1, windows)")[0] == 0.5
    assert figure(rows, "verdicts", "majority-label baseline macro-F1 (m1, windows)")[0] == pytest.approx(1 / 6)
    assert "always answering Supported" in rows[("verdicts", "majority-label baseline agreement (m1, windows)")]["note"]
    assert figure(rows, "verdicts", "Partially Supported for gold Supported share (m1, windows)") \
        == (0.25, 4, pytest.approx(25 / 118))
    assert "1 without a verdict" in rows[("verdicts", "agreement (m1, windows)")]["note"]
    assert figure(rows, "verdicts", "macro-F1 (m2, windows)")[0] == pytest.approx(1 / 6)


def test_verdicts_given_without_a_call_do_not_make_a_verifier_one_label() -> None:
    # 18 pairs without a cited paper (Not Enough Information, no call) and two answers of two different verdicts.
    pairs = [(f"P1:c{n}", f"P1:r{n}") for n in range(20)]
    verdicts = pl.DataFrame(
        [(c, e, "m3", "windows", "no_cited_paper", "Not Enough Information") for c, e in pairs[:18]]
        + [(*pairs[18], "m3", "windows", "ok", "Supported"), (*pairs[19], "m3", "windows", "ok", "Not Supported")],
        schema=["citance_id", "entry_id", "verifier", "mode", "status", "label"], orient="row")
    computed = citation_metrics(CITANCES, BIBLIOGRAPHY, CHECKS, CITED, EVIDENCE, verdicts)
    shares = {row["metric"]: row["value"] for row in computed if row["stage"] == "verdicts"}
    assert shares["Not Enough Information share (m3, windows)"] == 0.9
    assert "one label (m3, windows)" not in shares


def test_without_gold_only_the_figures_that_need_none() -> None:
    computed = citation_metrics(CITANCES, BIBLIOGRAPHY, CHECKS, CITED, EVIDENCE, VERDICTS)
    metrics = {row["metric"] for row in computed}
    assert "markers resolved share" in metrics and "pairs with passages share (windows, hybrid)" in metrics
    assert not metrics & {"precision", "recall", "f1", "hit rate (windows, hybrid)", "agreement (m1, windows)"}


def test_empty_tables_give_no_share_and_bad_gold_is_named() -> None:
    empty = citation_metrics(CITANCES.clear(), BIBLIOGRAPHY.clear(), CHECKS.clear(), CITED.clear(), EVIDENCE.clear(),
                             VERDICTS.clear())
    counts = {"manuscripts without references", "rejected wrong papers"}
    assert {row["value"] for row in empty if row["metric"] not in counts} == {None}
    assert {row["value"] for row in empty if row["metric"] in counts} == {0.0} and {row["n"] for row in empty} == {0}
    with pytest.raises(ValueError, match="P1:c1/P1:r1"):
        citation_metrics(CITANCES, BIBLIOGRAPHY, CHECKS, CITED, EVIDENCE, VERDICTS,
                         CitationGold(verdicts={("P1:c1", "P1:r1"): "Not Determined"}))


def test_refverifier_figures_are_the_published_ones() -> None:
    published = {name: figure.value for name, figure in REFVERIFIER.items()}
    assert published["resolved"] == pytest.approx(0.5756, abs=1e-4) and REFVERIFIER["resolved"].n == 992
    assert (published["hit_rate_abstracts"], published["hit_rate_full_papers"], published["mrr"]) == (0.98, 0.68, 0.96)
    assert (published["verdict_agreement"], REFVERIFIER["verdict_agreement"].n) == (0.71, 118)
    assert published["minutes_per_manuscript"] == 11.0


def test_report_section_shows_every_figure_beside_refverifiers_or_says_why_not(rows) -> None:
    markdown = citation_report_markdown(rows.values())

    for title in ("Citance detection", "Bibliography parsing", "Reference checks", "Resolution to a full text",
                  "Evidence localisation", "Verdicts"):
        assert f"### {title}" in markdown
    assert "| resolved share | 60.0% | 5 | 57.6% |" in markdown
    assert "| resolved share with identifier | 66.7% | 3 | 92.6% |" in markdown
    assert "| hit rate (windows, hybrid) | 50.0% | 4 | 68.0% |" in markdown
    assert "| precision | 0.667 | 3 | 0.980 |" in markdown
    assert "| citances per manuscript | 1.3 | 3 | n/a | " in markdown
    assert "| rejected wrong papers | 1 | 3 | n/a |" in markdown
    assert "**Warning:** Verifier m2 (windows) answered Supported" in markdown
    assert "| one label" not in markdown  # the warning, not a table row
    table_rows = [line for line in markdown.splitlines() if line.startswith("| ") and "| metric |" not in line]
    assert all("| n/a | " not in line or "n/a:" in line for line in table_rows), "an n/a without its reason"
    assert format_value("agreement (m1, windows)", None) == "–"
