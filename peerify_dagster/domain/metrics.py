"""Verifier scores per (configuration, verifier, slice) and token costs per (verifier, configuration).

Scores: each slice's claims (benchmark_slices, which carries every gold label) against one configuration's
predictions for one verifier. Every claim of the slice counts: a parse failure (a call made, no label), a claim no
call was made for (status no_manuscript, no_evidence, too_long, ...) and a claim with no prediction row at all are
errors in accuracy and macro-F1 (the `unparsed` column of the confusion matrix), never dropped from the denominator.
Accuracy, per-class scores, macro-F1 and the confusion matrix come from label_metrics, the one implementation every
label comparison uses.

Beside accuracy and macro-F1 goes the slice's majority-class baseline (always answering its most frequent gold
label: majority_label, majority_accuracy, majority_macro_f1), and a verifier that gave one label for 90% or more of
its answers on a slice gets a plain-words warning (`one_label_warnings`): a model answering Supported to nearly
everything scores near 1.0 on a slice of Supported claims.

The venue's hand-written answer key is not a slice: `answer_key_metrics` scores it from the predictions themselves
(their gold_label), in the same columns.

Token costs: the tokens a configuration spends per claim it called the verifier for, and the ratio of the same
verifier's full-context tokens per claim to it over the claims both called (the paper: 2.2K vs 21K tokens per claim).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from peerify_dagster.domain import label_metrics
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.predictions import CLAIM_SETS, MODE_FULL_CONTEXT, SOURCE_ANSWER_KEY, STATUS_OK
from peerify_dagster.domain.retrieval_metrics import markdown_table
from peerify_dagster.domain.slices import SLICES

STATUS_SCORED, STATUS_EMPTY = "ok", "empty"
ANSWER_KEY = "answer key"  # the `slice` of answer_key_metrics' rows
MAJORITY_ROW = "majority-class baseline"  # the row of a table that shows each slice's baseline
_F64, _I64, _TEXT = pl.Float64, pl.Int64, pl.String
_DESCRIBED = {"venue": _TEXT, "configuration": _TEXT, "verifier": _TEXT, "mode": _TEXT, "retriever": _TEXT, "k": _I64}
METRICS_SCHEMA: dict[str, pl.DataType] = {
    **_DESCRIBED, "slice": _TEXT, "status": _TEXT,
    "n_claims": _I64, "n_predicted": _I64, "n_parse_failures": _I64, "n_not_called": _I64, "n_missing": _I64,
    "accuracy": _F64, "macro_f1": _F64, "majority_label": _TEXT, "majority_accuracy": _F64, "majority_macro_f1": _F64,
    "parse_failure_rate": _F64,
    "per_class": pl.List(pl.Struct({"label": _TEXT, "precision": _F64, "recall": _F64, "f1": _F64, "support": _I64})),
    "confusion": pl.List(pl.Struct({"gold": _TEXT, "predicted": _TEXT, "count": _I64})),
    "predicted_distribution": pl.List(pl.Struct({"label": _TEXT, "count": _I64})),
    "tokens_in_per_claim": _F64, "tokens_out_per_claim": _F64, "tokens_per_claim": _F64,
}
TOKEN_COSTS_SCHEMA: dict[str, pl.DataType] = {
    "venue": _TEXT, "verifier": _TEXT, "configuration": _TEXT, "mode": _TEXT, "retriever": _TEXT, "k": _I64,
    "claims_called": _I64, "tokens_in": _I64, "tokens_out": _I64, "tokens_per_claim": _F64,
    "full_context_configuration": _TEXT, "full_context_tokens_per_claim": _F64, "ratio_to_full_context": _F64,
}


_COUNTS = ("n_claims", "n_predicted", "n_parse_failures", "n_not_called", "n_missing")


class MetricsInputError(ValueError):
    """Predictions or slices the metrics cannot score; the message names the configuration, verifier and claims."""


def _runs(predictions: pl.DataFrame) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(configuration, verifier) -> its prediction rows, checked: one row per claim, labels in the vocabulary."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in predictions.iter_rows(named=True):
        runs.setdefault((row["configuration"], row["verifier"]), []).append(row)
    for (configuration, verifier), rows in runs.items():
        twice = sorted(claim for claim, n in Counter(r["claim_id"] for r in rows).items() if n > 1)
        if twice:
            raise MetricsInputError(f"configuration {configuration!r}, verifier {verifier!r}: more than one prediction "
                                    f"row for claims {twice[:20]}")
        wrong = sorted({r["claim_id"] for r in rows if _answered(r) is not None and _answered(r) not in LABELS})
        if wrong:
            raise MetricsInputError(f"configuration {configuration!r}, verifier {verifier!r}: labels outside "
                                    f"{list(LABELS)} for claims {wrong[:20]}")
    return runs


def _answered(row: Mapping[str, Any] | None) -> str | None:
    """The label a prediction row counts as, None (an error) without a parsed label from a call that was made."""
    if row is None or row["status"] != STATUS_OK or not row["parse_ok"]:
        return None
    return row["label"]


def _mean(total: float, n: int) -> float | None:
    return total / n if n else None


def score_slice(gold: Mapping[str, str], predicted: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The score columns of one slice (claim id -> gold label) against one run's rows (claim id -> prediction row)."""
    claims = sorted(gold)
    rows = [predicted.get(claim_id) for claim_id in claims]
    called = [row for row in rows if row is not None and row["status"] == STATUS_OK]
    labels = [_answered(row) for row in rows]
    golds = [gold[claim_id] for claim_id in claims]
    matrix = label_metrics.confusion_matrix(golds, labels)
    tokens_in = sum(row["tokens_in"] or 0 for row in called)
    tokens_out = sum(row["tokens_out"] or 0 for row in called)
    n_predicted = sum(label is not None for label in labels)
    baseline = label_metrics.majority_baseline(golds)
    return {
        "n_claims": len(claims), "n_predicted": n_predicted, "n_parse_failures": len(called) - n_predicted,
        "n_not_called": sum(row is not None and row["status"] != STATUS_OK for row in rows),
        "n_missing": sum(row is None for row in rows),
        "accuracy": label_metrics.accuracy(golds, labels), "macro_f1": label_metrics.macro_f1(golds, labels),
        "majority_label": baseline and baseline.label, "majority_accuracy": baseline and baseline.accuracy,
        "majority_macro_f1": baseline and baseline.macro_f1,
        "parse_failure_rate": _mean(len(called) - n_predicted, len(called)),
        "per_class": [{"label": s.label, "precision": s.precision, "recall": s.recall, "f1": s.f1,
                       "support": s.support} for s in label_metrics.per_class(golds, labels)],
        "confusion": [{"gold": g, "predicted": p, "count": n} for g, cells in matrix.items() for p, n in cells.items()],
        "predicted_distribution": [{"label": p, "count": sum(matrix[g][p] for g in LABELS)}
                                   for p in (*LABELS, label_metrics.UNPARSED)],
        "tokens_in_per_claim": _mean(tokens_in, len(called)), "tokens_out_per_claim": _mean(tokens_out, len(called)),
        "tokens_per_claim": _mean(tokens_in + tokens_out, len(called)),
    }


