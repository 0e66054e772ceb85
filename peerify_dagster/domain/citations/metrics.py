"""The citation half's figures, stage by stage, each beside RefVerifier's published one, and their report section.

`citation_metrics` reads one venue's citation tables (polars frames with the columns of the contract: citances,
bibliography, reference_checks, cited_papers, citation_evidence, citation_verdicts) and returns rows of
{stage, metric, value, n, refverifier, note}: `value` a share (0-1), a score or a count; `n` its denominator (or
what it counts over); `refverifier` RefVerifier's figure for the same measurement (`REFVERIFIER`), None where it
published none or measured something else, the note saying which; per-verifier and per-retriever rows carry their
scope in the metric's name ("Supported share (gpt-4o, windows)"). Scores against gold (detection P/R/F1,
localisation hit rate and MRR, verdict agreement) appear only when `CitationGold` gives that gold.

Numbers that cannot mislead, as for the predictions (domain/metrics.py): verdict agreement goes beside the
majority-label baseline of the same gold; a pair without a verdict (no call, or no usable answer) is a
disagreement, never dropped; and a verifier that answers one label to nearly everything (label_metrics'
ONE_LABEL_PERCENT or more of its answers) is named in plain words. The four verdicts are scored by label_metrics,
the one implementation every label comparison uses, through the order-preserving map of CITATION_LABELS onto
Peerify's LABELS (Not Enough Information in the place of Not Determined).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from peerify_dagster.domain import label_metrics
from peerify_dagster.domain.citations.options import MODE_MERGED
from peerify_dagster.domain.citations.resolution import OUTCOME_WRONG_PAPER
from peerify_dagster.domain.citations.verdicts import (
    STATUS_ERROR,
    STATUS_NO_CITED_PAPER,
    STATUS_NO_PASSAGES,
    STATUS_NO_RELEVANT_PASSAGE,
    STATUS_OK,
    STATUS_PARSE_FAILED,
    STATUS_TOO_LONG,
)
from peerify_dagster.domain.citations.vocabulary import (
    CITATION_LABELS,
    NOT_ENOUGH_INFORMATION,
    NOT_FOUND,
    PARTIALLY_SUPPORTED,
    REFERENCE_STATUSES,
    SUPPORTED,
    SUSPICIOUS,
    UNVALIDATABLE,
    VALIDATED,
)
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.retrieval_metrics import hit_at_k, markdown_table, mrr_at_k

STAGES = ("detection", "parsing", "reference_checks", "resolution", "localisation", "verdicts")
METRIC_COLUMNS = ("stage", "metric", "value", "n", "refverifier", "note")
CITATION_METRICS_SCHEMA: dict[str, pl.DataType] = {
    "stage": pl.String, "metric": pl.String, "value": pl.Float64, "n": pl.Int64, "refverifier": pl.Float64,
    "note": pl.String,
}


@dataclass(frozen=True)
class Published:
    """One of RefVerifier's published figures: the value (a share as 0-1, or minutes), what it counts over, and the
    measurement it comes from."""

    value: float
    n: int | None
    measured: str


# RefVerifier's results as its paper and public reproduction package report them (quoted in issue 20).
REFVERIFIER: dict[str, Published] = {
    "detection_precision": Published(0.980, 300, "its deterministic regex detector on 300 CiteWorth paragraphs"),
    "detection_recall": Published(1.000, 300, "its deterministic regex detector on 300 CiteWorth paragraphs"),
    "detection_f1": Published(0.990, 300, "its deterministic regex detector on 300 CiteWorth paragraphs"),
    "detection_precision_hybrid": Published(0.986, 300, "its shipped regex + LLM hybrid on the same paragraphs"),
    "detection_recall_hybrid": Published(0.991, 300, "its shipped regex + LLM hybrid on the same paragraphs"),
    "detection_f1_hybrid": Published(0.989, 300, "its shipped regex + LLM hybrid on the same paragraphs"),
    "detection_recall_pdfs": Published(0.93, 10, "ten rendered arXiv PDFs against their LaTeX \\cite commands"),
    "resolved": Published(571 / 992, 992, "571 of 992 references resolved to a full-text PDF"),
    "resolved_with_identifier": Published(0.926, None, "references with a DOI or an arXiv id"),
    "resolved_without_identifier": Published(0.454, None, "references without a DOI or an arXiv id"),
    "right_paper": Published(0.93, None, "share of its downloads that were the right paper (checked by hand)"),
    "hit_rate_abstracts": Published(0.98, None, "evidence localisation on abstracts, merged LLM mode"),
    "hit_rate_full_papers": Published(0.68, None, "evidence localisation on full papers, merged LLM mode"),
    "mrr": Published(0.96, None, "mean reciprocal rank of the evidence, merged LLM mode"),
    "verdict_agreement": Published(0.71, 118, "agreement with one annotator on 118 claims of 8 real manuscripts"),
    "partially_for_supported": Published(25 / 118, 118, "25 of the 118 claims: Partially Supported where the "
                                                        "annotator said Supported"),
    "minutes_per_manuscript": Published(11.0, 8, "median minutes per manuscript, 35-91% of it reference retrieval"),
}

_TO_PEERIFY = dict(zip(CITATION_LABELS, LABELS))
_FROM_PEERIFY = dict(zip(LABELS, CITATION_LABELS))
_NO_VERDICT_STATUSES = (STATUS_TOO_LONG, STATUS_PARSE_FAILED, STATUS_ERROR, STATUS_NO_PASSAGES)
ONE_LABEL = "one label"  # the metric of a row naming a verifier that answers one label to nearly everything
# Metrics shown as whole numbers and as means rather than shares (everything else is a share or a 0-1 score).
_COUNTS = frozenset({"manuscripts without references", "rejected wrong papers"})
_MEANS = frozenset({"citances per manuscript", "entries per manuscript"})


@dataclass(frozen=True)
class CitationGold:
    """Gold the figures can be scored against, each optional.

    `citing_sentences`: paper id -> the texts of its citing sentences (a detected citance matches a gold sentence of
    its paper with the same letters and digits, case, spacing and punctuation aside); `evidence`: (citance id, entry
    id) -> the cited paper's evidence texts (a passage is relevant when it holds one, or lies inside one);
    `verdicts`: (citance id, entry id) -> its gold verdict, one of CITATION_LABELS."""

    citing_sentences: Mapping[str, Sequence[str]] | None = None
    evidence: Mapping[tuple[str, str], Sequence[str]] | None = None
    verdicts: Mapping[tuple[str, str], str] | None = None


def _share(count: int, total: int) -> float | None:
    return count / total if total else None


def _row(stage: str, metric: str, value: float | None, n: int, refverifier: Published | None = None,
         note: str = "") -> dict[str, Any]:
    return {"stage": stage, "metric": metric, "value": value, "n": n,
            "refverifier": refverifier.value if refverifier else None, "note": note}


def _letters(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).strip()


# -- the stages ------------------------------------------------------------------------------------------------------

def _detection(citances: pl.DataFrame, manuscripts: set[str],
               gold: Mapping[str, Sequence[str]] | None) -> list[dict[str, Any]]:
    markers = [marker for markers in citances["markers"].to_list() for marker in markers or ()]
    resolved = sum(bool(marker.get("entry_ids")) and not marker.get("unresolved_keys") for marker in markers)
    rows = [
        _row("detection", "citances per manuscript", _share(citances.height, len(manuscripts)), len(manuscripts),
             note="citing sentences of the body per manuscript; n/a: RefVerifier publishes no count per manuscript"),
        _row("detection", "markers resolved share", _share(resolved, len(markers)), len(markers),
             note="a marker is resolved when every key it names (each number of [3, 7-9], each author-year) matched "
                  "a bibliography entry; n/a: RefVerifier publishes no marker-resolution figure"),
        _row("detection", "citances with every marker resolved share",
             _share(int((citances["resolution"] == "all").sum()), citances.height), citances.height,
             note="n/a: RefVerifier publishes no marker-resolution figure"),
    ]
    if gold is None:
        return rows
    found = Counter((paper, _letters(text)) for paper, text in citances.select("paper_id", "text").iter_rows()
                    if paper in gold)
    expected = Counter((paper, _letters(text)) for paper, texts in gold.items() for text in texts)
    matched = sum((found & expected).values())
    detected, relevant = sum(found.values()), sum(expected.values())
    precision, recall = _share(matched, detected), _share(matched, relevant)
    f1 = None if precision is None or recall is None else (
        2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    hybrid = " / ".join(f"{REFVERIFIER[f'detection_{name}_hybrid'].value:.3f}"
                        for name in ("precision", "recall", "f1"))
    where = (f"against the gold citing sentences of the manuscripts that have them ({len(gold)}); RefVerifier: "
             f"{REFVERIFIER['detection_f1'].measured} (its regex + LLM hybrid: {hybrid})")
    return rows + [
        _row("detection", "precision", precision, detected, REFVERIFIER["detection_precision"],
             f"detected citing sentences that are gold, {where}"),
        _row("detection", "recall", recall, relevant, REFVERIFIER["detection_recall"],
             f"gold citing sentences detected, {where}"),
        _row("detection", "f1", f1, relevant, REFVERIFIER["detection_f1"], where),
    ]


def _entries(bibliography: pl.DataFrame) -> pl.DataFrame:
    return bibliography.filter(pl.col("parse_status") != "no_references")


def _parsing(bibliography: pl.DataFrame, manuscripts: set[str]) -> list[dict[str, Any]]:
    entries = _entries(bibliography)
    n = entries.height
    statuses = Counter(entries["parse_status"].to_list())
    without = bibliography.filter(pl.col("parse_status") == "no_references")["paper_id"].n_unique()
    why = "n/a: RefVerifier publishes no bibliography-parsing figure"
    return [
        _row("parsing", "entries per manuscript", _share(n, len(manuscripts)), len(manuscripts), note=why),
        _row("parsing", "manuscripts without references", float(without), len(manuscripts),
             note=f"manuscripts in which no references section was found; {why}"),
        *(_row("parsing", f"{status} share", _share(statuses[status], n), n, note=f"entries with {found}; {why}")
          for status, found in (("parsed", "a title and authors or a year"), ("partial", "some fields"),
                                ("unparsed", "no field found"))),
        _row("parsing", "with DOI share", _share(int(entries["doi"].is_not_null().sum()), n), n, note=why),
        _row("parsing", "with arXiv id share", _share(int(entries["arxiv_id"].is_not_null().sum()), n), n, note=why),
    ]


def _reference_checks(checks: pl.DataFrame) -> list[dict[str, Any]]:
    statuses = Counter(checks["status"].to_list())
    meaning = {VALIDATED: "a metadata record agrees on title, authors and year",
               SUSPICIOUS: "a record contradicts title or authors, the year is off, or the paper is retracted",
               NOT_FOUND: "every source asked answered and none holds the work: possibly fabricated",
               UNVALIDATABLE: "nothing could be asked, or a source failed and the rest found nothing"}
    return [_row("reference_checks", f"{status} share", _share(statuses[status], checks.height), checks.height,
                 note=f"{meaning[status]}; n/a: RefVerifier publishes no metadata-check figure")
            for status in REFERENCE_STATUSES]


def _resolution(cited_papers: pl.DataFrame, bibliography: pl.DataFrame) -> list[dict[str, Any]]:
    entries = _entries(bibliography).select(
        "entry_id", (pl.col("doi").is_not_null() | pl.col("arxiv_id").is_not_null()).alias("identified"))
    papers = cited_papers.select("entry_id", "status").join(entries, on="entry_id", how="inner")
    rows = []
    for metric, frame, published in (
            ("resolved share", papers, REFVERIFIER["resolved"]),
            ("resolved share with identifier", papers.filter(pl.col("identified")),
             REFVERIFIER["resolved_with_identifier"]),
            ("resolved share without identifier", papers.filter(~pl.col("identified")),
             REFVERIFIER["resolved_without_identifier"])):
        rows.append(_row("resolution", metric, _share(int((frame["status"] == "resolved").sum()), frame.height),
                         frame.height, published,
                         f"entries resolved to a full text and accepted by the right-paper check; RefVerifier: "
                         f"{published.measured}, through its own chain of sources (here: the venue's resolve order)"))
    # Refusals by the right-paper check only (a file the parser refused, encrypted or image-only, was never compared),
    # over the full texts that reached the check: the ones taken from a file and the ones it refused.
    outcomes = cited_papers.select("entry_id", "source", "status", pl.col("attempts").list.eval(
        pl.element().struct.field("outcome")).alias("outcomes")).join(entries, on="entry_id", how="inner")
    wrong = int(outcomes["outcomes"].list.contains(OUTCOME_WRONG_PAPER).sum())
    checked = wrong + int(((outcomes["status"] == "resolved") & (outcomes["source"] != "venue")).sum())
    rows.append(_row("resolution", "rejected wrong papers", float(wrong), checked,
                     note=f"full texts the right-paper check refused, of {checked} it compared (a file the parser "
                          f"refused, encrypted or image-only, is not among them); n/a: RefVerifier "
                          f"reports the {REFVERIFIER['right_paper'].measured}: "
                          f"{REFVERIFIER['right_paper'].value:.0%}, not a count of refusals"))
    return rows


def _relevant(text: str, gold_texts: Sequence[str]) -> bool:
    passage = _letters(text)
    return any((gold := _letters(g)) and (gold in passage or passage in gold) for g in gold_texts)


def localisation_figures(evidence: pl.DataFrame,
                  gold: Mapping[tuple[str, str], Sequence[str]] | None) -> list[dict[str, Any]]:
    rows = []
    for (mode, retriever), group in _groups(evidence, ("mode", "retriever")).items():
        scope = f"{mode}, {retriever}" if retriever else mode
        pairs: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
        for row in group:
            pairs[(row["citance_id"], row["entry_id"])].append(row)
        with_passages = sum(any(r["status"] == STATUS_OK for r in shown) for shown in pairs.values())
        rows.append(_row("localisation", f"pairs with passages share ({scope})", _share(with_passages, len(pairs)),
                         len(pairs), note="(citance, cited entry) pairs shown at least one passage of the cited "
                                          "paper; n/a: RefVerifier publishes no such figure"))
        if gold is None:
            continue
        # Every gold pair counts, those without an evidence row too (a marker that resolved to another entry, or to
        # none): a pair the pipeline never looked at is a miss, not left out.
        scored = [pair for pair, texts in gold.items() if texts]
        hits = mrr = 0.0
        for pair in scored:
            shown = sorted((r for r in pairs.get(pair, ()) if r["status"] == STATUS_OK), key=lambda r: r["rank"])
            ranked = [r["passage_id"] for r in shown]
            relevant = {r["passage_id"] for r in shown if _relevant(r["text"], gold[pair])}
            if relevant:
                hits += hit_at_k(ranked, relevant, len(ranked))
                mrr += mrr_at_k(ranked, relevant, len(ranked))
        missing = len(scored) - sum(any(r["status"] == STATUS_OK for r in pairs.get(pair, ())) for pair in scored)
        counted = (f"over the {len(scored)} pairs with gold evidence ({missing} without passages count as misses); "
                   "a passage is a hit when it holds a gold evidence text or lies inside one")
        if mode == MODE_MERGED:
            why = (f"; n/a: merged mode shows the whole paper, so a hit only says the gold lies in the parsed paper, "
                   f"while RefVerifier's merged figures ({REFVERIFIER['hit_rate_full_papers'].value:.0%} on full "
                   f"papers, MRR {REFVERIFIER['mrr'].value:.2f}) score the model's own choice of evidence")
            rows += [_row("localisation", f"hit rate ({scope})", _share(hits, len(scored)), len(scored),
                          note=counted + why),
                     _row("localisation", f"MRR ({scope})", _share(mrr, len(scored)), len(scored), note=counted + why)]
        else:
            their = (f"; RefVerifier: {REFVERIFIER['hit_rate_full_papers'].measured} (the model names the evidence; "
                     f"{REFVERIFIER['hit_rate_abstracts'].value:.0%} on abstracts), here the retriever's top passages")
            rows += [_row("localisation", f"hit rate ({scope})", _share(hits, len(scored)), len(scored),
                          REFVERIFIER["hit_rate_full_papers"], counted + their),
                     _row("localisation", f"MRR ({scope})", _share(mrr, len(scored)), len(scored), REFVERIFIER["mrr"],
                          counted + their)]
    return rows


def one_label_sentence(verifier: str, mode: str, counts: Mapping[str, int]) -> str | None:
    """The plain-words warning for a verifier that gave one verdict for label_metrics.ONE_LABEL_PERCENT or more of its
    answers (`counts`: verdict -> answers of its calls), as the predictions' metrics word it; None otherwise."""
    dominant = label_metrics.dominant_label({_TO_PEERIFY[label]: n for label, n in counts.items()
                                             if label in _TO_PEERIFY})
    if dominant is None:
        return None
    label = _FROM_PEERIFY[dominant.label]
    return (f"Verifier {verifier} ({mode}) answered {label} to {dominant.count} of {dominant.answered} citations "
            f"({dominant.share}): its verdicts mostly reflect that one label, not the citations; compare its "
            "agreement with the majority-label baseline.")


