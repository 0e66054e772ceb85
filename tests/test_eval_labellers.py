"""The scoring of benchmarks/eval_labellers.py on hand-made predictions, and its tasks built from the shared release
(skipped when ../shared/peerify-release is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from peerify_dagster.domain.labels import LABELS, NOT_DETERMINED, NOT_SUPPORTED, SUPPORTED
from peerify_dagster.domain.release import load_release
from tests.benchmark_scripts import load_benchmark

SHARED_RELEASE = Path(__file__).resolve().parents[2] / "shared" / "peerify-release"


def test_scores_count_unparsed_answers_as_wrong_and_leave_them_out_of_kappa():
    script = load_benchmark("eval_labellers")
    gold = [SUPPORTED, SUPPORTED, NOT_SUPPORTED, NOT_DETERMINED]
    score = script.score_labeller(gold, [SUPPORTED, None, NOT_SUPPORTED, SUPPORTED])
    assert score["accuracy"] == pytest.approx(0.5) and score["parse_failures"] == 1
    # F1: Supported 2*1/(2+2)=0.5, Not Supported 1.0, the other two 0 -> 0.375
    assert score["macro_f1"] == pytest.approx(0.375)
    # kappa over the 3 parsed: gold S,N,D vs S,N,S: p_o 2/3, p_e (1*2 + 1*1 + 0)/9 = 1/3 -> 0.5
    assert score["kappa"] == pytest.approx(0.5)
    assert score["confusion"][SUPPORTED]["unparsed"] == 1 and score["confusion"][NOT_DETERMINED][SUPPORTED] == 1
    pair = script.score_pair([SUPPORTED, None, NOT_SUPPORTED], [SUPPORTED, SUPPORTED, SUPPORTED])
    assert (pair.n_pairs, pair.agreed) == (2, 1)
    assert "| Not Determined | 1 | 0 | 0 | 0 | 0 |" in script.confusion_markdown(score["confusion"])


def test_release_tasks_feed_each_prompt_its_evidence_and_gold():
    if not SHARED_RELEASE.is_dir():
        pytest.skip(f"shared Peerify release not present at {SHARED_RELEASE}")
    script = load_benchmark("eval_labellers")
    release = load_release(SHARED_RELEASE)
    tasks = {task.name: task for task in script.release_tasks(release, limit=12, seed=3)}
    assert set(tasks) == {"B6 thread", "B4 thread", "B4 manuscript"}
    for task in tasks.values():
        assert len(task.items) + task.skipped == 12 and len(task.gold) == len(task.items) > 0
        assert set(task.gold) <= set(LABELS)
    b6 = {row["row_id"]: row for row in release["B6"]}
    for row_id, item in zip(tasks["B6 thread"].row_ids, tasks["B6 thread"].items):
        assert item == {"claim": b6[row_id]["claim"], "author_response": b6[row_id]["author_response"].strip()}
    assert tasks["B4 manuscript"].prompt_id == "label_manuscript"
    assert all(item["evidence"].startswith("[q1] ") for item in tasks["B4 manuscript"].items)
    # the same seed draws the same rows; perfect predictions score 1
    again = script.release_tasks(release, ["B6 thread"], limit=12, seed=3)[0]
    assert again.row_ids == tasks["B6 thread"].row_ids
    perfect = script.score_labeller(again.gold, again.gold)
    assert perfect["accuracy"] == 1.0 and perfect["parse_failures"] == 0
