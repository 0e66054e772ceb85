"""Dagster resources and the Parquet IO manager that tie the plain classes to the asset graph."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import polars as pl

from peerify_dagster.domain.venues import Venue, load_registry
from peerify_dagster.paths import DEFAULT_LAKE, DEFAULT_REGISTRY
from peerify_dagster.resources.lake import Lake, UnreadablePartitionError
from peerify_dagster.resources.openreview import HttpPolicy, make_client


def markdown_preview(frame: pl.DataFrame, rows: int = 5, width: int = 60) -> str:
    """A small Markdown table of the first rows, long cells cut, for asset metadata."""
    if frame.is_empty():
        return "_(no rows)_"
    head = frame.head(rows)
    cells = [[str(v)[:width].replace("|", "\\|").replace("\n", " ") for v in row] for row in head.iter_rows()]
    lines = ["| " + " | ".join(head.columns) + " |", "|" + "---|" * len(head.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


class LakeResource(dg.ConfigurableResource):
    """Where the lake lives; PEERIFY_LAKE overrides the default `data_lake/`."""

    root: str = DEFAULT_LAKE

    def lake(self) -> Lake:
        return Lake(self.root)


class VenueRegistryResource(dg.ConfigurableResource):
    """The venue registry file (venues.yaml); PEERIFY_VENUES points elsewhere."""

    path: str = DEFAULT_REGISTRY

    def venue(self, key: str) -> Venue:
        registry = load_registry(Path(self.path))
        if key not in registry:
            raise dg.Failure(f"venue {key!r} is not in the registry {self.path}; add it with `peerify venues add`")
        return registry[key]

    def venue_keys(self) -> list[str]:
        return list(load_registry(Path(self.path)))

    def snapshot_dir(self, venue: Venue, lake: Lake) -> Path:
        if venue.source == "snapshot":
            return (Path(self.path).parent / venue.snapshot).resolve()
        return lake.root / "snapshots" / venue.slug


class OpenReviewResource(dg.ConfigurableResource):
    """HTTP behaviour of the real openreview-py client; credentials come only from the environment."""

    timeout_s: float = 60.0
    retries: int = 6
    backoff_s: float = 1.0

    def client(self, api_url: str, api_version: int = 2):
        policy = HttpPolicy(timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s)
        return make_client(api_url, policy, api_version)


class ParquetLakeIOManager(dg.ConfigurableIOManager):
    """Stores each asset partition as `<lake>/<asset>/<partition>.parquet`. The catalog is refreshed outside
    the steps (see lake.py), so a bad file of another table or a process holding the catalog never fails a step."""

    root: str = DEFAULT_LAKE

    def _partition(self, context) -> str | None:  # noqa: ANN001
        return context.partition_key if context.has_partition_key else None

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        table = context.asset_key.path[-1]
        path = Lake(self.root).write_table(table, self._partition(context), obj)
        context.add_output_metadata({
            "dagster/row_count": obj.height,
            "path": dg.MetadataValue.path(str(path)),
            "preview": dg.MetadataValue.md(markdown_preview(obj)),
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(name, str(dtype)) for name, dtype in obj.schema.items()]
            ),
        })

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        table = context.asset_key.path[-1]
        partition = context.asset_partition_key if context.has_asset_partitions else None
        try:
            return Lake(self.root).read_table(table, partition)
        except UnreadablePartitionError as exc:
            rebuild = f"`peerify build {partition}` rebuilds it" if partition else "materialise it again"
            raise dg.Failure(
                description=(f"input {table} (partition {partition!r}) cannot be read: {exc.path} is unreadable "
                             f"({exc.reason}). Re-materialise {table} for {partition!r}: {rebuild} "
                             "(a build materialises every asset of the venue)."),
                metadata={"path": dg.MetadataValue.path(str(exc.path)), "asset": table, "partition": str(partition)},
            ) from exc


class DocumentParserResource(dg.ConfigurableResource):
    """Docling settings. With `artifacts_path` (or PEERIFY_DOCLING_ARTIFACTS) pointing at locally downloaded
    Docling models, the full layout pipeline is used; without, the model-free native pipeline plus the
    project's own structure recovery."""

    artifacts_path: str | None = os.environ.get("PEERIFY_DOCLING_ARTIFACTS") or None

    def parser(self):
        from peerify_dagster.resources.document_parser import DocumentParser

        return DocumentParser(artifacts_path=self.artifacts_path)


class EmbeddingResource(dg.ConfigurableResource):
    """Sentence-embedding model: None = the packaged all-MiniLM-L6-v2 (offline); else a name or local path
    (PEERIFY_EMBEDDING_MODEL). Vectors are cached by text hash under `<lake>/embedding_cache/`."""

    model: str | None = os.environ.get("PEERIFY_EMBEDDING_MODEL") or None
    batch_size: int = 32

    def cache(self, lake: Lake):
        from peerify_dagster.resources.embedder import Embedder, EmbeddingCache

        return EmbeddingCache(lake.root / "embedding_cache", Embedder(self.model, batch_size=self.batch_size))


class RetrievalResource(dg.ConfigurableResource):
    """Which retrieval configurations run, how deep, and the local cross-encoder for the reranked ones
    (PEERIFY_RERANKER_PATH; no package ships reranker weights, so they are unavailable without it)."""

    retrievers: list[str] = ["bm25", "dense", "hybrid", "bm25+rerank", "dense+rerank", "hybrid+rerank"]
    k: int = 10
    reranker_path: str | None = os.environ.get("PEERIFY_RERANKER_PATH") or None

    def reranker(self):
        if not self.reranker_path:
            return None
        from peerify_dagster.resources.reranker import CrossEncoderReranker

        return CrossEncoderReranker(self.reranker_path)


class LLMGatewayResource(dg.ConfigurableResource):
    """The LLM gateway: models and roles from `models.yaml` (profile `offline` by default: a local GGUF model
    served by llama.cpp on loopback). Environment variables switch profiles, roles, endpoints and keys
    (PEERIFY_LLM_PROFILE, PEERIFY_ROLE_<ROLE>, OPENAI_BASE_URL, ...); keys are never stored."""

    profile: str | None = None
    cache_mode: str | None = None  # use | refresh | replay-only (default: PEERIFY_LLM_CACHE_MODE or use)
    max_cost_usd: float | None = None  # per-run budget; the run stops cleanly when it is spent
    max_tokens: int | None = None

    def gateway(self, lake: Lake, run_id: str):
        from peerify_dagster.resources.llm_gateway import LLMGateway

        return LLMGateway(lake.root, profile=self.profile, cache_mode=self.cache_mode, run_id=run_id,
                          max_cost_usd=self.max_cost_usd, max_tokens=self.max_tokens)