def _verdicts(verdicts: pl.DataFrame, gold: Mapping[tuple[str, str], str] | None) -> list[dict[str, Any]]:
    if gold is not None:
        wrong = sorted(f"{c}/{e}" for (c, e), label in gold.items() if label not in CITATION_LABELS)
        if wrong:
            raise ValueError(f"gold verdicts outside {list(CITATION_LABELS)} for {wrong[:20]}")
    rows = []
    for (verifier, mode), group in _groups(verdicts, ("verifier", "mode")).items():
        scope = f"{verifier}, {mode}"
        n = len(group)
        labels = Counter(row["label"] for row in group if row["label"] is not None)
        statuses = Counter(row["status"] for row in group)
        for label in CITATION_LABELS:
            rows.append(_row("verdicts", f"{label} share ({scope})", _share(labels[label], n), n,
                             note="n/a: RefVerifier publishes agreement, not its distribution of verdicts"
                                  + ("; includes the pairs given it without a call (cited paper not had, or no "
                                     "passage of it relevant)" if label == NOT_ENOUGH_INFORMATION and (
                                         statuses[STATUS_NO_CITED_PAPER] or statuses[STATUS_NO_RELEVANT_PASSAGE])
                                     else "")))
        no_verdict = sum(statuses[status] for status in _NO_VERDICT_STATUSES)
        detail = ", ".join(f"{status} {statuses[status]}" for status in _NO_VERDICT_STATUSES if statuses[status])
        rows.append(_row("verdicts", f"no verdict share ({scope})", _share(no_verdict, n), n,
                         note=f"no call or no usable answer ({detail or 'none'}); n/a: RefVerifier publishes none"))
        rows.append(_row("verdicts", f"no cited paper share ({scope})", _share(statuses[STATUS_NO_CITED_PAPER], n), n,
                         note="Not Enough Information without a call: the cited paper could not be had; "
                              "n/a: RefVerifier publishes none"))
        rows.append(_row("verdicts", f"no relevant passage share ({scope})",
                         _share(statuses[STATUS_NO_RELEVANT_PASSAGE], n), n,
                         note="Not Enough Information without a call: no passage of the cited paper cleared the "
                              "retriever's relevance floor; n/a: RefVerifier publishes none"))
        answered = Counter(row["label"] for row in group if row["status"] == STATUS_OK and row["label"] is not None)
        if sentence := one_label_sentence(verifier, mode, answered):
            top = max(answered.values())
            rows.append(_row("verdicts", f"{ONE_LABEL} ({scope})", _share(top, sum(answered.values())),
                             sum(answered.values()), note=sentence))
        if gold:
            rows += _verdict_scores(scope, {(r["citance_id"], r["entry_id"]): r["label"] for r in group}, gold)
    return rows


