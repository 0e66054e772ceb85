"""The venue report: the paper's main tables and the figures behind them, assembled as Markdown and as one
self-contained HTML page (no Dagster, no I/O).

Every table and figure names the asset and partition it came from ("source: metrics [sample]"). A table the venue
never built (a venue imported from a release has no labeller agreement, usage or chunks) is listed with the reason
instead of failing the report.

Numbers that cannot mislead: every accuracy / macro-F1 table carries the majority-class baseline of its slice and
the predicted-label distribution, and plain-words warnings go under a table wherever a verifier or labeller gave one
label for 90% or more of its answers, or labeller agreement has an undefined kappa.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from peerify_dagster.domain import plots
from peerify_dagster.domain.arbitration import AGREED, PENDING, THIRD_LABEL, UNLABELLED, UPHELD
from peerify_dagster.domain.citations.metrics import ONE_LABEL, STAGES, format_value
from peerify_dagster.domain.label_metrics import UNPARSED, confusion_matrix, distribution_text
from peerify_dagster.domain.labelling import agreement_warnings
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.metrics import (
    ANSWER_KEY,
    MAJORITY_ROW,
    METRICS_SCHEMA,
    answer_key_metrics,
    one_label_warnings,
    predicted_counts,
)
from peerify_dagster.domain.predictions import SOURCE_ANSWER_KEY, STATUS_OK
from peerify_dagster.domain.slices import SLICES

NOT_BUILT = "not built for this venue"
NOT_EMBEDDED = "figure not embedded"
WARNING = "Warning"
UI_EMBED_BYTES = 2 * 1024 * 1024  # PNG bytes the report asset's metadata embeds (the sample's report: about 340 KiB)
MISSING_CELL = "–"
PREDICTED_COLUMNS = (*LABELS, UNPARSED)
PROVENANCES = (AGREED, UPHELD["a"], UPHELD["b"], THIRD_LABEL, PENDING, UNLABELLED)
# The tables the report reads, one venue partition each (predictions are read per configuration).
REPORT_TABLES = ("benchmark_slices", "metrics", "token_costs", "retrieval_metrics", "labeller_agreement",
                 "canonical_labels", "llm_usage", "chunks", "citation_metrics")
CONFIGURATION_COLUMNS = ("verifier", "configuration", "mode", "retriever", "k")
RETRIEVAL_COLUMNS = ("retriever", "relevance", "status", "n_claims", "n_claims_scored", "n_claims_without_manuscript",
                     "n_claims_gold_unlocatable", *plots.RETRIEVAL_METRICS)
AGREEMENT_COLUMNS = ("source", "claim_type", "n_items", "n_without_call", "n_parse_failed", "n_pairs", "agreed",
                     "raw_agreement", "kappa", "kappa_status")
PREDICTED = "predicted"  # the predicted-label distribution of a row, in one cell
SCORE_COLUMNS = ("n_claims", "n_predicted", "n_parse_failures", "n_not_called", "n_missing", "accuracy",
                 "majority_accuracy", "macro_f1", "majority_macro_f1", "majority_label", PREDICTED,
                 "parse_failure_rate", "tokens_per_claim")
TOKEN_COST_COLUMNS = (*CONFIGURATION_COLUMNS, "claims_called", "tokens_in", "tokens_out", "tokens_per_claim",
                      "full_context_configuration", "full_context_tokens_per_claim", "ratio_to_full_context")
USAGE_COLUMNS = ("model", "role", "prompt_id", "calls", "tokens_in", "tokens_out", "cost_usd", "parse_failures",
                 "errors")


@dataclass(frozen=True)
class Input:
    """One lake table partition as the report found it: its rows, or why there are none."""

    asset: str
    partition: str
    frame: pl.DataFrame | None
    missing: str = NOT_BUILT

    @property
    def source(self) -> str:
        return f"{self.asset} [{self.partition}]"


@dataclass(frozen=True)
class Table:
    title: str
    sources: tuple[Input, ...]
    frame: pl.DataFrame | None  # None: an input is missing (its reason is shown instead)
    note: str = ""
    warnings: tuple[str, ...] = ()  # plain-words warnings shown under the table


@dataclass(frozen=True)
class Figure:
    file_name: str
    title: str
    sources: tuple[Input, ...]
    png: bytes
    note: str = ""


@dataclass
class Section:
    heading: str
    items: list[Table | Figure] = field(default_factory=list)


@dataclass
class Report:
    venue: str
    sections: list[Section]

    @property
    def figures(self) -> list[Figure]:
        return [item for section in self.sections for item in section.items if isinstance(item, Figure)]

    @property
    def missing(self) -> dict[str, str]:
        """source -> why it is missing, for every input a table or figure lacks."""
        return {i.source: i.missing for s in self.sections for item in s.items for i in item.sources if i.frame is None}


# -- the tables ------------------------------------------------------------------------------------------------------

def _pick(frame: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """The wanted columns the table has, in the wanted order (a table written before a column was added lacks it)."""
    return frame.select([c for c in columns if c in frame.columns])


def slice_order(name: str) -> int:
    """A slice's position in the paper's order of the six (unknown names last)."""
    return SLICES.index(name) if name in SLICES else len(SLICES)


def slice_statistics(slices: pl.DataFrame) -> pl.DataFrame:
    """Per slice (all six, empty ones as 0): claims, papers, and the claims of each gold label."""
    rows = []
    for name in SLICES:
        members = slices.filter(pl.col("slice") == name)
        counts = dict(members.group_by("gold_label").len().iter_rows())
        rows.append({"slice": name, "claims": members.height, "papers": members["paper_id"].n_unique(),
                     **{label: counts.get(label, 0) for label in LABELS}})
    return pl.DataFrame(rows, schema={"slice": pl.String, "claims": pl.Int64, "papers": pl.Int64,
                                      **{label: pl.Int64 for label in LABELS}})


def _sorted_metrics(metrics: pl.DataFrame) -> pl.DataFrame:
    return metrics.with_columns(pl.col("slice").map_elements(slice_order, return_dtype=pl.Int64).alias("_order")) \
        .sort("verifier", "configuration", "_order").drop("_order")


def _predicted_text(row: Mapping) -> str | None:
    """The row's predicted-label distribution in one cell; None for an empty slice (or a table without it)."""
    return distribution_text(predicted_counts(row)) if row.get("predicted_distribution") is not None else None


