"""The code location: one Definitions object assembling every asset, check, resource, job, schedule and sensor."""

import dagster as dg

from peerify_dagster import assets as stages
from peerify_dagster.cluster import executor_def
from peerify_dagster.freshness import upstream_of
from peerify_dagster.jobs import JOBS
from peerify_dagster.lineage import with_derived_code_versions
from peerify_dagster.resources.dagster_resources import (
    BY_VENUE,
    UNPARTITIONED,
    DocumentParserResource,
    EmbeddingResource,
    LakeResource,
    LLMGatewayResource,
    OpenReviewResource,
    ParquetLakeIOManager,
    PredictionConfigurationsResource,
    ReleaseLineageResource,
    RetrievalResource,
    UpstreamAsset,
    VenueRegistryResource,
)
from peerify_dagster.resources.shard_io import SHARD_IO_MANAGER, ShardLakeIOManager
from peerify_dagster.sensors import SCHEDULES, SENSORS

# Every asset of every stage module under peerify_dagster/assets/, found there: a new stage is a new module.
all_assets = with_derived_code_versions(dg.load_assets_from_package_module(stages))
RELEASE_LINEAGE = [UpstreamAsset(asset=name, partitioning=BY_VENUE if by_venue else UNPARTITIONED)
                   for name, by_venue in upstream_of(all_assets, "label_release")]


def build_resources(lake_root: str | None = None, **overrides) -> dict:
    """The graph's resources; `lake_root=None` means PEERIFY_LAKE (read when a run opens the lake), else data_lake/."""
    resources = {
        "io_manager": ParquetLakeIOManager(root=lake_root),
        SHARD_IO_MANAGER: ShardLakeIOManager(root=lake_root),
        "lake": LakeResource(root=lake_root),
        "venue_registry": VenueRegistryResource(),
        "openreview": OpenReviewResource(),
        "document_parser": DocumentParserResource(),
        "embedding_model": EmbeddingResource(),
        "retrieval": RetrievalResource(),
        "prediction_configurations": PredictionConfigurationsResource(),
        "llm": LLMGatewayResource(),
        "release_lineage": ReleaseLineageResource(upstream=RELEASE_LINEAGE),
    }
    resources.update(overrides)
    return resources


defs = dg.Definitions(
    assets=all_assets,
    jobs=JOBS,
    sensors=SENSORS,
    schedules=SCHEDULES,
    resources=build_resources(),
    executor=executor_def(),  # None: Dagster's default; Celery workers with PEERIFY_EXECUTOR=celery (cluster.py)
)