def _verdict_scores(scope: str, predicted: Mapping[tuple[str, str], str | None],
                    gold: Mapping[tuple[str, str], str]) -> list[dict[str, Any]]:
    pairs = sorted(gold)
    golds = [_TO_PEERIFY[gold[pair]] for pair in pairs]
    answers = [_TO_PEERIFY.get(predicted.get(pair)) for pair in pairs]
    n = len(pairs)
    baseline = label_metrics.majority_baseline(golds)
    missing = sum(answer is None for answer in answers)
    partial = sum(g == SUPPORTED and predicted.get(p) == PARTIALLY_SUPPORTED for p, g in
                  ((pair, gold[pair]) for pair in pairs))
    counted = f"over {n} pairs with a gold verdict ({missing} without a verdict count as disagreements)"
    always = _FROM_PEERIFY[baseline.label] if baseline else None
    return [
        _row("verdicts", f"agreement ({scope})", label_metrics.accuracy(golds, answers), n,
             REFVERIFIER["verdict_agreement"], f"{counted}; RefVerifier: {REFVERIFIER['verdict_agreement'].measured}"),
        _row("verdicts", f"macro-F1 ({scope})", label_metrics.macro_f1(golds, answers), n,
             note=f"{counted}, averaged over the four verdicts; n/a: RefVerifier publishes no macro-F1"),
        _row("verdicts", f"majority-label baseline agreement ({scope})", baseline and baseline.accuracy, n,
             note=f"always answering {always}, the gold's most frequent verdict; n/a: RefVerifier publishes none"),
        _row("verdicts", f"majority-label baseline macro-F1 ({scope})", baseline and baseline.macro_f1, n,
             note=f"always answering {always}; n/a: RefVerifier publishes none"),
        _row("verdicts", f"Partially Supported for gold Supported share ({scope})", _share(partial, n), n,
             REFVERIFIER["partially_for_supported"],
             f"pairs answered Partially Supported whose gold is Supported; RefVerifier: "
             f"{REFVERIFIER['partially_for_supported'].measured}"),
    ]


