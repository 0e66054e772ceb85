"""Dagster resources and the Parquet IO manager that tie the plain classes to the asset graph."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from peerify_dagster import paths
from peerify_dagster.domain.columns import column_description
from peerify_dagster.domain.retrieval import RETRIEVER_CONFIGS
from peerify_dagster.domain.venues import SOURCE_SNAPSHOT, SOURCE_UPLOAD, Venue, load_registry
from peerify_dagster.resources.lake import SNAPSHOTS_DIR, Lake, StreamedTable, UnreadablePartitionError
from peerify_dagster.resources.openreview import HttpPolicy, make_client, unreachable_reason


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
    """Where the lake lives: `root`, else PEERIFY_LAKE (read when the lake is opened), else `data_lake/`."""

    root: str | None = None

    def lake(self) -> Lake:
        return Lake(self.root or paths.lake_root())

    def read_input(self, table: str, partition: str) -> pl.DataFrame:
        """A venue partition a step reads itself (an input Dagster cannot map to the step's partition, see
        partitions.py): a missing or unreadable file fails the step saying how to rebuild it."""
        try:
            return self.lake().read_table(table, partition)
        except FileNotFoundError:
            raise dg.Failure(f"input {table} is not built for {partition!r}: `peerify build {partition}` builds "
                             "it", allow_retries=False) from None
        except UnreadablePartitionError as exc:
            raise unreadable_input(table, partition, exc) from exc

    def read_built(self, table: str, keys: list[str]) -> pl.DataFrame:
        """The built partitions `keys` of a table, concatenated (a venue's results reading every predictions
        partition built for it); none at all fails the step saying how to build them."""
        if not keys:
            raise dg.Failure(f"input {table}: no partition is built for this venue; `peerify build <venue>` builds "
                             "the venue's configurations")
        try:
            return pl.concat([self.lake().read_table(table, key) for key in sorted(keys)], how="diagonal_relaxed")
        except UnreadablePartitionError as exc:
            raise unreadable_input(table, exc.partition_key, exc) from exc


def unreadable_input(table: str, partition: str | None, exc: UnreadablePartitionError) -> dg.Failure:
    rebuild = f"`peerify build {partition}` rebuilds it" if partition else "materialise it again"
    return dg.Failure(
        description=(f"input {table} (partition {partition!r}) cannot be read: {exc.path} is unreadable "
                     f"({exc.reason}). Re-materialise {table} for {partition!r}: {rebuild} "
                     "(a build materialises every asset of the venue)."),
        metadata={"path": dg.MetadataValue.path(str(exc.path)), "asset": table, "partition": str(partition)},
    )


class VenueRegistryResource(dg.ConfigurableResource):
    """The venue registry file: `path`, else PEERIFY_VENUES (read when the registry is opened), else venues.yaml;
    with the lake's upload registry (`peerify verify`'s venues, paths.upload_registry_path) merged in."""

    path: str | None = None

    def registry_file(self) -> Path:
        return Path(self.path or paths.registry_path())

    def venues(self) -> dict[str, Venue]:
        return load_registry(self.registry_file(), Path(paths.upload_registry_path()))

    def venue(self, key: str) -> Venue:
        registry = self.venues()
        if key not in registry:
            raise dg.Failure(f"venue {key!r} is not in the registry {self.registry_file()}; "
                             "add it with `peerify venues add`")
        return registry[key]

    def venue_keys(self) -> list[str]:
        """The venues of the registry file, which a refresh re-crawls; the lake's upload venues have nothing to
        re-crawl."""
        return list(load_registry(self.registry_file()))

    def snapshot_dir(self, venue: Venue, lake: Lake) -> Path:
        if venue.source in (SOURCE_SNAPSHOT, SOURCE_UPLOAD):  # an upload's folder is absolute (in the lake)
            return (self.registry_file().parent / venue.snapshot).resolve()
        return lake.root / SNAPSHOTS_DIR / venue.slug


class OpenReviewResource(dg.ConfigurableResource):
    """HTTP behaviour of the real openreview-py client; credentials come only from the environment."""

    timeout_s: float = 60.0
    retries: int = 6
    backoff_s: float = 1.0

    def check_reachable(self, api_url: str) -> None:
        """Fails the step at once, in one sentence, when the API cannot be reached (offline, DNS, refused)."""
        problem = unreachable_reason(api_url, timeout_s=min(self.timeout_s, 10.0))
        if problem:
            raise dg.Failure(description=f"cannot reach OpenReview at {api_url}: {problem}", allow_retries=False)

    def client(self, api_url: str, api_version: int = 2):
        policy = HttpPolicy(timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s)
        return make_client(api_url, policy, api_version)


class ParquetLakeIOManager(dg.ConfigurableIOManager):
    """Stores each asset partition as `<lake>/<asset>/<partition>.parquet`. The catalog is refreshed outside
    the steps (see lake.py), so a bad file of another table or a process holding the catalog never fails a step.

    An asset too large for memory returns a `StreamedTable` (written batch by batch through `Lake.stream_table`),
    which is committed (renamed into place) instead of written. An input annotated `pq.ParquetFile` is opened,
    not loaded, so the step can read it batch by batch; any other input is loaded as a polars DataFrame."""

    root: str | None = None  # None: PEERIFY_LAKE when a step runs, else `data_lake/`

    def _lake(self) -> Lake:
        return Lake(self.root or paths.lake_root())

    def _partition(self, context) -> str | None:  # noqa: ANN001
        return context.partition_key if context.has_partition_key else None

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame | StreamedTable) -> None:
        table = context.asset_key.path[-1]
        partition = self._partition(context)
        if isinstance(obj, StreamedTable):
            expected = self._lake().table_path(table, partition)
            if (obj.table, obj.partition_key, obj.path) != (table, partition, expected):
                raise dg.Failure(f"output {table} (partition {partition!r}) was streamed to {obj.path} as "
                                 f"{obj.table} / {obj.partition_key!r}; expected {expected}: open the writer with "
                                 "the lake resource of this run and the output's own table and partition")
            preview, rows, schema, path = obj.head(), obj.rows, obj.schema, obj.commit()
        else:
            preview, rows, schema = obj, obj.height, obj.schema
            path = self._lake().write_table(table, partition, obj)
        context.add_output_metadata({
            "dagster/row_count": rows,
            "path": dg.MetadataValue.path(str(path)),
            "preview": dg.MetadataValue.md(markdown_preview(preview)),
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(name, str(dtype), description=column_description(table, name))
                         for name, dtype in schema.items()]
            ),
        })

    def load_input(self, context: dg.InputContext) -> pl.DataFrame | pq.ParquetFile:
        table = context.asset_key.path[-1]
        partition = context.asset_partition_key if context.has_asset_partitions else None
        streamed = context.dagster_type.typing_type is pq.ParquetFile
        try:
            return (self._lake().open_table if streamed else self._lake().read_table)(table, partition)
        except UnreadablePartitionError as exc:
            raise unreadable_input(table, partition, exc) from exc


class DocumentParserResource(dg.ConfigurableResource):
    """Docling settings. With `artifacts_path` (or PEERIFY_DOCLING_ARTIFACTS) pointing at locally downloaded
    Docling models, the full layout pipeline is used; without, the model-free native pipeline plus the
    project's own structure recovery. Given a lake, the parser parses a PDF once per lake (its parse cache)."""

    artifacts_path: str | None = None

    def parser(self, lake: Lake | None = None):
        from peerify_dagster.resources.document_parser import DocumentParser

        return DocumentParser(artifacts_path=self.artifacts_path or os.environ.get("PEERIFY_DOCLING_ARTIFACTS") or None,
                              cache_root=lake.root if lake is not None else None)


