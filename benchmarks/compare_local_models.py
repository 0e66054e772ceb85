"""Rebuttal-sourced labelling on the release's B6 rows with local models, through the gateway.

Input per row: `claim` + `author_response` -> the `label_rebuttal` prompt; gold: the
human-verified B6 `label` (the importer maps `Contradicted` to `Not Supported`). Reports
accuracy, macro-F1 over the four labels (an unparseable answer counts as wrong and predicts
no class), parse failures, and seconds per claim from a cold ledger. A majority-class row
gives the floor. The rows are for checking the harness, not for tuning prompts.

    .venv/bin/python benchmarks/compare_local_models.py [--limit 40] [--models smollm2-135m ...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from peerify_dagster.domain.labels import LABELS  # noqa: E402
from peerify_dagster.domain.release import load_release  # noqa: E402
from peerify_dagster.resources.llm_gateway import CallResult, LLMGateway  # noqa: E402

DEFAULT_RELEASE = REPO_ROOT.parent / "shared" / "peerify-release"


def accuracy(gold: Sequence[str], predicted: Sequence[str | None]) -> float:
    return sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold)


def macro_f1(gold: Sequence[str], predicted: Sequence[str | None], labels: Sequence[str] = LABELS) -> float:
    """Unweighted mean of per-label F1 over the fixed label set (absent labels score 0)."""
    scores = []
    for label in labels:
        true_positive = sum(g == label and p == label for g, p in zip(gold, predicted, strict=True))
        predicted_count = sum(p == label for p in predicted)
        gold_count = sum(g == label for g in gold)
        denominator = predicted_count + gold_count
        scores.append(2 * true_positive / denominator if denominator else 0.0)
    return sum(scores) / len(scores)


def sample_rows(rows: list[dict], limit: int | None, seed: int) -> list[dict]:
    """A seeded sample, so every paper of B6 can appear rather than only the first few."""
    if limit is None or limit >= len(rows):
        return rows
    return random.Random(seed).sample(rows, limit)


def show_progress(done: int, total: int, result: CallResult) -> None:
    print(f"  {result.model}: {done}/{total}", end="\r", file=sys.stderr, flush=True)


def evaluate_model(model: str, rows: list[dict], dump: Path | None) -> dict[str, object]:
    items = [{"claim": row["claim"], "author_response": row["author_response"]} for row in rows]
    with tempfile.TemporaryDirectory() as lake, LLMGateway(lake) as gateway:
        started = time.perf_counter()
        results = gateway.map(model, "label_rebuttal", items, role="labeller_a", progress=show_progress)
        elapsed = time.perf_counter() - started
        usage = gateway.usage()["by_model"][model]
    gold = [row["label"] for row in rows]
    predicted = [result.label for result in results]
    if dump is not None:
        with dump.open("a", encoding="utf-8") as handle:
            for row, result in zip(rows, results, strict=True):
                handle.write(json.dumps({"model": model, "row_id": row["row_id"], "gold": row["label"],
                                         "predicted": result.label, "raw_response": result.raw_response,
                                         "error": result.error}) + "\n")
    return {
        "model": model,
        "n": len(rows),
        "accuracy": accuracy(gold, predicted),
        "macro_f1": macro_f1(gold, predicted),
        "parse_failures": usage["parse_failures"],
        "errors": usage["errors"],
        "s_per_claim": elapsed / len(rows),
        "tokens_in_per_claim": usage["tokens_in"] / len(rows),
        "predicted": dict(Counter(label or "(unparsed)" for label in predicted)),
    }


def majority_baseline(rows: list[dict]) -> dict[str, object]:
    gold = [row["label"] for row in rows]
    majority = Counter(gold).most_common(1)[0][0]
    predicted = [majority] * len(gold)
    return {"model": f"majority ({majority})", "n": len(rows), "accuracy": accuracy(gold, predicted),
            "macro_f1": macro_f1(gold, predicted), "parse_failures": 0, "errors": 0, "s_per_claim": 0.0,
            "tokens_in_per_claim": 0.0, "predicted": {majority: len(gold)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", type=Path, default=DEFAULT_RELEASE)
    parser.add_argument("--limit", type=int, default=40, help="rows to sample (all when larger than B6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", nargs="+", default=["smollm2-135m"], help="model names from models.yaml")
    parser.add_argument("--dump", type=Path, help="append per-row predictions to this JSONL file")
    args = parser.parse_args()

    release = load_release(args.release)
    rows = sample_rows(release["B6"], args.limit, args.seed)
    print(f"B6 rows: {len(rows)} of {len(release['B6'])} (seed {args.seed}); "
          f"gold: {dict(Counter(row['label'] for row in rows))}")
    reports = [majority_baseline(rows)] + [evaluate_model(model, rows, args.dump) for model in args.models]
    print("| model | n | accuracy | macro-F1 | parse failures | errors | s/claim | prompt tokens/claim | predicted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for report in reports:
        print(f"| {report['model']} | {report['n']} | {report['accuracy']:.3f} | {report['macro_f1']:.3f} | "
              f"{report['parse_failures']} | {report['errors']} | {report['s_per_claim']:.2f} | "
              f"{report['tokens_in_per_claim']:.0f} | {report['predicted']} |")


if __name__ == "__main__":
    main()