def _groups(frame: pl.DataFrame, keys: Sequence[str]) -> dict[tuple, list[dict[str, Any]]]:
    """The frame's rows grouped by the key columns, groups in the keys' order (a missing value first)."""
    grouped: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in frame.iter_rows(named=True):
        grouped[tuple(row[key] for key in keys)].append(row)
    return dict(sorted(grouped.items(), key=lambda item: tuple((value is not None, str(value))
                                                                 for value in item[0])))


def citation_metrics(citances: pl.DataFrame, bibliography: pl.DataFrame, reference_checks: pl.DataFrame,
                     cited_papers: pl.DataFrame, citation_evidence: pl.DataFrame, citation_verdicts: pl.DataFrame,
                     gold: CitationGold | None = None) -> list[dict[str, Any]]:
    """Every stage's figures for one venue's citation tables (see the module docstring), in STAGES order; the
    manuscripts counted are those with a bibliography row or a citance."""
    gold = gold or CitationGold()
    manuscripts = set(bibliography["paper_id"].to_list()) | set(citances["paper_id"].to_list())
    return [
        *_detection(citances, manuscripts, gold.citing_sentences),
        *_parsing(bibliography, manuscripts),
        *_reference_checks(reference_checks),
        *_resolution(cited_papers, bibliography),
        *localisation_figures(citation_evidence, gold.evidence),
        *_verdicts(citation_verdicts, gold.verdicts),
    ]