class EmbeddingResource(dg.ConfigurableResource):
    """Sentence-embedding model: None = the packaged all-MiniLM-L6-v2 (offline); else a name or local path
    (PEERIFY_EMBEDDING_MODEL). Vectors are cached by text hash under `<lake>/embedding_cache/`."""

    model: str | None = None
    batch_size: int = 32

    def model_name(self) -> str | None:
        # Read when the model is loaded, so the environment of the run (not of the import) decides.
        return self.model or os.environ.get("PEERIFY_EMBEDDING_MODEL") or None

    def cache(self, lake: Lake):
        from peerify_dagster.resources.embedder import Embedder, EmbeddingCache

        return EmbeddingCache(lake.root / "embedding_cache", Embedder(self.model_name(), batch_size=self.batch_size))


class RetrievalResource(dg.ConfigurableResource):
    """Which retrieval configurations run, how deep, and the local cross-encoder for the reranked ones
    (PEERIFY_RERANKER_PATH; no package ships reranker weights, so they are unavailable without it)."""

    retrievers: list[str] = list(RETRIEVER_CONFIGS)
    k: int = 10
    reranker_path: str | None = None

    def reranker_folder(self) -> str | None:
        return self.reranker_path or os.environ.get("PEERIFY_RERANKER_PATH") or None

    def reranker(self):
        folder = self.reranker_folder()
        if not folder:
            return None
        from peerify_dagster.resources.reranker import CrossEncoderReranker

        return CrossEncoderReranker(folder)