def _predicted_column(metrics: pl.DataFrame) -> pl.DataFrame:
    return metrics.with_columns(pl.Series(PREDICTED, [_predicted_text(row) for row in metrics.iter_rows(named=True)],
                                          dtype=pl.String))


def accuracy_by_slice(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per (verifier, configuration), one accuracy column per slice the configuration covers, then one
    predicted-label column per slice; a last row holds each slice's majority-class baseline (the slice's gold labels
    are the same for every configuration, and so is its baseline)."""
    ordered = _sorted_metrics(metrics)
    slices = sorted(set(ordered["slice"]), key=slice_order)
    keys = [c for c in CONFIGURATION_COLUMNS if c in ordered.columns]
    rows: dict[tuple, dict] = {}
    baseline: dict = {"verifier": MAJORITY_ROW}
    for row in ordered.iter_rows(named=True):
        cells = rows.setdefault(tuple(row[k] for k in keys), {k: row[k] for k in keys})
        cells[row["slice"]], cells[f"{row['slice']} {PREDICTED}"] = row["accuracy"], _predicted_text(row)
        if row.get("majority_label") is not None:
            baseline[row["slice"]] = row["majority_accuracy"]
            baseline[f"{row['slice']} {PREDICTED}"] = f"always {row['majority_label']}"
    schema = {**{k: ordered.schema[k] for k in keys}, **{name: pl.Float64 for name in slices},
              **{f"{name} {PREDICTED}": pl.String for name in slices}}
    return pl.DataFrame([*rows.values(), baseline], schema=schema)


def accuracy_and_f1(metrics: pl.DataFrame) -> pl.DataFrame:
    return _pick(_predicted_column(_sorted_metrics(metrics)),
                 ("verifier", "configuration", "slice", "status", *SCORE_COLUMNS))


def answer_key_table(predictions: Mapping[str, Input]) -> Table:
    """Accuracy vs macro-F1 on the venue's hand-written answer key (not a slice: metrics does not score it), per
    verifier x configuration that predicted it, from the configurations' predictions that could be read (as the
    figures' answer-key panels), with its warnings."""
    inputs = tuple(predictions[name] for name in sorted(predictions) if predictions[name].frame is not None)
    scored = pl.concat([answer_key_metrics(i.frame) for i in inputs]) if inputs \
        else pl.DataFrame(schema=METRICS_SCHEMA)
    note = ("gold: the answer key's labels; majority_*: always answering the key's most frequent label" if inputs
            else "no configuration's predictions could be read")
    return Table("Accuracy on the answer key", inputs, accuracy_and_f1(scored), note,
                 tuple(one_label_warnings(scored)))


