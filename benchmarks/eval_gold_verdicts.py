"""The citation verdict stage on RefVerifier's published end-to-end gold: each citing sentence judged against the
annotator's evidence sentences of the cited paper, scored against the annotator's verdict (issue 34).

    .venv/bin/python benchmarks/eval_gold_verdicts.py [--rows FILE] [--limit N] [--seed 0] [--profile NAME]
        [--max-cost-usd USD] [--lake FOLDER]

Rows: RefVerifier's end-to-end annotation file (`ground_truth/annotation/gold_rows_human.csv` of its public
repository stefaniamocan/refverifier-atiqser26; `gold_rows.csv`, the same rows with the tool's columns added, reads
the same): CSV with a header, one row per citance and cited reference. Read here: `citance_text`, `verdict`
(Supported, Partially Supported, Not Supported or NEI) and `evidence_sentences` (the annotator's sentences of the
cited paper, joined by " ||| "); a `kept` column, when present, marks the rows the annotator kept. Rows not kept, or
without a verdict, are not gold; rows whose annotator marked no evidence sentence are left out too (the stage is
never asked without a passage); both are counted. Default `--rows`: `../shared/citations/refverifier-annotation/
gold_rows_human.csv` when present. A file the script cannot read as such (a missing column, a verdict outside the
four, a kept row without its citance, a row with more or fewer fields than the header) is refused with one line
naming the file and the line, exit code 2, before any call.

Each row is one call of the project's `verify_citation` prompt, as the `citation_verdicts` asset makes it (windows
mode): the variables of domain/citations/verdicts.py's `verdict_variables` (the citing sentence; claim type, hedge and
cited title unknown, as for a venue without the citance tagger; the evidence sentences as passages e1, e2, ...),
through the LLM gateway to each model of the `citation_verifiers` role of the active profile (`offline` by default:
SmolLM2-135M on this machine, which tests the plumbing, not the citations), each call recorded in the ledger of
`--lake` (default: a temporary folder) and counted against `--max-cost-usd`; the answer is read by `call_verdict`.
A row drawn `--limit` at a time with `--seed`.

Per verifier, over the rows drawn: accuracy and macro-F1 over the four verdicts (label_metrics; an answer without a
verdict counts as wrong) and the lenient score, RefVerifier's lenient mapping (results/SCORING.md of its package:
Partially Supported counted as Supported) applied to the gold and the answers alike, then accuracy; beside them the
majority-class baseline (always the gold's most frequent verdict; for the lenient score, the most frequent after the
mapping), a plain sentence when a verifier answers one verdict to nearly everything, and the confusion matrix. The
last line sums it up.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

from peerify_dagster.domain import label_metrics  # noqa: E402
from peerify_dagster.domain.citations import verdicts  # noqa: E402
from peerify_dagster.domain.citations.metrics import one_label_sentence  # noqa: E402
from peerify_dagster.domain.citations.vocabulary import (  # noqa: E402
    CITATION_LABELS,
    PARTIALLY_SUPPORTED,
    SUPPORTED,
)
from peerify_dagster.domain.labels import LABELS  # noqa: E402
from peerify_dagster.resources.llm_gateway import LLMGateway  # noqa: E402
from peerify_dagster.resources.llm_gateway.errors import BudgetExceeded, ConfigurationError  # noqa: E402

DEFAULT_ROWS = REPO_ROOT.parent / "shared" / "citations" / "refverifier-annotation" / "gold_rows_human.csv"
REQUIRED_COLUMNS = ("citance_text", "verdict", "evidence_sentences")
EVIDENCE_SEPARATOR = "|||"
# RefVerifier's gold spells the fourth verdict "NEI"; label_metrics scores Peerify's four labels, mapped in order.
_GOLD_SPELLINGS = {**{label.lower(): label for label in CITATION_LABELS}, "nei": CITATION_LABELS[3]}
_TO_PEERIFY = dict(zip(CITATION_LABELS, LABELS))
_FROM_PEERIFY = dict(zip(LABELS, CITATION_LABELS))
MODE = "gold evidence"  # the scope one_label_sentence names: the verifier was shown the annotator's evidence


class RowsFileError(ValueError):
    """The rows file cannot be read as RefVerifier's end-to-end gold; the message names the file and the line."""


@dataclass(frozen=True)
class GoldRow:
    line: int  # the file line the row starts on
    citance: str
    evidence: tuple[str, ...]
    verdict: str  # one of CITATION_LABELS


@dataclass(frozen=True)
class GoldRows:
    rows: list[GoldRow]
    not_gold: int  # rows not kept by the annotator, or without a verdict
    without_evidence: int  # gold rows whose annotator marked no evidence sentence