class PredictionConfigurationsResource(dg.ConfigurableResource):
    """The prediction configurations file: `path`, else PEERIFY_CONFIGURATIONS (read when it is opened), else
    configurations.yaml; checked against the models of models.yaml and the known retrievers."""

    path: str | None = None

    def configurations_file(self) -> Path:
        return Path(self.path or paths.configurations_path())

    def load(self):
        from peerify_dagster.domain.predictions import load_configurations
        from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

        return load_configurations(self.configurations_file(), ModelRegistry.load().models)


class LLMGatewayResource(dg.ConfigurableResource):
    """The LLM gateway: models and roles from `models.yaml` (profile `offline` by default: a local GGUF model
    served by llama.cpp on loopback). Environment variables switch profiles, roles, endpoints and keys
    (PEERIFY_LLM_PROFILE, PEERIFY_ROLE_<ROLE>, OPENAI_BASE_URL, ...); keys are never stored."""

    profile: str | None = None
    cache_mode: str | None = None  # use | refresh | replay-only (default: PEERIFY_LLM_CACHE_MODE or use)
    # The budget of every step of the run together (counted from the ledger); the step that finds it spent fails
    # cleanly, writing nothing. `peerify build --max-cost-usd/--max-tokens` sets it for the whole build: each of its
    # runs gets `build_run_ids`, the build's runs before it, whose spend counts too.
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    build_run_ids: list[str] | None = None
    # Models with `batch: true` (models.yaml): how often a step polls its provider batch, and for how long before it
    # fails saying to re-run it to collect (0: poll once; a batch takes up to a day).
    batch_poll_s: float = 60.0
    batch_wait_s: float = 0.0

    @contextmanager
    def gateway(self, lake: Lake, run_id: str):
        """The gateway of one step (a context: closed at the end); a spent budget, or a provider batch not ended yet,
        fails the step in one line."""
        from peerify_dagster.resources.llm_gateway import BatchPendingError, BudgetExceeded, LLMGateway

        with LLMGateway(lake.root, profile=self.profile, cache_mode=self.cache_mode, run_id=run_id,
                        max_cost_usd=self.max_cost_usd, max_tokens=self.max_tokens,
                        budget_run_ids=self.build_run_ids, batch_poll_s=self.batch_poll_s,
                        batch_wait_s=self.batch_wait_s) as gateway:
            try:
                yield gateway
            except BudgetExceeded as exc:
                made = sum(u["calls"] for u in gateway.usage()["by_model"].values())
                raise dg.Failure(description=f"LLM budget spent, step stopped before writing anything ({made} calls "
                                             f"made by this step are in the ledger): {exc}",
                                 allow_retries=False) from exc
            except BatchPendingError as exc:
                raise dg.Failure(description=f"LLM batch not collected yet, step stopped before writing anything: "
                                             f"{exc}", allow_retries=False,
                                 metadata={"batch_id": str(exc.batch_id),
                                           "record": dg.MetadataValue.path(str(exc.record))}) from exc


UNPARTITIONED, BY_VENUE = "unpartitioned", "venue"


class UpstreamAsset(dg.Config):
    asset: str  # the asset key as a user string
    partitioning: str  # UNPARTITIONED or BY_VENUE


class ReleaseLineageResource(dg.ConfigurableResource):
    """The assets upstream of a label release whose latest materialisations its manifest records (those partitioned
    by venue, or not at all), taken from the whole asset graph when the code location is assembled: a release's run
    sees only the release's neighbours."""

    upstream: list[UpstreamAsset] = []
