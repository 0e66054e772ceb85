"""The runs of one `peerify build`: one LLM budget across all of them (`--max-cost-usd`, `--max-tokens`, counted from
the ledger rows of the build's runs), a clean stop on SIGINT/SIGTERM or a spent budget (no further run starts), and
what the build spent."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType

from peerify_dagster.cli.home import run_job

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class BuildInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the build: no further run starts. A KeyboardInterrupt, so that Dagster code it
    lands in unwinds as from Ctrl-C."""

    def __init__(self, signum: int, what: str = "the build"):
        super().__init__(signum)
        self.signum, self.what = signum, what

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def describe(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}: {self.what}; no further run was started"


class BudgetSpent(Exception):
    """The build's budget is spent: the runs after the one that spent it are not started."""


class StopSignals:
    """SIGINT and SIGTERM raise BuildInterrupted. While a run executes, Dagster captures both itself (it stops the
    step at its next checkpoint and marks the run failed, then returns); the wakeup fd still records which signal
    came, so the build stops after that run instead of going on with the next."""

    def __enter__(self) -> StopSignals:
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(write, False)
        self._write = write
        self._previous_fd = signal.set_wakeup_fd(write)
        self._previous = {signum: signal.signal(signum, self._raise) for signum in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)

    @staticmethod
    def _raise(signum: int, _frame: FrameType | None) -> None:
        raise BuildInterrupted(signum)

    def received(self) -> int | None:
        """The last stop signal that arrived since the previous look, whoever handled it."""
        try:
            data = os.read(self._read, 512)
        except BlockingIOError:
            return None
        stops = [number for number in data if number in STOP_SIGNALS]
        return stops[-1] if stops else None


class BuildSession:
    """Runs the jobs of one build under one budget; `stop` (a StopSignals) makes a signal end the build."""

    def __init__(self, instance, lake_root: Path, stop: StopSignals,  # noqa: ANN001 - a DagsterInstance
                 max_cost_usd: float | None = None, max_tokens: int | None = None):
        self.instance, self.lake_root, self.stop = instance, lake_root, stop
        self.max_cost_usd, self.max_tokens = max_cost_usd, max_tokens
        self.results: list = []

    @property
    def run_ids(self) -> list[str]:
        # A cluster run re-executed after a lost worker is several runs (home.CeleryRun.run_ids), each with spend.
        return [run_id for result in self.results for run_id in getattr(result, "run_ids", [result.run_id])]

    def run(self, job_name: str, partition_key, run_config: dict | None = None, asset_selection: list | None = None):
        """One run of the build. Raises BuildInterrupted when a stop signal came during it, BudgetSpent when the
        build's budget is spent after it."""
        config = dict(run_config or {})
        if self.max_cost_usd is not None or self.max_tokens is not None:
            config["resources"] = {"llm": {"config": {"max_cost_usd": self.max_cost_usd, "max_tokens": self.max_tokens,
                                                      "build_run_ids": self.run_ids}}}
        result = run_job(self.instance, job_name, partition_key, config, asset_selection)
        self.results.append(result)
        if (signum := self.stop.received()) is not None:
            status = self.instance.get_run_by_id(result.run_id).status.value
            raise BuildInterrupted(signum, f"run {result.run_id} ({job_name} {partition_key}) was interrupted and "
                                           f"ended {status}")
        if reason := self.budget_spent():
            raise BudgetSpent(f"LLM budget spent after run {result.run_id} ({job_name} {partition_key}): {reason}; "
                              "the remaining runs of the build were not started")
        return result

    def spent(self) -> tuple[int, int, float]:
        """Calls made live, tokens and cost of the build's runs so far (their ledger rows)."""
        from peerify_dagster.resources.llm_gateway import CallLedger

        return CallLedger(self.lake_root).spent_by_runs(self.run_ids)

    def budget_spent(self) -> str | None:
        from peerify_dagster.resources.llm_gateway import Budget

        if self.max_cost_usd is None and self.max_tokens is None:
            return None
        _, tokens, cost = self.spent()
        return Budget(self.max_cost_usd, self.max_tokens, "build", tokens, cost).exhausted_reason()

    def usage_line(self) -> str:
        """The build's LLM calls: made live, answered from the ledger, and what they cost."""
        live, tokens, cost = self.spent()
        # The LLM steps' cache hits only (their metadata has `usage_by_model`): chunk_embeddings reports the
        # embedding cache's hits under the same name, which are no ledger answers.
        answered = sum(int(metadata["cache_hits"].value)
                       for result in self.results for event in result.all_events if event.is_step_materialization
                       for metadata in [event.step_materialization_data.materialization.metadata]
                       if "cache_hits" in metadata and "usage_by_model" in metadata)
        limits = ([f"${self.max_cost_usd:.4f}"] if self.max_cost_usd is not None else []) + \
            ([f"{self.max_tokens} tokens"] if self.max_tokens is not None else [])
        return (f"LLM calls of this build: {live} made live, {answered} answered from the ledger; {tokens} tokens, "
                f"${cost:.4f} spent" + (f" (budget {', '.join(limits)})" if limits else ""))