def read_gold_rows(path: Path) -> GoldRows:
    """Every row of the file, checked whole before any is used (RowsFileError on the first problem)."""
    rows, not_gold, without_evidence, line = [], 0, 0, 1
    if not path.is_file():
        raise RowsFileError(f"{path}: no such file (RefVerifier's end-to-end gold CSV: pass --rows)")
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle, strict=True)
            header = next(reader, None)
            if header is None:
                raise RowsFileError(f"{path}: empty file, expected a CSV header with {list(REQUIRED_COLUMNS)}")
            missing = [column for column in REQUIRED_COLUMNS if column not in header]
            if missing:
                raise RowsFileError(f"{path}:1: no column {missing} in the header (RefVerifier's end-to-end gold "
                                    f"has {list(REQUIRED_COLUMNS)})")
            line = reader.line_num + 1
            for fields in reader:
                row = _gold_row(path, line, header, fields)
                if row is None:
                    not_gold += 1
                elif not row.evidence:
                    without_evidence += 1
                else:
                    rows.append(row)
                line = reader.line_num + 1
    except csv.Error as error:
        raise RowsFileError(f"{path}:{line}: not CSV ({error})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RowsFileError(f"{path}: cannot be read ({error})") from None
    return GoldRows(rows, not_gold, without_evidence)


def _gold_row(path: Path, line: int, header: Sequence[str], fields: Sequence[str]) -> GoldRow | None:
    """The gold of one row, None when the row is not gold (not kept, or no verdict)."""
    if len(fields) != len(header):
        raise RowsFileError(f"{path}:{line}: {len(fields)} fields, the header has {len(header)}")
    row = dict(zip(header, fields))
    raw = row["verdict"].strip()
    if row.get("kept", "True").strip().lower() == "false" or not raw:
        return None
    verdict = _GOLD_SPELLINGS.get(" ".join(raw.lower().split()))
    if verdict is None:
        raise RowsFileError(f"{path}:{line}: verdict {raw!r} is not one of {[*CITATION_LABELS, 'NEI']}")
    citance = row["citance_text"].strip()
    if not citance:
        raise RowsFileError(f"{path}:{line}: a row with a verdict but no citance_text")
    evidence = tuple(part.strip() for part in row["evidence_sentences"].split(EVIDENCE_SEPARATOR) if part.strip())
    return GoldRow(line, citance, evidence, verdict)


def drawn(rows: Sequence[GoldRow], limit: int | None, seed: int) -> list[GoldRow]:
    """`limit` rows drawn with `seed` (all when there are no more), in file order."""
    if limit is None or limit >= len(rows):
        return list(rows)
    return sorted(random.Random(seed).sample(list(rows), limit), key=lambda row: row.line)


def verdict_items(rows: Sequence[GoldRow]) -> list[dict[str, str]]:
    """The `verify_citation` variables of each row, as the citation_verdicts asset builds them."""
    return [verdicts.verdict_variables(row.citance, None, None, None,
                                       [(f"e{number}", text) for number, text in enumerate(row.evidence, start=1)])
            for row in rows]


def lenient(label: str | None) -> str | None:
    """RefVerifier's lenient mapping: Partially Supported counts as Supported."""
    return SUPPORTED if label == PARTIALLY_SUPPORTED else label


@dataclass(frozen=True)
class Scores:
    accuracy: float | None
    macro_f1: float | None
    lenient: float | None  # accuracy after the lenient mapping of gold and answers


def scores(gold: Sequence[str], answers: Sequence[str | None]) -> Scores:
    """Answers (citation verdicts, None for none) against the gold; a missing answer is wrong."""
    golds = [_TO_PEERIFY[label] for label in gold]
    given = [_TO_PEERIFY.get(answer) for answer in answers]
    return Scores(label_metrics.accuracy(golds, given), label_metrics.macro_f1(golds, given),
                  label_metrics.accuracy([_TO_PEERIFY[lenient(label)] for label in gold],
                                         [_TO_PEERIFY.get(lenient(answer)) for answer in answers]))


def majority_scores(gold: Sequence[str]) -> tuple[str, str, Scores]:
    """The majority-class baseline: its verdict, its verdict after the lenient mapping, and its scores."""
    strict = label_metrics.majority_baseline([_TO_PEERIFY[label] for label in gold])
    relaxed = label_metrics.majority_baseline([_TO_PEERIFY[lenient(label)] for label in gold])
    return (_FROM_PEERIFY[strict.label], _FROM_PEERIFY[relaxed.label],
            Scores(strict.accuracy, strict.macro_f1, relaxed.accuracy))


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def confusion_markdown(gold: Sequence[str], answers: Sequence[str | None]) -> str:
    """Gold verdicts in rows, answers in columns, `unparsed` (no verdict) last."""
    matrix = label_metrics.confusion_matrix([_TO_PEERIFY[label] for label in gold],
                                            [_TO_PEERIFY.get(answer) for answer in answers])
    columns = [*LABELS, label_metrics.UNPARSED]
    lines = ["| gold \\ answered | " + " | ".join([*CITATION_LABELS, "no verdict"]) + " |",
             "|---|" + "---|" * len(columns)]
    lines += [f"| {_FROM_PEERIFY[label]} | " + " | ".join(str(matrix[label][column]) for column in columns) + " |"
              for label in LABELS]
    return "\n".join(lines)


def report(verifier: str, model: str, gold: Sequence[str], results: Sequence[verdicts.Verdict]) -> tuple[str, Scores]:
    """One verifier's Markdown section and its scores."""
    answers = [verdict.label for verdict in results]
    score = scores(gold, answers)
    always, always_lenient, floor = majority_scores(gold)
    statuses = Counter(verdict.status for verdict in results)
    lines = ["| | n | accuracy | macro-F1 | lenient |", "|---|---|---|---|---|",
             f"| {verifier} ({model}) | {len(gold)} | {_number(score.accuracy)} | {_number(score.macro_f1)} | "
             f"{_number(score.lenient)} |",
             f"| majority class (always {always}; lenient: always {always_lenient}) | {len(gold)} | "
             f"{_number(floor.accuracy)} | {_number(floor.macro_f1)} | {_number(floor.lenient)} |"]
    parts = [f"### {verifier}", "\n".join(lines),
             "Answers: " + (", ".join(f"{status} {count}" for status, count in sorted(statuses.items())))]
    answered = Counter(verdict.label for verdict in results if verdict.status == verdicts.STATUS_OK)
    if sentence := one_label_sentence(verifier, MODE, answered):
        parts.append(sentence)
    parts.append(confusion_markdown(gold, answers))
    return "\n\n".join(parts), score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=DEFAULT_ROWS, help="RefVerifier's end-to-end gold CSV")
    parser.add_argument("--limit", type=int, help="gold rows drawn (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", help="models.yaml profile (default: PEERIFY_LLM_PROFILE, else offline)")
    parser.add_argument("--max-cost-usd", type=float, help="stop the calls once they have cost this much")
    parser.add_argument("--lake", type=Path, help="keep the call ledger in this lake (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    try:
        gold_rows = read_gold_rows(args.rows)
    except RowsFileError as error:
        print(error, file=sys.stderr)
        return 2
    rows = drawn(gold_rows.rows, args.limit, args.seed)
    if not rows:
        print(f"{args.rows}: no gold row with a verdict and evidence to judge", file=sys.stderr)
        return 2
    print(f"{args.rows}: {len(gold_rows.rows)} gold rows with evidence ({gold_rows.not_gold} rows not kept or "
          f"without a verdict, {gold_rows.without_evidence} without an evidence sentence left out); {len(rows)} "
          f"drawn (limit {args.limit or 'none'}, seed {args.seed})\n")
    gold = [row.verdict for row in rows]
    items = verdict_items(rows)
    role = verdicts.CITATION_VERIFIERS_ROLE
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        try:
            with LLMGateway(args.lake or scratch, profile=args.profile, max_cost_usd=args.max_cost_usd) as gateway:
                verifiers = gateway.preflight([role])[role]
                sections, summary = [], []
                for verifier in verifiers:
                    results = gateway.map(verifier, verdicts.VERIFY_CITATION_PROMPT, items, role=role)
                    judged = [verdicts.call_verdict(result.error, result.raw_response) for result in results]
                    section, score = report(verifier, gateway.registry.model(verifier).model, gold, judged)
                    sections.append(section)
                    summary.append(f"{verifier}: accuracy={_number(score.accuracy)} "
                                   f"macro_f1={_number(score.macro_f1)} lenient={_number(score.lenient)}")
                usage = gateway.usage()["by_model"].values()
        except ConfigurationError as error:  # the preflight's too: a missing key, model file or package
            print(f"{role}: {error}", file=sys.stderr)
            return 2
        except BudgetExceeded as error:
            print(f"stopped, no figures: {error}", file=sys.stderr)
            return 1
    print("\n\n".join(sections))
    _, _, floor = majority_scores(gold)
    print(f"\n{sum(u['calls'] for u in usage)} calls ({sum(u['cache_hits'] for u in usage)} answered by the ledger), "
          f"{sum(u['tokens_in'] for u in usage)} tokens in, {sum(u['tokens_out'] for u in usage)} out, "
          f"${sum(u['cost_usd'] for u in usage):.4f}, {time.perf_counter() - started:.0f} s")
    print(f"summary: rows={len(rows)} " + " ".join(summary) + f" baseline: accuracy={_number(floor.accuracy)} "
          f"macro_f1={_number(floor.macro_f1)} lenient={_number(floor.lenient)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
