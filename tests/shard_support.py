"""What the sharding tests share: a table partition's digest, a gateway that fails one shard's calls, and a job run
with one shard failing, then re-executed from its failure."""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LLMGatewayResource
from peerify_dagster.resources.lake import Lake


def file_digest(lake_root: Path, table: str, venue: str) -> str:
    return hashlib.sha256(Lake(lake_root).table_path(table, venue).read_bytes()).hexdigest()


class FlakyLLMGatewayResource(LLMGatewayResource):
    """The real gateway, except that a batch of calls whose item `item_field` is the text in the file named by the
    variable `fail_flag_env` raises while that file exists: a worker lost in the middle of one shard's calls."""

    fail_flag_env: str
    item_field: str

    @contextmanager
    def gateway(self, lake, run_id: str):  # noqa: ANN001 - a Lake
        with super().gateway(lake, run_id) as gateway:
            real_map = gateway.map

            def flaky_map(target, prompt_id, items, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
                flag = Path(os.environ[self.fail_flag_env])
                if flag.exists() and any(item.get(self.item_field) == flag.read_text() for item in items):
                    raise RuntimeError(f"worker lost while calling {target} about {flag.read_text()!r}")
                return real_map(target, prompt_id, items, *args, **kwargs)

            gateway.map = flaky_map
            yield gateway


def flaky_job(name: str, selection: list[str], partitions: dg.DynamicPartitionsDefinition, fail_flag_env: str,
              item_field: str) -> dg.JobDefinition:
    """`selection` with the flaky gateway (FlakyLLMGatewayResource); the lake and registry from PEERIFY_LAKE and
    PEERIFY_VENUES. A reconstructable job's function calls this in the run's process."""
    job = dg.define_asset_job(name, selection=selection, partitions_def=partitions)
    gateway = FlakyLLMGatewayResource(fail_flag_env=fail_flag_env, item_field=item_field)
    return dg.Definitions(assets=list(defs.assets), jobs=[job],
                          resources=build_resources(llm=gateway)).resolve_job_def(job.name)


@dataclass(frozen=True)
class Reexecution:
    failed: set[str]  # the first run's failed steps
    succeeded: set[str]  # the first run's successful steps
    reran: set[str]  # the steps the re-execution from failure started


def fail_then_reexecute(job, venue: str, home: Path, fail_flag: Path, unassembled: Path,  # noqa: ANN001
                        partitions: dg.DynamicPartitionsDefinition = venue_partitions) -> Reexecution:
    """Run `job` (reconstructable) for `venue` in process on a fresh instance under `home` while `fail_flag` exists
    (its file makes one shard's step raise): the run fails and `unassembled` (the venue table) is not written. Then,
    the flag removed, re-execute the run from its failure, which must succeed. `venue` is a key of `partitions`."""
    in_process = {"execution": {"config": {"in_process": {}}}}
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        instance.add_dynamic_partitions(partitions.name, [venue])
        with dg.execute_job(job, instance, run_config=in_process, tags={"dagster/partition": venue},
                            raise_on_error=False) as first:
            assert not first.success
            failed = {e.step_key for e in first.all_events if e.is_step_failure}
            succeeded = {e.step_key for e in first.all_events if e.is_step_success}
            run_id = first.run_id
        assert not unassembled.exists()  # nothing assembled from a part
        fail_flag.unlink()  # the worker is back
        # execute_job takes the re-execution's tags as given (the UI copies the parent's): the partition again.
        with dg.execute_job(job, instance, run_config=in_process, tags={"dagster/partition": venue},
                            reexecution_options=dg.ReexecutionOptions.from_failure(run_id, instance),
                            raise_on_error=False) as again:
            assert again.success
            reran = {e.step_key for e in again.all_events if e.is_step_start}
    return Reexecution(failed, succeeded, reran)