def _in_slice_order(names: Iterable[str]) -> list[str]:
    """The six slices in the paper's order (every one of them, present or not), then any other slice by name."""
    return [*SLICES, *sorted(set(names) - set(SLICES))]


def slice_metrics(venue: str, predictions: pl.DataFrame, slices: pl.DataFrame) -> pl.DataFrame:
    """One row per (configuration, verifier, slice) for every slice of which at least one claim has a prediction row
    of the configuration (status ok), and per empty slice whose claim population the configuration predicted
    (status empty, no scores: the report shows the slice exists but has no claims yet)."""
    gold_by_slice: dict[str, dict[str, str]] = {name: {} for name in _in_slice_order(slices["slice"])}
    for name, claim_id, label in slices.select("slice", "claim_id", "gold_label").iter_rows():
        gold_by_slice[name][claim_id] = label
    missing_gold = sorted(f"{name}/{claim}" for name, gold in gold_by_slice.items()
                          for claim, label in gold.items() if label not in LABELS)
    if missing_gold:
        raise MetricsInputError(f"benchmark_slices: gold labels missing or outside {list(LABELS)} for "
                                f"{missing_gold[:20]}")
    out = []
    for (configuration, verifier), rows in sorted(_runs(predictions).items()):
        described = {"venue": venue, "configuration": configuration, "verifier": verifier,
                     **{c: rows[0][c] for c in ("mode", "retriever", "k")}}
        by_claim = {row["claim_id"]: row for row in rows}
        sources = {row["claim_source"] for row in rows}
        for name, gold in gold_by_slice.items():
            if not gold:
                if CLAIM_SETS.get(name) in sources:
                    out.append({**described, "slice": name, "status": STATUS_EMPTY, **dict.fromkeys(_COUNTS, 0)})
            elif not by_claim.keys().isdisjoint(gold):
                out.append({**described, "slice": name, "status": STATUS_SCORED, **score_slice(gold, by_claim)})
    return pl.DataFrame(out, schema=METRICS_SCHEMA)


