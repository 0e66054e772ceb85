"""The paper's non-LLM baseline: zero-shot NLI over the top-k chunks from a local model folder (`verifier:
nli:<folder>`). No NLI weights ship here, so the plumbing runs on tiny BERT classifiers the tests build, whose class
names (id2label, in a shuffled order) and a classifier bias decide what they answer."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.definitions import build_resources
from peerify_dagster.domain import predictions as pred
from peerify_dagster.partitions import add_venue_partitions, prediction_key
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.nli import NliClassifier
from tests.support import ALL_ASSETS

ID2LABEL = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}  # not the order the labels are listed in the code
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "method", "beats", "baseline", "on", "imagenet",
         "our", "reaches", "81", "%", ".", ",", "3", "points", "above", "a", "table"]


def tiny_nli(folder: Path, winner: str) -> Path:
    """A one-layer BERT classifier whose answer is always `winner` (its classifier reads nothing but its bias)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    BertTokenizer(str(folder / "vocab.txt"), model_max_length=32).save_pretrained(str(folder))
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                        intermediate_size=16, max_position_embeddings=32, num_labels=3, id2label=ID2LABEL,
                        label2id={v: k for k, v in ID2LABEL.items()})
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([5.0 if ID2LABEL[i] == winner else 0.0 for i in range(3)]))
    model.save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize(("names", "classes"), [
    ({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}, ["entailment", "neutral", "contradiction"]),
    ({0: "contradiction", 1: "entailment", 2: "neutral"}, ["contradiction", "entailment", "neutral"]),
])
def test_nli_classes_come_from_the_models_names(names, classes):
    assert list(pred.nli_classes(names).values()) == classes


@pytest.mark.parametrize("names", [{0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, {0: "entailment", 1: "neutral"}])
def test_a_model_whose_classes_are_not_nli_is_refused(names):
    with pytest.raises(ValueError, match="not entailment, neutral"):
        pred.nli_classes(names)


@pytest.mark.parametrize(("chunks", "label"), [
    (["neutral", "entailment", "contradiction"], "Supported"),
    (["neutral", "contradiction"], "Not Supported"),
    (["neutral", "neutral", "neutral"], "Not Determined"),
])
def test_the_claims_label_from_its_chunks_classes(chunks, label):
    assert pred.nli_verdict(chunks) == label


def test_the_classifier_answers_by_the_models_id2label(tmp_path):
    classifier = NliClassifier(tiny_nli(tmp_path / "m", "ENTAILMENT"))
    long_premise = " ".join(["the method beats the baseline"] * 40)  # beyond the 32 positions: truncated, not a crash
    answers = classifier.classify([("our method reaches 81 %", "the method beats the baseline"),
                                   (long_premise, "the method beats the baseline")])
    assert [nli for nli, _ in answers] == ["entailment", "entailment"]
    assert 0 < answers[0][1] < answers[1][1] == 32


def configurations_file(folder: Path, model: Path, mode: str = "rag") -> Path:
    path = folder / "configurations.yaml"
    path.write_text(f"configurations:\n  nli-top3: {{verifier: 'nli:{model.name}', mode: {mode}, retriever: hybrid, "
                    "k: 3}\n")
    return path


def test_a_missing_nli_folder_or_another_mode_is_refused_at_load(tmp_path):
    with pytest.raises(pred.ConfigurationError, match="NLI model folder .* does not exist"):
        pred.load_configurations(configurations_file(tmp_path, tmp_path / "absent"), [])
    model = tiny_nli(tmp_path / "m", "NEUTRAL")
    path = tmp_path / "other.yaml"
    path.write_text(f"configurations:\n  nli: {{verifier: 'nli:{model}', mode: full_context}}\n")
    with pytest.raises(pred.ConfigurationError, match="NLI verifier reads the top-k chunks"):
        pred.load_configurations(path, [])


def nli_lake(lake: Lake) -> None:
    """Two claims of paper P (three retrieved chunks for one, none for the other) and one of a paper without chunks."""
    lake.write_table("retrieval_queries", "v", pl.DataFrame({
        "claim_id": ["c1", "c2", "c3"], "paper_id": ["P", "P", "Q"], "source": ["answer_key", "review", "review"],
        "claim_text": ["the method beats the baseline on imagenet", "a table", "the method"],
        "manuscript_label": ["Supported", None, None], "gold_chunk_ids": [None, None, None]}))
    lake.write_table("retrieval_runs", "v", pl.DataFrame({
        "claim_id": ["c1"] * 3, "retriever": ["hybrid"] * 3, "rank": [1, 2, 3], "chunk_id": ["P:2", "P:1", "P:3"],
        "status": ["ok"] * 3, "error": pl.Series([None] * 3, dtype=pl.String)}))
    lake.write_table("chunks", "v", pl.DataFrame({
        "chunk_id": ["P:1", "P:2", "P:3"], "paper_id": ["P"] * 3, "order": [0, 1, 2],
        "text": ["our method reaches 81 % on imagenet , 3 points above", "the baseline", "a table"]}))


@pytest.mark.parametrize(("winner", "label"), [("ENTAILMENT", "Supported"), ("CONTRADICTION", "Not Supported")])
def test_an_nli_configuration_predicts_every_claim_without_an_llm(tmp_path, monkeypatch, winner, label):
    model = tiny_nli(tmp_path / "nli-model", winner)
    monkeypatch.setenv("PEERIFY_CONFIGURATIONS", str(configurations_file(tmp_path, model)))
    lake = Lake(tmp_path / "lake")
    nli_lake(lake)
    instance = dg.DagsterInstance.ephemeral()
    add_venue_partitions(instance, "v", ["nli-top3"])
    result = dg.materialize(ALL_ASSETS, selection=["predictions"], instance=instance,
                            partition_key=prediction_key("v", "nli-top3"), resources=build_resources(str(lake.root)),
                            raise_on_error=False)
    assert result.success
    rows = {r["claim_id"]: r for r in lake.read_table("predictions", "nli-top3|v").iter_rows(named=True)}
    assert rows["c1"]["status"] == "ok" and rows["c1"]["evidence_chunk_ids"] == ["P:2", "P:1", "P:3"]
    nli = winner.lower()
    assert (rows["c1"]["label"], rows["c1"]["raw_label"]) == (label, f"{nli},{nli},{nli}")
    assert rows["c1"]["parse_ok"] and rows["c1"]["call_id"] is None and rows["c1"]["tokens_in"] > 0
    assert rows["c1"]["verifier"] == f"nli:{model.resolve()}"
    assert (rows["c2"]["status"], rows["c2"]["label"]) == ("no_evidence", None)  # counted, not left out
    assert (rows["c3"]["status"], rows["c3"]["label"]) == ("no_manuscript", None)
    assert not (lake.root / "llm_calls").exists()  # no model call of any kind