def arbitration_outcomes(canonical: pl.DataFrame) -> pl.DataFrame:
    """Per label source: how many items were settled by each provenance (agreed, a/b upheld, third label) and how
    many are still pending or had nothing to label."""
    rows = []
    for source in sorted(set(canonical["source"])):
        counts = dict(canonical.filter(pl.col("source") == source).group_by("provenance").len().iter_rows())
        rows.append({"source": source, **{p: counts.get(p, 0) for p in PROVENANCES}, "items": sum(counts.values())})
    return pl.DataFrame(rows, schema={"source": pl.String, **{p: pl.Int64 for p in PROVENANCES}, "items": pl.Int64})


def _table(title: str, inputs: Sequence[Input], build: Callable[..., pl.DataFrame], note: str = "",
           warn: Callable[..., list[str]] | None = None) -> Table:
    """The table built from its inputs' frames (None when one is missing), with the warnings `warn` finds in them."""
    if not all(i.frame is not None for i in inputs):
        return Table(title, tuple(inputs), None, note)
    frames = [i.frame for i in inputs]
    return Table(title, tuple(inputs), build(*frames), note, tuple(warn(*frames)) if warn else ())


def citation_figures(citation_metrics: pl.DataFrame) -> pl.DataFrame:
    """The citation half's figures by stage, each value and RefVerifier's formatted alike ("n/a": none comparable);
    the one-label rows are warnings, not figures."""
    rows = [{"stage": row["stage"], "metric": row["metric"], "value": format_value(row["metric"], row["value"]),
             "n": row["n"], "refverifier": "n/a" if row["refverifier"] is None
             else format_value(row["metric"], row["refverifier"]), "note": row["note"] or ""}
            for row in citation_metrics.iter_rows(named=True) if not row["metric"].startswith(ONE_LABEL)]
    order = {stage: position for position, stage in enumerate(STAGES)}
    return pl.DataFrame(sorted(rows, key=lambda row: order.get(row["stage"], len(order))),
                        schema={"stage": pl.String, "metric": pl.String, "value": pl.String, "n": pl.Int64,
                                "refverifier": pl.String, "note": pl.String})


def citation_warnings(citation_metrics: pl.DataFrame) -> list[str]:
    return [row["note"] for row in citation_metrics.iter_rows(named=True) if row["metric"].startswith(ONE_LABEL)]


# -- the figures -----------------------------------------------------------------------------------------------------

def _matrix(cells: Sequence[Mapping]) -> dict[str, dict[str, int]]:
    """metrics' `confusion` list (gold, predicted, count) as gold -> predicted -> count."""
    matrix: dict[str, dict[str, int]] = {}
    for cell in cells:
        matrix.setdefault(cell["gold"], {})[cell["predicted"]] = cell["count"]
    return matrix


