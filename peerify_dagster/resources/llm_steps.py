"""What every LLM-calling asset shares: the venue's gateway (with its recorded calls installed), a progress log and
the usage metadata of a step."""

from collections.abc import Callable
from contextlib import contextmanager

import dagster as dg

from peerify_dagster.resources.dagster_resources import LakeResource, LLMGatewayResource, VenueRegistryResource
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
    usage = gateway.usage()["by_model"]
    return {"calls_made": sum(u["calls"] for u in usage.values()),
            "cache_hits": sum(u["cache_hits"] for u in usage.values()),
            "usage_by_model": dg.MetadataValue.json(usage)}
