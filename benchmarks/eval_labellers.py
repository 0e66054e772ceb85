"""Both labeller roles (`labeller_a`, `labeller_b`) on the published release, through the gateway, scored against its
labels, with the two labellers' agreement.

Tasks (rows drawn with a seed, the same rows for both labellers):
- `B6 thread`: claim + the author response paired with its review (the paper's longest direct reply) -> prompt
  `label_rebuttal`; gold: the human-verified RebuttalSourced `label`.
- `B4 thread`: claim + the rebuttal quotes the release's labeller cited (`b2_evidence`) -> `label_rebuttal`; gold
  `b2_label`. `B4 manuscript`: claim + the manuscript quotes it cited (`b3_evidence`, as numbered passages) ->
  `label_manuscript`; gold `b3_label`. The release ships no manuscript text and no author response for B4, so
  the labellers see only quoted evidence there: an easier setting than a venue build, where they see whole
  replies and manuscripts.
Per task and labeller: accuracy and macro-F1 over the four classes (an unusable answer counts as wrong), Cohen's
kappa against gold over the parsed answers, parse failures, the confusion matrix (gold rows, predicted columns,
`unparsed` last); and labeller A vs B: raw agreement, kappa and the 4x4 table over rows both parsed. Models: the
active profile's (`offline` by default; `--profile paper` for the paper's models, which need their API keys; another
model for one role: PEERIFY_ROLE_LABELLER_A=<model name>). A majority-class row gives each task's floor.

    .venv/bin/python benchmarks/eval_labellers.py [--release PATH] [--limit 10] [--seed 0] [--profile offline]
                                                  [--tasks "B6 thread" "B4 thread" "B4 manuscript"] [--dump FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

from peerify_dagster.domain import label_metrics  # noqa: E402
from peerify_dagster.domain import labelling as lab  # noqa: E402
from peerify_dagster.domain.labels import LABELS  # noqa: E402
from peerify_dagster.domain.prompts import format_passages  # noqa: E402
from peerify_dagster.domain.release import load_release  # noqa: E402
from peerify_dagster.resources.llm_gateway import LLMGateway  # noqa: E402

DEFAULT_RELEASE = REPO_ROOT.parent / "shared" / "peerify-release"
TASK_NAMES = ("B6 thread", "B4 thread", "B4 manuscript")


@dataclass(frozen=True)
class Task:
    name: str
    prompt_id: str
    items: list[dict[str, str]]  # prompt variables per row
    gold: list[str]
    row_ids: list[str]
    skipped: int  # rows without the evidence the task needs


def _quotes(quotes: Sequence[str]) -> str:
    return "\n".join(f'"{quote.strip()}"' for quote in quotes if quote.strip())


def release_tasks(release: dict[str, list[dict[str, Any]]], names: Sequence[str] = TASK_NAMES,
                  limit: int | None = None, seed: int = 0) -> list[Task]:
    """The evaluation tasks built from the release's rows (a seeded draw of `limit` rows per file)."""
    def drawn(kind: str) -> list[dict[str, Any]]:
        rows = release[kind]
        return rows if limit is None or limit >= len(rows) else random.Random(seed).sample(rows, limit)

    tasks = []
    for name in names:
        kind, source = name.split()
        rows = drawn(kind)
        if name == "B6 thread":
            usable = [r for r in rows if (r.get("author_response") or "").strip()]
            items = [{"claim": r["claim"], "author_response": r["author_response"].strip()} for r in usable]
            gold = [r["label"] for r in usable]
        elif name == "B4 thread":
            usable = [r for r in rows if _quotes(r["b2_evidence"])]
            items = [{"claim": r["claim"], "author_response": _quotes(r["b2_evidence"])} for r in usable]
            gold = [r["b2_label"] for r in usable]
        elif name == "B4 manuscript":
            usable = [r for r in rows if _quotes(r["b3_evidence"])]
            items = [{"claim": r["claim"], "evidence": format_passages(
                [(f"q{i}", quote) for i, quote in enumerate(r["b3_evidence"], 1) if quote.strip()])} for r in usable]
            gold = [r["b3_label"] for r in usable]
        else:
            raise ValueError(f"unknown task {name!r}; known: {list(TASK_NAMES)}")
        prompt = lab.THREAD_PROMPT if source == "thread" else lab.MANUSCRIPT_PROMPT
        tasks.append(Task(name, prompt, items, gold, [r["row_id"] for r in usable], len(rows) - len(usable)))
    return tasks