def _tokens(rows: Iterable[Mapping[str, Any]]) -> int:
    return sum((row["tokens_in"] or 0) + (row["tokens_out"] or 0) for row in rows)


def answer_key_metrics(predictions: pl.DataFrame) -> pl.DataFrame:
    """The metrics columns per (configuration, verifier) over the answer-key claims it predicted, scored against the
    key's labels that the prediction rows carry (gold_label); `slice` is ANSWER_KEY. No rows without such claims."""
    keyed = predictions.filter((pl.col("claim_source") == SOURCE_ANSWER_KEY) & pl.col("gold_label").is_in(LABELS))
    out = []
    for (configuration, verifier), rows in sorted(_runs(keyed).items()):
        gold = {row["claim_id"]: row["gold_label"] for row in rows}
        out.append({"venue": rows[0]["venue"], "configuration": configuration, "verifier": verifier,
                    **{c: rows[0][c] for c in ("mode", "retriever", "k")}, "slice": ANSWER_KEY,
                    "status": STATUS_SCORED, **score_slice(gold, {row["claim_id"]: row for row in rows})})
    return pl.DataFrame(out, schema=METRICS_SCHEMA)


def predicted_counts(row: Mapping[str, Any]) -> dict[str, int]:
    """A metrics row's predicted_distribution as label -> claims (empty for an empty slice)."""
    return {cell["label"]: cell["count"] for cell in row.get("predicted_distribution") or []}


def one_label_warning(row: Mapping[str, Any]) -> str | None:
    """The plain-words warning for a metrics row whose verifier gave one label for 90% or more of its answers."""
    dominant = label_metrics.dominant_label(predicted_counts(row))
    if dominant is None:
        return None
    unanswered = row["n_claims"] - dominant.answered
    more = f", and no usable label for {unanswered} more" if unanswered else ""
    baseline = "-" if row.get("majority_accuracy") is None else f"{row['majority_accuracy']:.2f}"
    where = "the answer key" if row["slice"] == ANSWER_KEY else row["slice"]
    return (f"Verifier {row['verifier']} ({row['configuration']}) answered {dominant.label} to {dominant.count} of "
            f"{dominant.answered} claims ({dominant.share}) on {where}{more}: its accuracy mostly reflects the "
            f"share of {dominant.label} claims; compare with the majority baseline {baseline} (always answering "
            f"{row.get('majority_label')}).")


def one_label_warnings(metrics: pl.DataFrame) -> list[str]:
    """one_label_warning of every row that earns one, in the table's order."""
    return [warning for row in metrics.iter_rows(named=True) if (warning := one_label_warning(row))]