def _answer_key_matrix(predictions: pl.DataFrame, verifier: str) -> dict[str, dict[str, int]] | None:
    """The verifier's labels against the venue's hand-written answer key (not a slice: metrics does not score it);
    a claim without a usable answer counts as `unparsed`. None when the configuration predicted no answer-key claim."""
    keyed = predictions.filter((pl.col("claim_source") == SOURCE_ANSWER_KEY) & (pl.col("verifier") == verifier)
                               & pl.col("gold_label").is_in(LABELS))
    if keyed.is_empty():
        return None
    answered = keyed.select(pl.when((pl.col("status") == STATUS_OK) & pl.col("parse_ok")).then(pl.col("label")))
    return confusion_matrix(keyed["gold_label"].to_list(), answered.to_series().to_list())


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _panel_title(verifier: str | None, panel: str, n_claims: int, accuracy: float | None) -> str:
    shown = MISSING_CELL if accuracy is None else f"{accuracy:.2f}"
    return f"{verifier + chr(10) if verifier else ''}{panel} (n={n_claims}, acc {shown})"


def _distributions(matrix: Mapping[str, Mapping[str, int]]) -> tuple[dict[str, int], dict[str, int]]:
    """Gold label -> claims (the matrix's rows) and predicted label -> claims (its columns)."""
    return ({gold: sum(row.values()) for gold, row in matrix.items()},
            {p: sum(row.get(p, 0) for row in matrix.values()) for p in PREDICTED_COLUMNS})


def configuration_figures(venue: str, metrics: Input, predictions: Mapping[str, Input]) -> list[Figure]:
    """Per configuration: a confusion matrix and the gold vs predicted label distribution per verifier and slice (and
    the answer key, where the configuration predicted it). An empty slice has no matrix: it shows in the tables."""
    figures = []
    scored = metrics.frame.filter(pl.col("confusion").is_not_null())
    for configuration in sorted(set(scored["configuration"])):
        rows = _sorted_metrics(scored.filter(pl.col("configuration") == configuration)).to_dicts()
        verifiers = sorted({r["verifier"] for r in rows})
        named = lambda verifier: verifier if len(verifiers) > 1 else None  # noqa: E731 - one verifier: say it once
        panels = {verifier: [(_panel_title(named(verifier), r["slice"], r["n_claims"], r["accuracy"]),
                              _matrix(r["confusion"])) for r in rows if r["verifier"] == verifier]
                  for verifier in verifiers}  # a row of panels per verifier
        sources = (metrics,)
        answer_key = predictions.get(configuration)
        for verifier in verifiers if answer_key is not None and answer_key.frame is not None else []:
            matrix = _answer_key_matrix(answer_key.frame, verifier)
            if matrix is not None:
                claims = sum(sum(row.values()) for row in matrix.values())
                accuracy = sum(matrix[label][label] for label in LABELS) / claims
                panels[verifier].append((_panel_title(named(verifier), ANSWER_KEY, claims, accuracy), matrix))
                sources = (metrics, answer_key)
        name = _file_safe(configuration)
        figures += [
            Figure(f"confusion_{name}.png", f"Confusion matrices, configuration {configuration}", sources,
                   plots.confusion_panels(list(panels.values()), LABELS, PREDICTED_COLUMNS,
                                          f"{configuration} on {venue}: gold (rows) vs predicted (columns)"),
                   "parse failures, claims without a call and claims without a prediction are `unparsed`"),
            Figure(f"labels_{name}.png", f"Gold vs predicted labels, configuration {configuration}", sources,
                   plots.label_distribution_panels([[(title, *_distributions(m)) for title, m in row]
                                                    for row in panels.values()],
                                                   PREDICTED_COLUMNS,
                                                   f"{configuration} on {venue}: gold vs predicted labels")),
        ]
    return figures


# -- the report ------------------------------------------------------------------------------------------------------

def _figure(file_name: str, title: str, inputs: Sequence[Input], draw: Callable[..., bytes],
            note: str = "") -> Figure | Table:
    """The figure drawn from its inputs' frames or, an input missing, an entry saying which, so the gap is visible."""
    if any(i.frame is None for i in inputs):
        return Table(title, tuple(inputs), None)
    return Figure(file_name, title, tuple(inputs), draw(*(i.frame for i in inputs)), note)


