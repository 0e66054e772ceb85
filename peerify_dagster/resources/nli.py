"""A zero-shot NLI classifier from a local model folder: the paper's non-LLM baseline (no package ships NLI weights;
a configuration names the folder with `verifier: nli:<folder>`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from peerify_dagster.domain.predictions import nli_classes
from peerify_dagster.resources.embedder import model_folder_digest


class NliClassifier:
    """Classifies (premise, hypothesis) pairs as entailment, neutral or contradiction with a transformers
    sequence-classification model loaded from `path`; the class of each output comes from the model's id2label.
    Inputs longer than the model's window are truncated (premise first): a chunk is a passage, not a manuscript."""

    def __init__(self, path: str | Path, batch_size: int = 16) -> None:
        location = Path(path)
        if not location.is_dir():
            raise FileNotFoundError(f"NLI model folder {location} does not exist (only local models are loaded)")
        import torch  # heavy imports, only when an NLI configuration runs
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(location), local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(str(location), local_files_only=True).eval()
        self.classes = nli_classes(self.model.config.id2label)
        self.batch_size = batch_size
        # Never beyond the position embeddings: a tokenizer without a saved limit would let inputs crash the model.
        self.max_length = min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings)
        self.model_id = f"{location.name}@{model_folder_digest(location)}"

    def classify(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, int]]:
        """The most likely class of each (premise, hypothesis) pair, and the tokens the model read for it."""
        answers: list[tuple[str, int]] = []
        for start in range(0, len(pairs), self.batch_size):
            batch = pairs[start:start + self.batch_size]
            encoded = self.tokenizer([p for p, _ in batch], [h for _, h in batch], padding=True,
                                     truncation="only_first", max_length=self.max_length, return_tensors="pt")
            with self._torch.no_grad():
                logits = self.model(**encoded).logits
            tokens = encoded["attention_mask"].sum(dim=1).tolist()
            answers += [(self.classes[int(index)], int(n)) for index, n in zip(logits.argmax(dim=1).tolist(), tokens)]
        return answers