# -- the report section ----------------------------------------------------------------------------------------------

_STAGE_TITLES = {
    "detection": "Citance detection", "parsing": "Bibliography parsing", "reference_checks": "Reference checks",
    "resolution": "Resolution to a full text", "localisation": "Evidence localisation", "verdicts": "Verdicts",
}


def _base_metric(metric: str) -> str:
    return re.sub(r" \([^()]*\)$", "", metric)


def format_value(metric: str, value: float | None) -> str:
    """A figure as the report shows it: counts whole, means with one decimal, shares and scores as percentages or
    with three decimals; "–" when there is none (nothing to count over)."""
    if value is None:
        return "–"
    base = _base_metric(metric)
    if base in _COUNTS:
        return f"{value:.0f}"
    if base in _MEANS:
        return f"{value:.1f}"
    if re.search(r"\bshare\b", base) or base.startswith(("hit rate", "agreement", "majority-label baseline agreement")):
        return f"{value:.1%}"
    return f"{value:.3f}"


def citation_report_markdown(rows: Iterable[Mapping[str, Any]]) -> str:
    """The venue report's citation section: one table per stage (metric, value, n, RefVerifier's figure or "n/a",
    and the note saying what was counted and, for n/a, why), the one-label warnings under the verdicts."""
    by_stage: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_stage[row["stage"]].append(row)
    parts = ["## Citations: each citing sentence against the paper it cites",
             "Every figure beside RefVerifier's published one for the same measurement; n/a where it published none "
             "or measured something else (the note says which)."]
    columns = ("metric", "value", "n", "RefVerifier", "note")
    for stage in [*STAGES, *sorted(set(by_stage) - set(STAGES))]:
        stage_rows = by_stage.get(stage)
        if not stage_rows:
            continue
        shown = [row for row in stage_rows if _base_metric(row["metric"]) != ONE_LABEL]
        cells = [{"metric": row["metric"], "value": format_value(row["metric"], row["value"]), "n": row["n"],
                  "RefVerifier": "n/a" if row["refverifier"] is None else format_value(row["metric"],
                                                                                        row["refverifier"]),
                  "note": row["note"] or ""} for row in shown]
        warnings = [f"**Warning:** {row['note']}" for row in stage_rows if _base_metric(row["metric"]) == ONE_LABEL]
        parts.append("\n\n".join([f"### {_STAGE_TITLES.get(stage, stage)}", markdown_table(cells, columns),
                                  *warnings]))
    return "\n\n".join(parts) + "\n"