def token_costs(venue: str, predictions: pl.DataFrame) -> pl.DataFrame:
    """One row per (verifier, configuration): claims the verifier was called for, their tokens, tokens per claim; and
    against the same verifier's full-context configuration (the one sharing most called claims, then by name): its
    tokens per claim and the ratio of it to this configuration's, both over the claims both called."""
    runs = _runs(predictions)
    called = {key: {row["claim_id"]: row for row in rows if row["status"] == STATUS_OK} for key, rows in runs.items()}
    out = []
    for (configuration, verifier), calls in sorted(called.items(), key=lambda item: (item[0][1], item[0][0])):
        first = runs[(configuration, verifier)][0]
        tokens_in = sum(row["tokens_in"] or 0 for row in calls.values())
        tokens_out = sum(row["tokens_out"] or 0 for row in calls.values())
        row = {"venue": venue, "verifier": verifier, "configuration": configuration,
               **{c: first[c] for c in ("mode", "retriever", "k")}, "claims_called": len(calls),
               "tokens_in": tokens_in, "tokens_out": tokens_out,
               "tokens_per_claim": _mean(tokens_in + tokens_out, len(calls))}
        full = sorted((-len(calls.keys() & full_calls.keys()), name) for (name, model), full_calls in called.items()
                      if model == verifier and runs[(name, model)][0]["mode"] == MODE_FULL_CONTEXT)
        if full and full[0][0] < 0:
            name = full[0][1]
            common = calls.keys() & called[(name, verifier)].keys()
            full_per_claim = _tokens(called[(name, verifier)][c] for c in common) / len(common)
            own_per_claim = _tokens(calls[c] for c in common) / len(common)
            row |= {"full_context_configuration": name, "full_context_tokens_per_claim": full_per_claim,
                    "ratio_to_full_context": full_per_claim / own_per_claim if own_per_claim else None}
        out.append(row)
    return pl.DataFrame(out, schema=TOKEN_COSTS_SCHEMA)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def metrics_markdown(metrics: pl.DataFrame) -> str:
    """Accuracy / macro-F1 per configuration x verifier (rows) and slice (columns), `empty` for an empty slice, with
    a last row holding each slice's majority-class baseline; then the predicted labels in the same layout and the
    one-label warnings."""
    present = set(metrics["slice"])
    names = [name for name in _in_slice_order(present) if name in present]
    scores: dict[tuple[str, str], dict[str, str]] = {}
    predicted: dict[tuple[str, str], dict[str, str]] = {}
    baseline = {"configuration": MAJORITY_ROW, "verifier": "-"}
    for row in metrics.iter_rows(named=True):
        key, empty = (row["configuration"], row["verifier"]), row["status"] == STATUS_EMPTY
        scores.setdefault(key, dict(zip(("configuration", "verifier"), key)))[row["slice"]] = (
            STATUS_EMPTY if empty else f"{_cell(row['accuracy'])} / {_cell(row['macro_f1'])} (n={row['n_claims']})")
        predicted.setdefault(key, dict(zip(("configuration", "verifier"), key)))[row["slice"]] = (
            STATUS_EMPTY if empty else label_metrics.distribution_text(predicted_counts(row)))
        if not empty:
            baseline[row["slice"]] = (f"{_cell(row['majority_accuracy'])} / {_cell(row['majority_macro_f1'])} "
                                      f"(always {row['majority_label']})")
    columns = ["configuration", "verifier", *names]
    warnings = one_label_warnings(metrics)
    return ("accuracy / macro-F1 (n = claims in the slice; unparsed, not called and missing count as errors; the last "
            "row: always answering the slice's most frequent gold label)\n\n"
            + markdown_table([*(scores[key] for key in sorted(scores)), baseline], columns)
            + "\n\npredicted labels (claims per label answered; unparsed: no usable label)\n\n"
            + markdown_table([predicted[key] for key in sorted(predicted)], columns)
            + "".join(f"\n\n**Warning:** {warning}" for warning in warnings))


def token_costs_markdown(costs: pl.DataFrame) -> str:
    """Tokens per claim per verifier x configuration and the ratio of full-context tokens per claim to them."""
    columns: Sequence[str] = ("verifier", "configuration", "mode", "claims_called", "tokens_per_claim",
                              "full_context_configuration", "ratio_to_full_context")
    return markdown_table(costs.select(columns).to_dicts(), columns, digits=1)