def score_labeller(gold: Sequence[str], predicted: Sequence[str | None]) -> dict[str, Any]:
    """Accuracy and macro-F1 (unparsed = wrong), kappa against gold over parsed answers, the confusion matrix."""
    parsed = [(g, p) for g, p in zip(gold, predicted, strict=True) if p is not None]
    return {"n": len(gold), "accuracy": label_metrics.accuracy(gold, predicted),
            "macro_f1": label_metrics.macro_f1(gold, predicted),
            "kappa": label_metrics.cohen_kappa([g for g, _ in parsed], [p for _, p in parsed]),
            "parse_failures": len(gold) - len(parsed), "confusion": label_metrics.confusion_matrix(gold, predicted)}


def score_pair(predicted_a: Sequence[str | None], predicted_b: Sequence[str | None]) -> lab.Agreement:
    """Labeller A vs B over the rows both parsed."""
    return lab.agreement([(a, b) for a, b in zip(predicted_a, predicted_b, strict=True) if a and b])


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def confusion_markdown(confusion: dict[str, dict[str, int]]) -> str:
    columns = [*LABELS, label_metrics.UNPARSED]
    lines = ["| gold \\ predicted | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {gold} | " + " | ".join(str(row[c]) for c in columns) + " |" for gold, row in confusion.items()]
    return "\n".join(lines)


def run_task(gateway: LLMGateway, task: Task, dump: Path | None) -> str:
    """Both labellers on one task; returns the task's Markdown report."""
    predictions, lines, matrices = {}, [], []
    for labeller, role in lab.LABELLER_ROLES.items():
        started = time.perf_counter()
        results = gateway.map(role, task.prompt_id, task.items, role=role,
                              progress=lambda done, total, r: print(f"  {task.name} {r.model}: {done}/{total}",
                                                                    end="\r", file=sys.stderr, flush=True))
        seconds = (time.perf_counter() - started) / max(1, len(task.items))
        predicted = [result.label if result.ok and result.parse_ok else None for result in results]
        predictions[labeller] = predicted
        score = score_labeller(task.gold, predicted)
        model = results[0].model if results else gateway.registry.resolve(role)[1].name
        lines.append(f"| {role} | {model} | {score['n']} | {_number(score['accuracy'])} | "
                     f"{_number(score['macro_f1'])} | {_number(score['kappa'])} | {score['parse_failures']} | "
                     f"{seconds:.1f} |")
        matrices.append(f"{role} ({model}):\n\n{confusion_markdown(score['confusion'])}")
        if dump is not None:
            with dump.open("a", encoding="utf-8") as handle:
                for row_id, gold, result in zip(task.row_ids, task.gold, results, strict=True):
                    handle.write(json.dumps({"task": task.name, "role": role, "model": result.model, "row_id": row_id,
                                             "gold": gold, "predicted": result.label if result.parse_ok else None,
                                             "raw_response": result.raw_response, "error": result.error}) + "\n")
    majority = Counter(task.gold).most_common(1)[0][0] if task.gold else None
    floor = score_labeller(task.gold, [majority] * len(task.gold))
    lines.append(f"| majority class | {majority} | {floor['n']} | {_number(floor['accuracy'])} | "
                 f"{_number(floor['macro_f1'])} | {_number(floor['kappa'])} | 0 | 0.0 |")
    pair = score_pair(predictions["a"], predictions["b"])
    kappa = _number(pair.kappa) if pair.kappa is not None else f"n/a ({pair.kappa_status})"
    header = (f"### {task.name} (prompt `{task.prompt_id}`; {len(task.items)} rows, {task.skipped} drawn rows "
              "without evidence left out)\n\n| role | model | n | accuracy | macro-F1 | kappa vs gold | parse failures "
              "| s/row |\n|---|---|---|---|---|---|---|---|")
    agreement = (f"Labeller A vs B over {pair.n_pairs} rows both parsed: agreement {_number(pair.raw_agreement)}, "
                 f"kappa {kappa}.\n\n{lab.markdown_table(pair.table)}")
    return "\n\n".join([header + "\n" + "\n".join(lines), agreement, *matrices])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", type=Path, default=DEFAULT_RELEASE)
    parser.add_argument("--limit", type=int, default=10, help="rows drawn per release file (all when larger)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", help="models.yaml profile (default: PEERIFY_LLM_PROFILE, else offline)")
    parser.add_argument("--tasks", nargs="+", default=list(TASK_NAMES), choices=TASK_NAMES)
    parser.add_argument("--dump", type=Path, help="append per-row answers to this JSONL file")
    args = parser.parse_args(argv)
    tasks = release_tasks(load_release(args.release), args.tasks, args.limit, args.seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as lake, LLMGateway(lake, profile=args.profile) as gateway:
        gateway.preflight(list(lab.LABELLER_ROLES.values()))
        reports = [run_task(gateway, task, args.dump) for task in tasks]
    print("\n\n".join(reports))
    print(f"\n{sum(2 * len(t.items) for t in tasks)} calls in {time.perf_counter() - started:.0f} s "
          f"(limit {args.limit}, seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
