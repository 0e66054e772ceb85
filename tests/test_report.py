"""The venue report: each of the paper's tables carries the numbers of the table it came from, in Markdown and HTML;
tables a venue never built say so; every figure is a real PNG embedded in the UI's Markdown and in the HTML page; the
asset writes the files; `peerify report` builds it (and the metrics it lacks) on a lake built beforehand."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.assets.arbitration import CANONICAL_SCHEMA
from peerify_dagster.assets.labels import AGREEMENT_SCHEMA
from peerify_dagster.assets.predictions import PREDICTION_SCHEMA
from peerify_dagster.assets.reports import venue_report
from peerify_dagster.assets.retrieval import METRIC_SCHEMA as RETRIEVAL_SCHEMA
from peerify_dagster.assets.verification import USAGE_SCHEMA
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain import label_metrics
from peerify_dagster.domain.chunking import CHUNK_SCHEMA
from peerify_dagster.domain.citations.metrics import CITATION_METRICS_SCHEMA
from peerify_dagster.domain.labels import LABELS, NOT_DETERMINED, NOT_SUPPORTED, SUPPORTED
from peerify_dagster.domain.metrics import METRICS_SCHEMA, TOKEN_COSTS_SCHEMA
from peerify_dagster.domain.report import (
    NOT_BUILT,
    NOT_EMBEDDED,
    REPORT_TABLES,
    UI_EMBED_BYTES,
    Input,
    build_report,
    render_html,
    render_markdown,
)
from peerify_dagster.domain.slices import SLICE_SCHEMA
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.lake import Lake
from tests.cli_support import cli_env, fresh_home, peerify
from tests.support import sample_registry

VENUE = "V/2026"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- constructed tables with the lake's schemas ---------------------------------------------------------------------

def slices_frame(members: dict[str, list[tuple[str, str, str]]]) -> pl.DataFrame:
    """slice -> [(claim_id, paper_id, gold_label)]"""
    rows = [{"venue": VENUE, "slice": name, "claim_id": claim, "paper_id": paper, "gold_label": label}
            for name, claims in members.items() for claim, paper, label in claims]
    return pl.DataFrame(rows, schema=SLICE_SCHEMA)


def metrics_row(configuration: str, verifier: str, slice_name: str, gold: list[str], predicted: list[str | None],
                mode: str = "rag", retriever: str | None = "bm25", k: int | None = 10) -> dict:
    """A `metrics` row scored from gold and predicted labels (None: a parse failure)."""
    matrix = label_metrics.confusion_matrix(gold, predicted)
    failures = sum(p is None for p in predicted)
    baseline = label_metrics.majority_baseline(gold)
    return {
        "venue": VENUE, "configuration": configuration, "verifier": verifier, "mode": mode, "retriever": retriever,
        "k": k, "slice": slice_name, "status": "ok", "n_claims": len(gold), "n_predicted": len(gold) - failures,
        "n_parse_failures": failures, "n_not_called": 0, "n_missing": 0,
        "accuracy": label_metrics.accuracy(gold, predicted), "macro_f1": label_metrics.macro_f1(gold, predicted),
        "majority_label": baseline.label, "majority_accuracy": baseline.accuracy,
        "majority_macro_f1": baseline.macro_f1, "parse_failure_rate": failures / len(gold),
        "per_class": [{"label": s.label, "precision": s.precision, "recall": s.recall, "f1": s.f1,
                       "support": s.support} for s in label_metrics.per_class(gold, predicted)],
        "confusion": [{"gold": g, "predicted": p, "count": n} for g, row in matrix.items() for p, n in row.items()],
        "predicted_distribution": [{"label": p, "count": sum(row[p] for row in matrix.values())}
                                   for p in (*LABELS, label_metrics.UNPARSED)],
        "tokens_in_per_claim": 900.0, "tokens_out_per_claim": 20.0, "tokens_per_claim": 920.0,
    }


def venue_tables() -> dict[str, pl.DataFrame]:
    """Every table the report reads, small and with known numbers."""
    slices = slices_frame({
        "PaperSourced": [("p1", "A", SUPPORTED), ("p2", "A", SUPPORTED), ("p3", "B", SUPPORTED)],
        "RebuttalSourced": [("r1", "A", SUPPORTED), ("r2", "B", NOT_SUPPORTED), ("r3", "B", SUPPORTED)],
        "LLMJudged": [("r1", "A", NOT_DETERMINED)],
    })
    metrics = pl.DataFrame([
        metrics_row("bm25-top10", "model-a", "PaperSourced", [SUPPORTED] * 3, [SUPPORTED, None, NOT_SUPPORTED]),
        metrics_row("bm25-top10", "model-a", "RebuttalSourced", [SUPPORTED, NOT_SUPPORTED, SUPPORTED],
                    [SUPPORTED, NOT_SUPPORTED, SUPPORTED]),
        metrics_row("bm25-top10", "model-b", "PaperSourced", [SUPPORTED] * 3, [None, None, SUPPORTED]),
        metrics_row("full", "model-a", "RebuttalSourced", [SUPPORTED, NOT_SUPPORTED, SUPPORTED],
                    [NOT_DETERMINED, NOT_SUPPORTED, SUPPORTED], mode="full_context", retriever=None, k=None),
    ], schema=METRICS_SCHEMA)
    costs = pl.DataFrame([
        {"venue": VENUE, "verifier": "model-a", "configuration": "bm25-top10", "mode": "rag", "retriever": "bm25",
         "k": 10, "claims_called": 6, "tokens_in": 5400, "tokens_out": 120, "tokens_per_claim": 920.0,
         "full_context_configuration": "full", "full_context_tokens_per_claim": 8924.0, "ratio_to_full_context": 9.7},
    ], schema=TOKEN_COSTS_SCHEMA)
    retrieval = pl.DataFrame([
        {"venue": VENUE, "retriever": "bm25", "relevance": relevance, "status": "ok", "n_claims": 3,
         "n_claims_scored": 3, "n_claims_without_manuscript": 0, "n_claims_gold_unlocatable": 0, "recall@1": r1,
         "recall@5": 2 / 3, "recall@10": 1.0, "ndcg@10": 0.8123, "mrr@10": 0.5556}
        for relevance, r1 in (("strict", 1 / 3), ("section", 2 / 3))], schema=RETRIEVAL_SCHEMA)
    agreement = pl.DataFrame([
        {"venue": VENUE, "source": "thread", "claim_type": "all", "n_items": 3, "n_pairs": 2, "agreed": 1,
         "raw_agreement": 0.5, "kappa": 0.25, "kappa_status": "ok", "confusion": [[1, 1, 0, 0], *[[0] * 4] * 3]},
        # both labellers said Not Supported to all four manuscript items: kappa is 0/0
        {"venue": VENUE, "source": "manuscript", "claim_type": "all", "n_items": 4, "n_pairs": 4, "agreed": 4,
         "raw_agreement": 1.0, "kappa": None, "kappa_status": "undefined_single_class",
         "confusion": [[0] * 4, [0] * 4, [0, 0, 4, 0], [0] * 4]},
    ], schema=AGREEMENT_SCHEMA)
    outcomes = (("r1", "thread", "agreed"), ("r2", "thread", "a_upheld"), ("r3", "thread", "pending"),
                ("r1", "manuscript", "third_label"))
    canonical = pl.DataFrame([{"venue": VENUE, "claim_id": claim, "source": source, "label": SUPPORTED,
                               "provenance": provenance} for claim, source, provenance in outcomes],
                             schema=CANONICAL_SCHEMA)
    usage = pl.DataFrame([{"venue": VENUE, "model": "model-a", "role": "labeller_a", "prompt_id": "label_rebuttal",
                           "calls": 3, "tokens_in": 2100, "tokens_out": 60, "cost_usd": 0.0125, "parse_failures": 1,
                           "errors": 0}], schema=USAGE_SCHEMA)
    chunks = pl.DataFrame([{"venue": VENUE, "paper_id": "A", "chunk_id": f"A:{i}", "word_count": 40 + 30 * i}
                           for i in range(6)], schema=CHUNK_SCHEMA)
    citations = pl.DataFrame([
        {"venue": VENUE, "stage": "detection", "metric": "precision", "value": 0.9, "n": 10, "refverifier": 0.98,
         "note": "against the key's citing sentences"},
        {"venue": VENUE, "stage": "resolution", "metric": "resolved share", "value": 0.25, "n": 8,
         "refverifier": 0.576, "note": "entries resolved to a full text"},
        {"venue": VENUE, "stage": "verdicts", "metric": "one label (model-a, windows)", "value": 1.0, "n": 3,
         "refverifier": None, "note": "Verifier model-a (windows) answered Supported to 3 of 3 citations (100%)."},
    ], schema={"venue": pl.String, **CITATION_METRICS_SCHEMA})
    return {"benchmark_slices": slices, "metrics": metrics, "token_costs": costs, "retrieval_metrics": retrieval,
            "labeller_agreement": agreement, "canonical_labels": canonical, "llm_usage": usage, "chunks": chunks,
            "citation_metrics": citations}


def answer_key_predictions() -> pl.DataFrame:
    """bm25-top10 of model-a on two answer-key claims: one right, one unparsed."""
    return pl.DataFrame([
        {"venue": VENUE, "configuration": "bm25-top10", "verifier": "model-a", "claim_id": claim,
         "claim_source": "answer_key", "status": "ok", "label": label, "parse_ok": label is not None,
         "gold_label": gold}
        for claim, label, gold in (("k1", NOT_SUPPORTED, NOT_SUPPORTED), ("k2", None, SUPPORTED))],
        schema=PREDICTION_SCHEMA)


def inputs_of(tables: dict[str, pl.DataFrame]) -> dict[str, Input]:
    return {name: Input(name, VENUE, tables.get(name)) for name in REPORT_TABLES}


# -- reading the rendered report back --------------------------------------------------------------------------------

def markdown_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """Title (the `###` heading above it) -> rows of each Markdown table."""
    tables, title = {}, None
    for block in text.split("\n\n"):
        if block.startswith("### "):
            title = block[4:]
        elif block.startswith("| "):
            lines = [[cell.strip() for cell in line.strip("|").split("|")] for line in block.splitlines()]
            tables[title] = [dict(zip(lines[0], row)) for row in lines[2:]]
    return tables


class _HtmlTables(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self.images, self._title, self._text, self._row = {}, [], None, None, None

    def handle_starttag(self, tag, attrs):
        if tag in ("h3", "th", "td"):
            self._text = ""
        elif tag == "tr":
            self._row = []
        elif tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        if self._text is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "h3":
            self._title = self._text
        elif tag in ("th", "td"):
            self._row.append(self._text)
        elif tag == "tr":
            self.tables.setdefault(self._title, []).append(self._row)
        if tag in ("h3", "th", "td"):
            self._text = None


def html_tables(page: str) -> tuple[dict[str, list[dict[str, str]]], list[str]]:
    parser = _HtmlTables()
    parser.feed(page)
    return {title: [dict(zip(rows[0], row)) for row in rows[1:]] for title, rows in parser.tables.items()}, \
        parser.images


def three(value: float) -> str:
    return f"{value:.3f}"


# -- the report ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def full_report():
    tables = venue_tables()
    report = build_report(VENUE, inputs_of(tables),
                          {"bm25-top10": Input("predictions", f"bm25-top10|{VENUE}", answer_key_predictions())})
    return tables, report


def test_each_table_holds_the_numbers_of_its_input_in_markdown_and_html(full_report):
    tables, report = full_report
    markdown = render_markdown(report)
    found = markdown_tables(markdown)

    by_slice = {row["slice"]: row for row in found["Slice statistics"]}
    assert list(by_slice) == ["PaperSourced", "RebuttalSourced", "LLMJudged", "HighAgreement", "VerifiableOnly",
                              "HumanVerified"]
    assert by_slice["PaperSourced"] == {"slice": "PaperSourced", "claims": "3", "papers": "2", SUPPORTED: "3",
                                        "Partially Supported": "0", NOT_SUPPORTED: "0", NOT_DETERMINED: "0"}
    assert (by_slice["RebuttalSourced"][SUPPORTED], by_slice["RebuttalSourced"][NOT_SUPPORTED]) == ("2", "1")
    assert by_slice["HumanVerified"]["claims"] == "0"

    metrics = tables["metrics"]
    wide = {(row["verifier"], row["configuration"]): row for row in found["Accuracy by model x configuration x slice"]}
    assert set(wide) == {("model-a", "bm25-top10"), ("model-b", "bm25-top10"), ("model-a", "full"),
                         ("majority-class baseline", "–")}
    for row in metrics.iter_rows(named=True):
        assert wide[(row["verifier"], row["configuration"])][row["slice"]] == three(row["accuracy"])
    # beside each accuracy: what the verifier answered, and the slice's majority-class baseline (hand-computed:
    # PaperSourced is all Supported, RebuttalSourced 2 of 3)
    assert wide[("model-a", "bm25-top10")]["PaperSourced predicted"] == "Supported 1, Not Supported 1, unparsed 1"
    baseline = wide[("majority-class baseline", "–")]
    assert (baseline["PaperSourced"], baseline["RebuttalSourced"]) == ("1.000", "0.667")
    assert baseline["PaperSourced predicted"] == "always Supported"
    assert wide[("model-b", "bm25-top10")]["RebuttalSourced"] == "–"  # not predicted: no number invented
    assert wide[("model-a", "full")]["mode"] == "full_context" and wide[("model-a", "full")]["k"] == "–"
    long = {(r["verifier"], r["configuration"], r["slice"]): r for r in found["Accuracy vs macro-F1"]}
    assert len(long) == metrics.height
    for row in metrics.iter_rows(named=True):
        shown = long[(row["verifier"], row["configuration"], row["slice"])]
        assert (shown["accuracy"], shown["macro_f1"], shown["n_parse_failures"], shown["parse_failure_rate"]) == (
            three(row["accuracy"]), three(row["macro_f1"]), str(row["n_parse_failures"]),
            three(row["parse_failure_rate"]))
    assert long[("model-a", "bm25-top10", "PaperSourced")]["accuracy"] == "0.333"  # 1 of 3, the failure an error
    rebuttal = long[("model-a", "bm25-top10", "RebuttalSourced")]
    # always Supported on (S, N, S): 2 of 3 right; F1 of Supported 2 * 2/3 / (2/3 + 1) = 0.8, over 4 labels 0.2
    assert (rebuttal["majority_accuracy"], rebuttal["majority_macro_f1"], rebuttal["majority_label"],
            rebuttal["predicted"]) == ("0.667", "0.200", SUPPORTED, "Supported 2, Not Supported 1")
    # model-b answered only once, Supported: warned about under the first table
    warnings = re.findall(r"^\*\*Warning:\*\* (.*)$", markdown, re.M)
    assert "Verifier model-b (bm25-top10) answered Supported to 1 of 1 claims (100%) on PaperSourced, and no usable " \
           "label for 2 more: its accuracy mostly reflects the share of Supported claims; compare with the majority " \
           "baseline 1.00 (always answering Supported)." in warnings
    assert not any("Verifier model-a (full)" in warning for warning in warnings)  # S, N, D: no one label

    # the answer key's scores are a table: k1 right, k2 unparsed; the key's labels tie (N, S): always Supported
    assert found["Accuracy on the answer key"] == [{
        "verifier": "model-a", "configuration": "bm25-top10", "slice": "answer key", "status": "ok", "n_claims": "2",
        "n_predicted": "1", "n_parse_failures": "1", "n_not_called": "0", "n_missing": "0", "accuracy": "0.500",
        "majority_accuracy": "0.500", "macro_f1": "0.250", "majority_macro_f1": "0.167", "majority_label": SUPPORTED,
        "predicted": "Not Supported 1, unparsed 1", "parse_failure_rate": "0.500", "tokens_per_claim": "0.000"}]
    assert f"### Accuracy on the answer key\n\n_source: predictions [bm25-top10|{VENUE}]_" in markdown

    retrieval = {row["relevance"]: row for row in found["Retrieval metrics per retriever"]}
    assert (retrieval["strict"]["recall@1"], retrieval["section"]["recall@1"]) == ("0.333", "0.667")
    assert retrieval["strict"]["ndcg@10"] == "0.812" and retrieval["strict"]["n_claims_gold_unlocatable"] == "0"

    assert found["Labeller agreement"] == [
        {"source": "thread", "claim_type": "all", "n_items": "3", "n_without_call": "–", "n_parse_failed": "–",
         "n_pairs": "2", "agreed": "1", "raw_agreement": "0.500", "kappa": "0.250", "kappa_status": "ok"},
        {"source": "manuscript", "claim_type": "all", "n_items": "4", "n_without_call": "–", "n_parse_failed": "–",
         "n_pairs": "4", "agreed": "4", "raw_agreement": "1.000", "kappa": "–",
         "kappa_status": "undefined_single_class"}]
    # the undefined kappa in words; labeller a said Supported to both thread pairs (b did not)
    assert "manuscript, claim type all: Cohen's kappa is undefined: both labellers gave Not Supported to all 4 " \
           "items, so chance agreement is 1 and agreement beyond chance cannot be measured; the raw agreement of " \
           "1.000 only says they never differed." in warnings
    assert [w for w in warnings if w.startswith("Labeller")] == [
        "Labeller a answered Supported to 2 of the 2 thread items both labellers labelled (100%): raw agreement "
        "mostly reflects how common Supported is; read kappa and the table, not raw agreement."]
    outcomes = {row["source"]: row for row in found["Arbitration outcomes"]}
    assert outcomes["thread"] == {"source": "thread", "agreed": "1", "a_upheld": "1", "b_upheld": "0",
                                  "third_label": "0", "pending": "1", "unlabelled": "0", "items": "3"}
    assert outcomes["manuscript"]["third_label"] == "1" and outcomes["manuscript"]["items"] == "1"

    (costs,) = found["Verifier tokens per configuration"]
    assert (costs["tokens_per_claim"], costs["full_context_tokens_per_claim"], costs["ratio_to_full_context"]) == (
        "920.000", "8924.000", "9.700")
    (usage,) = found["LLM usage behind the venue's tables"]
    assert (usage["calls"], usage["tokens_in"], usage["cost_usd"]) == ("3", "2100", "0.013")

    # the citation figures, each beside RefVerifier's; the one-label row a warning, not a figure
    assert [(row["stage"], row["metric"], row["value"], row["refverifier"])
            for row in found["Each citing sentence against the paper it cites, beside RefVerifier"]] == [
        ("detection", "precision", "0.900", "0.980"), ("resolution", "resolved share", "25.0%", "57.6%")]
    assert "Verifier model-a (windows) answered Supported to 3 of 3 citations (100%)." in warnings

    for table in ("benchmark_slices", "metrics", "token_costs", "retrieval_metrics", "labeller_agreement",
                  "canonical_labels", "llm_usage", "citation_metrics"):
        assert f"_source: {table} [{VENUE}]_" in markdown, table
    assert NOT_BUILT not in markdown

    page = render_html(report)
    html_found, _ = html_tables(page)
    assert html_found == found  # the same tables, cell for cell
    assert f"source: metrics [{VENUE}]" in page
    assert re.findall(r"<p class='warning'><strong>Warning:</strong> ([^<]*)</p>", page) == [
        w.replace("'", "&#x27;") for w in warnings]


def test_tables_a_release_venue_never_built_say_so(full_report):
    tables, _ = full_report
    # A venue imported from a release: slices and retrieval metrics, no predictions, labels, usage or chunks.
    report = build_report(VENUE, inputs_of({name: tables[name] for name in ("benchmark_slices", "retrieval_metrics")}),
                          {})
    markdown, page = render_markdown(report), render_html(report)
    for table in ("metrics", "token_costs", "labeller_agreement", "canonical_labels", "llm_usage", "chunks"):
        assert f"source: {table} [{VENUE}] ({NOT_BUILT})" in markdown, table
        assert f"source: {table} [{VENUE}] ({NOT_BUILT})" in page, table
        assert report.missing[f"{table} [{VENUE}]"] == NOT_BUILT
    assert "### Chunk sizes" in markdown and "chunk_words.png" not in markdown
    assert [f.file_name for f in report.figures] == ["slice_labels.png", "retrieval_metrics.png"]
    found = markdown_tables(markdown)
    assert set(found) == {"Slice statistics", "Retrieval metrics per retriever"}


def test_every_figure_is_a_png_embedded_in_the_ui_markdown_and_the_html(full_report):
    _, report = full_report
    names = [f.file_name for f in report.figures]
    assert names == ["slice_labels.png", "confusion_bm25-top10.png", "labels_bm25-top10.png", "confusion_full.png",
                     "labels_full.png", "retrieval_metrics.png", "chunk_words.png"]
    embedded = render_markdown(report, embed_up_to=UI_EMBED_BYTES)
    images = re.findall(r"!\[([^\]]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", embedded)
    assert [base64.b64decode(data) for _, data in images] == [f.png for f in report.figures]
    # Past the UI's budget, the figures that do not fit are named by file instead of embedded.
    budget = sum(len(f.png) for f in report.figures[:3])
    partly = render_markdown(report, embed_up_to=budget)
    assert [base64.b64decode(d) for d in re.findall(r"\(data:image/png;base64,([^)]+)\)", partly)] == [
        f.png for f in report.figures[:3]]
    assert [f"{NOT_EMBEDDED} (this copy embeds at most {budget // 1024} KiB of images): `{f.file_name}` beside "
            "report.md" for f in report.figures[3:]] == re.findall(f"^_({NOT_EMBEDDED}.*)_$", partly, re.M)
    assert all(f.png.startswith(PNG_MAGIC) and len(f.png) > 5000 for f in report.figures)
    linked = render_markdown(report)
    assert re.findall(r"!\[[^\]]*\]\(([^)]+)\)", linked) == names  # the PNG files beside report.md
    _, sources = html_tables(render_html(report))
    assert sources == [f"data:image/png;base64,{base64.b64encode(f.png).decode()}" for f in report.figures]
    # The answer-key panel comes from the configuration's predictions, and says so.
    assert f"_source: metrics [{VENUE}], predictions [bm25-top10|{VENUE}]; " in linked
    assert f"_source: metrics [{VENUE}]; parse failures" in linked  # `full` predicted no answer-key claim


# -- the asset and the command ---------------------------------------------------------------------------------------

def write_lake(root, tables: dict[str, pl.DataFrame], venue: str = VENUE) -> Lake:
    lake = Lake(root)
    for name, frame in tables.items():
        lake.write_table(name, venue, frame.with_columns(pl.lit(venue).alias("venue")))
    return lake


def test_the_asset_writes_markdown_html_and_figures_and_shows_the_report_in_its_metadata(tmp_path):
    tables = venue_tables()
    lake = write_lake(tmp_path / "lake", {k: v for k, v in tables.items() if k != "llm_usage"})
    lake.write_table("predictions", f"bm25-top10|{VENUE}", answer_key_predictions())
    folder = lake.root / "reports" / "V__2026"
    folder.mkdir(parents=True)
    (folder / "verifier_old.png").write_bytes(b"left by an earlier report")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, [VENUE])
    result = dg.materialize([venue_report], partition_key=VENUE, instance=instance,
                            resources=build_resources(str(lake.root)), raise_on_error=False)
    assert result.success
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    shown = metadata["report"].value
    assert shown.count("](data:image/png;base64,") == 7
    assert "| model-a | bm25-top10 | rag | bm25 | 10 | 0.333 | 1.000 |" in shown
    assert f"source: llm_usage [{VENUE}] ({NOT_BUILT})" in shown
    assert metadata["report_kib"].value == pytest.approx(len(shown.encode()) / 1024, abs=0.1)
    assert metadata["not_built"].value == {f"llm_usage [{VENUE}]": NOT_BUILT}
    markdown, page = folder / "report.md", folder / "report.html"
    assert metadata["report_md"].value == str(markdown) and metadata["report_html"].value == str(page)
    assert markdown_tables(markdown.read_text()) == markdown_tables(shown)
    assert "data:image/png;base64," in page.read_text()
    figures = lake.read_table("venue_report", VENUE)
    assert sorted(p.name for p in folder.glob("*.png")) == sorted(figures["figure"])  # the earlier one is gone
    assert all(path.startswith(str(folder)) and open(path, "rb").read(8) == PNG_MAGIC for path in figures["path"])


def test_peerify_report_builds_the_missing_metrics_and_the_report_of_a_built_venue(tmp_path):
    # A built venue as the lake holds it: slices, one configuration's predictions, retrieval metrics; no metrics yet.
    tables = venue_tables()
    lake = write_lake(tmp_path / "lake", {k: tables[k] for k in ("benchmark_slices", "retrieval_metrics")}, "sample")
    predictions = pl.DataFrame([
        {"venue": "sample", "configuration": "bm25-top10", "verifier": "model-a", "mode": "rag", "retriever": "bm25",
         "k": 10, "claim_id": claim, "paper_id": paper, "claim_source": "paper_sourced", "status": "ok",
         "label": label, "parse_ok": label is not None, "tokens_in": 100, "tokens_out": 5, "call_id": f"c-{claim}"}
        for claim, paper, label in (("p1", "A", SUPPORTED), ("p2", "A", None), ("p3", "B", NOT_SUPPORTED))],
        schema=PREDICTION_SCHEMA)
    lake.write_table("predictions", "bm25-top10|sample", predictions)
    env = cli_env(lake.root, sample_registry(tmp_path), fresh_home(tmp_path / "home"))

    result = peerify("report", "--venue", "sample", env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    page, markdown = lake.root / "reports" / "sample" / "report.html", lake.root / "reports" / "sample" / "report.md"
    assert result.stdout.splitlines()[-2:] == [f"report: {page}", f"markdown: {markdown} (figures beside it)"]
    built = lake.read_table("metrics", "sample")  # built first, from the predictions
    assert built.filter(pl.col("slice") == "PaperSourced")["accuracy"].to_list() == [pytest.approx(1 / 3)]
    found = markdown_tables(markdown.read_text())
    assert found["Accuracy by model x configuration x slice"][0]["PaperSourced"] == "0.333"
    assert lake.table_path("token_costs", "sample").exists()
    assert f"source: labeller_agreement [sample] ({NOT_BUILT})" in markdown.read_text()
    assert (markdown.parent / "confusion_bm25-top10.png").read_bytes().startswith(PNG_MAGIC)

    unknown = peerify("report", "--venue", "nowhere", env=env, timeout=120)
    assert unknown.returncode == 2 and "'nowhere' is not registered" in unknown.stderr
    env_empty = cli_env(tmp_path / "empty", sample_registry(tmp_path), None)
    unbuilt = peerify("report", "--venue", "sample", env=env_empty, timeout=120)
    assert unbuilt.returncode == 2 and "build it first (`peerify build sample`)" in unbuilt.stderr