def _slice_chart(slices: pl.DataFrame, venue: str) -> bytes:
    counts = {row["slice"]: {label: row[label] for label in LABELS} for row in slice_statistics(slices).to_dicts()}
    return plots.slice_label_chart(counts, LABELS, f"Gold labels per slice, {venue}")


def build_report(venue: str, inputs: Mapping[str, Input], predictions: Mapping[str, Input]) -> Report:
    """The report of one venue from its tables (`inputs`, by asset name: REPORT_TABLES) and the predictions of each
    configuration (by configuration name)."""
    metrics, retrieval = inputs["metrics"], inputs["retrieval_metrics"]
    verifiers = Section("Verifier accuracy", [
        _table("Accuracy by model x configuration x slice", [metrics], accuracy_by_slice,
               f"parse failures, claims without a call and claims without a prediction count as errors; "
               f"`<slice> {PREDICTED}`: the labels the verifier answered; row {MAJORITY_ROW}: always answering the "
               "slice's most frequent gold label", one_label_warnings),
        _table("Accuracy vs macro-F1", [metrics], accuracy_and_f1,
               "macro-F1 over the four labels; majority_*: the slice's majority-class baseline"),
    ])
    if metrics.frame is not None:
        verifiers.items.append(answer_key_table(predictions))
        verifiers.items += configuration_figures(venue, metrics, predictions)
    return Report(venue, [
        Section("Benchmark slices", [
            _table("Slice statistics", [inputs["benchmark_slices"]], slice_statistics, "claims per gold label"),
            _figure("slice_labels.png", "Label distribution per slice", [inputs["benchmark_slices"]],
                    lambda slices: _slice_chart(slices, venue)),
        ]),
        verifiers,
        Section("Retrieval", [
            _table("Retrieval metrics per retriever", [retrieval], lambda f: _pick(f, RETRIEVAL_COLUMNS),
                   "strict: a chunk holding the gold evidence; section: a chunk of the gold paragraph's section"),
            _figure("retrieval_metrics.png", "Recall, nDCG and MRR per retriever", [retrieval],
                    lambda f: plots.retrieval_metrics_chart(f.filter(pl.col("status") == "ok").to_dicts(),
                                                            f"Retrieval on {venue}")),
            _figure("chunk_words.png", "Chunk sizes", [inputs["chunks"]],
                    lambda f: plots.chunk_size_histogram(f["word_count"].to_list(), f"Chunk sizes, {venue}"),
                    "words per chunk, with the paper's median and p90"),
        ]),
        Section("Labels and arbitration", [
            _table("Labeller agreement", [inputs["labeller_agreement"]], lambda f: _pick(f, AGREEMENT_COLUMNS),
                   warn=lambda f: agreement_warnings(f.to_dicts())),
            _table("Arbitration outcomes", [inputs["canonical_labels"]], arbitration_outcomes,
                   "canonical labels per provenance"),
        ]),
        Section("Token costs", [
            _table("Verifier tokens per configuration", [inputs["token_costs"]], lambda f: _pick(f, TOKEN_COST_COLUMNS),
                   "ratio_to_full_context: full-context tokens per claim / this configuration's"),
            _table("LLM usage behind the venue's tables", [inputs["llm_usage"]], lambda f: _pick(f, USAGE_COLUMNS)),
        ]),
        Section("Citations", [
            _table("Each citing sentence against the paper it cites, beside RefVerifier",
                   [inputs["citation_metrics"]], citation_figures,
                   "detection, bibliography parsing, reference checks, resolution, evidence localisation and "
                   "verdicts; refverifier: its published figure for the same measurement, n/a where it published "
                   "none or measured something else (the note says which)", citation_warnings),
        ]),
    ])


# -- rendering -------------------------------------------------------------------------------------------------------

