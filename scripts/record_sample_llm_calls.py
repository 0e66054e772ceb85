"""Regenerate the sample venue's recorded LLM calls from a build with the configured models.

    .venv/bin/python scripts/record_sample_llm_calls.py [--output FILE] [--keep-lake DIR] [--fresh]

Builds the `sample` venue's LLM steps (and what they need) in a temporary lake. Incremental by default: the current
recording is installed in that lake first, so every call whose call id it holds (same model, prompt file, rendered
messages and decoding) is answered from it and only new or changed calls are made live (offline profile: SmolLM2 on
this machine's CPU); `--fresh` makes every call again. Then writes the lake's successful calls made with the prompt
files as they are now (a call of an edited prompt can never be answered again, so it drops out; `--fresh` also drops
calls whose inputs changed) to the venue's recording (default: the `llm_recording` file that venues.yaml names for
`sample`). Calls are not chosen by the ids the tables reference: some calls a build makes are referenced by no row
(e.g. a PaperSourced claim whose rephrasing was unusable) and a replay needs them too. `make demo` answers the
recorded calls; tests/test_llm_recording.py fails when the current prompts, models or inputs would make a call the
recording lacks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg  # noqa: E402

from peerify_dagster import paths  # noqa: E402
from peerify_dagster.definitions import build_resources, defs  # noqa: E402
from peerify_dagster.domain.llm_stages import VENUE_CALL_ID_COLUMNS  # noqa: E402
from peerify_dagster.domain.prompts import available_prompts, template_hash  # noqa: E402
from peerify_dagster.domain.venues import load_registry  # noqa: E402
from peerify_dagster.partitions import (  # noqa: E402
    add_venue_partitions,
    prediction_key,
    venue_partitions,  # noqa: E402
)
from peerify_dagster.resources.dagster_resources import (
    PredictionConfigurationsResource,  # noqa: E402
    VenueRegistryResource,  # noqa: E402
)
from peerify_dagster.resources.llm_gateway import CallLedger  # noqa: E402
from peerify_dagster.resources.llm_recording import install_recording, write_recording  # noqa: E402

VENUE = "sample"
# The venue's steps that call a model, and everything they and the predictions read.
LLM_STEPS = dg.AssetSelection.assets(*VENUE_CALL_ID_COLUMNS,
                                     "retrieval_runs").upstream().required_multi_asset_neighbors()


def live_registry(folder: Path) -> Path:
    """The sample's registry entry with absolute paths and without its recording, so every call is made."""
    registry_file = Path(paths.registry_path())
    entry = {k: v for k, v in vars(load_registry(registry_file)[VENUE]).items()
             if v is not None and k not in ("key", "llm_recording")}
    for name in ("snapshot", "gold_claims", "gold_citations"):
        if entry.get(name):
            entry[name] = str((registry_file.parent / entry[name]).resolve())
    path = folder / "venues.yaml"
    path.write_text(json.dumps({"venues": {VENUE: entry}}))  # JSON is YAML
    return path


def current_prompt_calls(lake: Path) -> set[str]:
    """Successful calls of the lake's ledger whose prompt file is unchanged since the call."""
    ledger = CallLedger(lake)
    current = {prompt_id: template_hash(prompt_id) for prompt_id in available_prompts()}
    return {call_id for call_id in ledger.successful_call_ids()
            if (row := ledger.lookup(call_id)) and current.get(row["prompt_id"]) == row["prompt_hash"]}


def main(argv: list[str] | None = None) -> int:
    registry = load_registry(Path(paths.registry_path()))
    default_output = Path(paths.registry_path()).parent / (registry[VENUE].llm_recording or "")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=default_output, help="recording file to (re)write")
    parser.add_argument("--keep-lake", type=Path, help="build in this folder and keep it (default: a temporary one)")
    parser.add_argument("--fresh", action="store_true", help="make every call again instead of reusing the recording")
    arguments = parser.parse_args(argv)
    if arguments.output == Path(paths.registry_path()).parent:
        parser.error(f"venue {VENUE!r} names no llm_recording in {paths.registry_path()}; pass --output")
    # Record what `make demo` requests: the default profile and models, every call made and stored.
    for name in [n for n in os.environ if n.startswith("PEERIFY_ROLE_")] + [
            "PEERIFY_LLM_CACHE_MODE", "PEERIFY_LLM_PROFILE", "PEERIFY_MODELS_FILE", "PEERIFY_LOCAL_GGUF"]:
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="peerify-record-") as scratch:
        lake = arguments.keep_lake or Path(scratch) / "lake"
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions(venue_partitions.name, [VENUE])
        registry = VenueRegistryResource(path=str(live_registry(Path(scratch))))
        resources = build_resources(str(lake), venue_registry=registry)
        if not arguments.fresh and arguments.output.exists():
            install_recording(lake, arguments.output)
        started = time.monotonic()
        result = dg.materialize(list(defs.assets), selection=LLM_STEPS, instance=instance, partition_key=VENUE,
                                resources=resources, raise_on_error=False)
        # Then the predictions of the configurations `make demo` builds for the sample (configurations.yaml).
        configurations = [c.name for c in PredictionConfigurationsResource().load().for_venue(VENUE)]
        add_venue_partitions(instance, VENUE, configurations)
        predicted = [dg.materialize(list(defs.assets), selection=["predictions"], instance=instance,
                                    partition_key=prediction_key(VENUE, name), resources=resources,
                                    raise_on_error=False) for name in configurations]
        seconds = time.monotonic() - started
        if not result.success or not all(run.success for run in predicted):
            result = next(run for run in [result, *predicted] if not run.success)
            failed = [e.step_key for e in result.all_events if e.is_step_failure]
            print(f"the build of {VENUE} failed (steps {failed}); the recording was not written", file=sys.stderr)
            return 1
        calls = write_recording(lake, arguments.output, current_prompt_calls(lake))
    print(f"{calls} calls recorded into {arguments.output} (build: {seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
