"""Regenerate the sample venue's recorded LLM calls from a live build with the configured models.

    .venv/bin/python scripts/record_sample_llm_calls.py [--output FILE] [--keep-lake DIR]

Builds the whole asset graph for the `sample` venue in a temporary lake with no recording installed, so every
LLM call is made (offline profile: SmolLM2 on this machine's CPU, several minutes on 2 cores), then writes
every successful call of that build's ledger to the venue's recording (default: the `llm_recording` file that
venues.yaml names for `sample`). `make demo` answers those calls from the recording; tests/test_llm_recording.py
fails when the current prompts, models or inputs would make a call the recording lacks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# Running the script directly puts scripts/ on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402

from peerify_dagster import paths  # noqa: E402
from peerify_dagster.definitions import build_resources, defs  # noqa: E402
from peerify_dagster.domain.venues import load_registry  # noqa: E402
from peerify_dagster.partitions import venue_partitions  # noqa: E402
from peerify_dagster.resources.dagster_resources import VenueRegistryResource  # noqa: E402
from peerify_dagster.resources.llm_recording import write_recording  # noqa: E402

VENUE = "sample"


def live_registry(folder: Path) -> Path:
    """The sample's registry entry with absolute paths and without its recording, so every call is made."""
    registry_file = Path(paths.registry_path())
    entry = {k: v for k, v in vars(load_registry(registry_file)[VENUE]).items()
             if v is not None and k not in ("key", "llm_recording")}
    for name in ("snapshot", "gold_claims"):
        if entry.get(name):
            entry[name] = str((registry_file.parent / entry[name]).resolve())
    path = folder / "venues.yaml"
    path.write_text(json.dumps({"venues": {VENUE: entry}}))  # JSON is YAML
    return path


def main(argv: list[str] | None = None) -> int:
    registry = load_registry(Path(paths.registry_path()))
    default_output = Path(paths.registry_path()).parent / (registry[VENUE].llm_recording or "")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=default_output, help="recording file to (re)write")
    parser.add_argument("--keep-lake", type=Path, help="build in this folder and keep it (default: a temporary one)")
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
        started = time.monotonic()
        result = dg.materialize(list(defs.assets), instance=instance, partition_key=VENUE, resources=resources,
                                raise_on_error=False)
        seconds = time.monotonic() - started
        if not result.success:
            failed = [e.step_key for e in result.all_events if e.is_step_failure]
            print(f"the build of {VENUE} failed (steps {failed}); the recording was not written", file=sys.stderr)
            return 1
        calls = write_recording(lake, arguments.output)
    print(f"{calls} calls recorded into {arguments.output} (live build: {seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