def format_cell(value) -> str:  # noqa: ANN001
    if value is None:
        return MISSING_CELL
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _sources_line(sources: Sequence[Input]) -> str:
    return "source: " + ", ".join(i.source + ("" if i.frame is not None else f" ({i.missing})") for i in sources)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _markdown_table(frame: pl.DataFrame) -> str:
    if frame.is_empty():
        return "_(no rows)_"
    escape = lambda text: text.replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(escape(c) for c in frame.columns) + " |", "|" + "---|" * frame.width]
    lines += ["| " + " | ".join(escape(format_cell(v)) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join(lines)


def render_markdown(report: Report, embed_up_to: int = 0) -> str:
    """The report as Markdown. Figures link their PNG file beside it or, for the UI, are embedded as data URIs until
    their PNG bytes would pass `embed_up_to`; a figure past it is named by file instead (Dagster keeps metadata in
    its event log and the asset page loads it whole, so a grid of many configurations must not all go there)."""
    lines = [f"# Peerify report: {report.venue}", "",
             f"Tables and figures of venue `{report.venue}`, each naming the asset [partition] it came from.", ""]
    embedded = 0
    for section in report.sections:
        lines += [f"## {section.heading}", ""]
        for item in section.items:
            lines += [f"### {item.title}", ""]
            if isinstance(item, Figure):
                caption = f"_{_sources_line(item.sources)}{'; ' + item.note if item.note else ''}_"
                if not embed_up_to:
                    lines += [f"![{item.title}]({item.file_name})", "", caption, ""]
                elif embedded + len(item.png) <= embed_up_to:
                    embedded += len(item.png)
                    lines += [f"![{item.title}]({data_uri(item.png)})", "", caption, ""]
                else:
                    lines += [f"_{NOT_EMBEDDED} (this copy embeds at most {embed_up_to // 1024} KiB of images): "
                              f"`{item.file_name}` beside report.md_", "", caption, ""]
            else:
                lines += [f"_{_sources_line(item.sources)}_", ""]
                if item.frame is not None:
                    lines += [_markdown_table(item.frame), ""] + ([f"_{item.note}_", ""] if item.note else [])
                    lines += [line for warning in item.warnings for line in (f"**{WARNING}:** {warning}", "")]
    return "\n".join(lines)


_STYLE = """body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f0f0f0}td{text-align:right}td:first-child{text-align:left}.source{color:#666;font-size:12px}
img{max-width:100%}.missing{color:#a33}.warning{color:#8a4b00;background:#fff4e0;padding:4px 8px}"""


def _html_table(frame: pl.DataFrame) -> str:
    if frame.is_empty():
        return "<p><em>(no rows)</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(format_cell(v))}</td>" for v in row) + "</tr>"
                   for row in frame.iter_rows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page: every figure inlined as a data URI."""
    title = html.escape(f"Peerify report: {report.venue}")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{_STYLE}</style>"
             f"</head><body><h1>{title}</h1>",
             f"<p>Tables and figures of venue <code>{html.escape(report.venue)}</code>, each naming the asset "
             "[partition] it came from.</p>"]
    for section in report.sections:
        parts.append(f"<h2>{html.escape(section.heading)}</h2>")
        for item in section.items:
            missing = any(i.frame is None for i in item.sources)
            source = (f"<p class='source{' missing' if missing else ''}'>{html.escape(_sources_line(item.sources))}"
                      f"{'; ' + html.escape(item.note) if item.note else ''}</p>")
            parts.append(f"<h3>{html.escape(item.title)}</h3>")
            if isinstance(item, Figure):
                parts.append(f"<figure><img alt='{html.escape(item.title)}' src='{data_uri(item.png)}'>"
                             f"<figcaption>{source}</figcaption></figure>")
            else:
                parts.append(source + (_html_table(item.frame) if item.frame is not None else ""))
                parts += [f"<p class='warning'><strong>{WARNING}:</strong> {html.escape(warning)}</p>"
                          for warning in item.warnings]
    parts.append("</body></html>")
    return "\n".join(parts)
