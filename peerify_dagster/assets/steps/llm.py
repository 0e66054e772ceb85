"""What every LLM-calling asset shares: the venue's gateway (with its recorded calls installed), a progress log and
the usage metadata of a step (summed over its shards when it runs per shard)."""

import dataclasses
from collections.abc import Callable
from contextlib import contextmanager

import dagster as dg
import polars as pl

from peerify_dagster.resources.dagster_resources import LakeResource, LLMGatewayResource, VenueRegistryResource
from peerify_dagster.resources.llm_gateway.results import UsageCounters
from peerify_dagster.resources.llm_recording import install_recording


@contextmanager
def venue_gateway(context: dg.AssetExecutionContext, llm: LLMGatewayResource, lake: LakeResource,
                  venue_registry: VenueRegistryResource):
    """The gateway for this venue's calls, with the venue's recorded calls (if it ships any) in the ledger first.
    The claim assets come before every other LLM step of the graph, so the recording serves those too."""
    venue = venue_registry.venue(context.partition_key)
    if venue.llm_recording:
        installed = install_recording(lake.lake().root, venue_registry.registry_file().parent / venue.llm_recording)
        if installed:
            context.log.info(f"recorded LLM calls of {venue.key} installed in the ledger: {installed.name}")
    with llm.gateway(lake.lake(), run_id=context.run_id) as gateway:
        yield gateway


def progress_logger(context: dg.AssetExecutionContext, what: str) -> Callable:
    def report(done: int, total: int, _result) -> None:
        if done == total or done % 20 == 0:
            context.log.info(f"{what}: {done}/{total}")
    return report


def usage_metadata(gateway) -> dict:
    return shard_usage_metadata([usage_frame(gateway)])


# A step's usage counters per model as a table, so a sharded step's shards pass theirs to its assembly.
USAGE_SCHEMA = {"model": pl.String, **{field.name: pl.Float64 if field.type in (float, "float") else pl.Int64
                                       for field in dataclasses.fields(UsageCounters)}}


def usage_frame(gateway) -> pl.DataFrame:
    """The gateway's usage counters, one row per model (in the order the models were first used)."""
    return pl.DataFrame([{"model": model, **counters} for model, counters in gateway.usage()["by_model"].items()],
                        schema=USAGE_SCHEMA)


def shard_usage_metadata(usages: list[pl.DataFrame]) -> dict:
    """The usage metadata of a step from its shards' usage frames: the counters summed per model."""
    whole = pl.concat(usages).group_by("model", maintain_order=True).sum()
    usage = {row.pop("model"): row for row in whole.iter_rows(named=True)}
    return {"calls_made": sum(u["calls"] for u in usage.values()),
            "cache_hits": sum(u["cache_hits"] for u in usage.values()),
            "usage_by_model": dg.MetadataValue.json(usage)}
