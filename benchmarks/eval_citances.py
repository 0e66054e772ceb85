"""Measure citance detection (the project's own rule-based detector, no model) against gold citing sentences.

    .venv/bin/python benchmarks/eval_citances.py --citeworth FILE [--s2orc JSON --pdf PDF] [--show N]

`--citeworth FILE`: a file in the CiteWorth gold format RefVerifier published (one JSON object a line:
`paragraph_index`, `sent_idx`, `text`, `is_citance`, `field_of_study`). Each paragraph is rebuilt from its
sentences in `sent_idx` order joined by one space, citances are detected in the paragraph, and the detections are
scored per gold sentence by RefVerifier's rule (a detected span counts for a gold citing sentence when it covers at
least half of its tokens; several spans inside one sentence count once; precision over detected spans, recall
over gold citing sentences). Prints P/R/F1 overall and per field of study.

`--s2orc JSON --pdf PDF`: the PDF parsed with the project's manuscript parser, citances detected in its body
paragraphs, against the sentences of the S2ORC parse's `body_text` (split with the same splitter) that hold one of
GROBID's `cite_spans`; a detected sentence covers the gold sentence's tokens it shares in order with it.

The last line, for the CiteWorth run, is `precision=P recall=R f1=F sentences=N`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

from peerify_dagster.domain.citations.detection import detect_citances  # noqa: E402
from peerify_dagster.domain.citations.scoring import (  # noqa: E402
    DetectionCounts,
    DetectionOutcome,
    join_sentences,
    score_spans,
    score_texts,
)
from peerify_dagster.domain.citations.sentences import split_sentences  # noqa: E402

_GOLD_FIELDS = {"paragraph_index", "sent_idx", "text", "is_citance"}
REFVERIFIER = "RefVerifier (300 CiteWorth paragraphs): regex P 0.980 R 1.000 F1 0.990; hybrid 0.986 / 0.991 / 0.989"


def read_citeworth(path: Path) -> dict[object, list[dict]]:
    """Paragraphs of the gold file: paragraph_index -> its rows in sent_idx order."""
    paragraphs: dict[object, list[dict]] = defaultdict(list)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SystemExit(f"{path}:{number}: not JSON ({error})") from error
        missing = sorted(_GOLD_FIELDS - set(row)) if isinstance(row, dict) else sorted(_GOLD_FIELDS)
        if missing:
            raise SystemExit(f"{path}:{number}: not a CiteWorth gold row, missing {', '.join(missing)}")
        paragraphs[row["paragraph_index"]].append(row)
    return {key: sorted(rows, key=lambda row: row["sent_idx"]) for key, rows in paragraphs.items()}


def citeworth_paragraph(rows: list[dict]) -> tuple[DetectionOutcome, str, list[tuple[int, int]]]:
    gold = [(row["text"], bool(row["is_citance"])) for row in rows]
    text, _ = join_sentences([sentence for sentence, _ in gold])
    spans = [(citance.start, citance.end) for citance in detect_citances(text)]
    return score_spans(gold, spans), text, spans


def _figures(counts: DetectionCounts) -> str:
    return f"{counts.precision:.3f} | {counts.recall:.3f} | {counts.f1:.3f}"


def evaluate_citeworth(path: Path, show: int) -> DetectionCounts:
    paragraphs = read_citeworth(path)
    started = time.perf_counter()
    total, by_field, shown = DetectionCounts(), defaultdict(DetectionCounts), 0
    for rows in paragraphs.values():
        outcome, text, spans = citeworth_paragraph(rows)
        total += outcome.counts
        by_field[rows[0].get("field_of_study") or "(none)"] += outcome.counts
        if shown < show and (outcome.missed or outcome.spurious):
            shown += 1
            print(f"--- paragraph {rows[0]['paragraph_index']} ({rows[0].get('field_of_study')})")
            for g in outcome.missed:
                print(f"  missed: {rows[g]['text']}")
            for d in outcome.spurious:
                print(f"  spurious: {text[spans[d][0]:spans[d][1]]}")
    seconds = time.perf_counter() - started
    print(f"\nCiteWorth gold {path.name}: {len(paragraphs)} paragraphs, {total.sentences} sentences, "
          f"{total.citing} citing; detection and scoring {seconds:.2f} s")
    print("| field of study | sentences | citing | precision | recall | F1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for field_name, counts in sorted(by_field.items()):
        print(f"| {field_name} | {counts.sentences} | {counts.citing} | {_figures(counts)} |")
    print(f"| **all** | {total.sentences} | {total.citing} | {_figures(total)} |")
    print(REFVERIFIER)
    return total


def s2orc_gold(path: Path, linked_only: bool) -> list[tuple[str, bool]]:
    """Every body sentence of the S2ORC parse, citing when one of GROBID's cite spans starts inside it; with
    `linked_only`, only spans GROBID linked to a bibliography entry (`ref_id` set): its unlinked spans mix lost
    citations with footnote numbers and dataset names ("CoNLL-2003")."""
    data = json.loads(path.read_text(encoding="utf-8"))
    body = data.get("pdf_parse", data)["body_text"]
    gold = []
    for paragraph in body:
        text = paragraph["text"]
        cite_starts = [span["start"] for span in paragraph.get("cite_spans", [])
                       if span.get("ref_id") or not linked_only]
        for start, end in split_sentences(text):
            gold.append((text[start:end], any(start <= cite < end for cite in cite_starts)))
    return gold


def evaluate_s2orc(s2orc: Path, pdf: Path, show: int) -> dict[str, DetectionCounts]:
    from peerify_dagster.resources.document_parser import DocumentParser  # Docling: imported only when asked

    started = time.perf_counter()
    document = DocumentParser().parse(pdf)
    parsed = time.perf_counter() - started
    detected = [block.text[citance.start:citance.end] for block in document.blocks if block.kind == "paragraph"
                for citance in detect_citances(block.text)]
    print(f"\nS2ORC {s2orc.name} against {pdf.name} (parsed in {parsed:.1f} s): {len(detected)} citances detected "
          "in the PDF's body paragraphs")
    print("| gold cite spans | gold sentences | citing | precision | recall | F1 |")
    print("|---|---:|---:|---:|---:|---:|")
    results = {}
    for name, linked_only in (("linked to an entry", True), ("all", False)):
        gold = s2orc_gold(s2orc, linked_only)
        outcome = score_texts(gold, detected)
        results[name] = outcome.counts
        print(f"| {name} | {outcome.counts.sentences} | {outcome.counts.citing} | {_figures(outcome.counts)} |")
        for g in outcome.missed[:show]:
            print(f"  missed ({name}): {gold[g][0]}")
        for d in outcome.spurious[:show]:
            print(f"  spurious ({name}): {detected[d]}")
    return results


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--citeworth", type=Path, help="a file in the CiteWorth gold format")
    arguments.add_argument("--s2orc", type=Path, help="an S2ORC JSON parse (GROBID) of the PDF given with --pdf")
    arguments.add_argument("--pdf", type=Path, help="the PDF the S2ORC parse was made from")
    arguments.add_argument("--show", type=int, default=0, help="examples of disagreement to print")
    options = arguments.parse_args(argv)
    if (options.s2orc is None) != (options.pdf is None):
        arguments.error("--s2orc and --pdf go together")
    if options.citeworth is None and options.s2orc is None:
        arguments.error("give --citeworth FILE and/or --s2orc JSON --pdf PDF")
    for path in (options.citeworth, options.s2orc, options.pdf):
        if path is not None and not path.is_file():
            arguments.error(f"{path}: no such file")
    if options.s2orc is not None:
        evaluate_s2orc(options.s2orc, options.pdf, options.show)
    if options.citeworth is not None:
        total = evaluate_citeworth(options.citeworth, options.show)
        print(f"precision={total.precision:.3f} recall={total.recall:.3f} f1={total.f1:.3f} "
              f"sentences={total.sentences}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
