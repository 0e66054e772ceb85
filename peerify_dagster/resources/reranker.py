"""Cross-encoder reranking from a local model folder (no package ships reranker weights; off by default).

The reranker is a plain `(query, passages) -> scores` callable, which is what
`domain.retrieval.Reranked` expects, so the domain code never imports a model library.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from peerify_dagster.resources.embedder import model_folder_digest


class CrossEncoderReranker:
    """Scores (query, passage) pairs with a sentence-transformers CrossEncoder loaded from `path`.

    Inputs are truncated to the model's own maximum length unless `max_length` asks for less.
    """

    def __init__(
        self, path: str | Path, batch_size: int = 32, device: str = "cpu", max_length: int | None = None
    ) -> None:
        location = Path(path)
        if not location.is_dir():
            raise FileNotFoundError(f"cross-encoder folder {location} does not exist (only local models are loaded)")
        from sentence_transformers import CrossEncoder  # heavy import, only when a reranker is configured

        self.batch_size = batch_size
        self.model = CrossEncoder(str(location), device=device, local_files_only=True)
        if max_length is not None:
            # Never beyond the position embeddings: longer inputs would crash instead of truncating.
            limit = getattr(self.model.config, "max_position_embeddings", max_length)
            self.model.max_seq_length = min(max_length, limit)
        self.model_id = f"{location.name}@{model_folder_digest(location)}"

    def __call__(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        scores = self.model.predict(
            [(query, passage) for passage in passages], batch_size=self.batch_size, show_progress_bar=False
        )
        return [float(score) for score in scores]
