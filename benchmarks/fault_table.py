"""Issue 7's fault table, re-run: each fault injected into the bundled `sample` venue as a new user would meet it,
each on its own lake and Dagster home, through the real `peerify` command. Prints a Markdown table:
fault | what happened now | verdict (recovered / named / refused, or open).

    .venv/bin/python benchmarks/fault_table.py [--prebuilt LAKE] [--keep]

It first builds the sample once from an empty lake, making its LLM calls live (the sample is registered without its
shipped LLM recording; `--prebuilt` reuses a complete lake built with the same code, e.g. by `make demo`). Faults
that need a built lake start from a copy of it; where a fault needs LLM calls still to be made, the copy's ledger
keeps only the clean build's first calls, so the build makes the last few.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

import dagster as dg  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from peerify_dagster.resources.lake import Lake, unreadable_reason  # noqa: E402
from peerify_dagster.resources.llm_gateway import CallLedger  # noqa: E402
from peerify_dagster.resources.runs import PID_TAG  # noqa: E402
from tests.fakes.cli import (  # noqa: E402
    SAMPLE,
    CliResult,
    alembic_heads,
    cli_env,
    finish,
    fresh_home,
    hold_catalog,
    kill_during_llm_calls,
    ledger_rows,
    peerify,
    sample_registry,
    start_peerify,
)

SAMPLE_PREDICTIONS = "hybrid-top3|sample"  # the configuration the sample predicts every claim under
TRUNCATED_PDF = "Hp4sLx9TcV"  # 13 claims of the answer key
SECRET = "sk-fault-table-secret"  # an API key in the killed build's environment, looked for in its children
PLACEHOLDERS: dict[str, str] = {str(REPO_ROOT): "<repo>"}  # machine-specific folders, as shown in the table


@dataclass
class Row:
    fault: str
    happened: str
    verdict: str


@dataclass
class Case:
    """One fault's own folder: lake, Dagster home, venue registry and the command's environment."""

    folder: Path
    lake: Lake
    home: Path
    env: dict[str, str]
    seeded: set[tuple] = field(default_factory=set)  # (call_id, created_at) of the ledger rows it started with

    def build(self) -> CliResult:
        return peerify("build", "sample", env=self.env, timeout=1800)

    def sql(self, query: str) -> CliResult:
        return peerify("sql", query, env=self.env)

    def new_rows(self) -> list[dict]:
        """Successful ledger rows written since the case was set up."""
        return [r for r in ledger_rows(self.lake.root) if r["error"] is None
                and (r["call_id"], r["created_at"]) not in self.seeded]

    def dagster_state(self) -> tuple[list[dg.DagsterRun], int]:
        """The home's runs and the number of claimed slots in pool `llm`."""
        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            return instance.get_runs(), len(instance.event_log_storage.get_concurrency_info("llm").claimed_slots)


class FaultTable:
    def __init__(self, work: Path, prebuilt: Path | None):
        self.work = work
        PLACEHOLDERS[str(work)] = "<tmp>"
        self.prebuilt = prebuilt or self._clean_build()
        rows = [r for segment in sorted((self.prebuilt / "llm_calls").glob("*.parquet"))
                for r in pq.read_table(segment).to_pylist() if r["error"] is None]
        first = {}
        for row in sorted(rows, key=lambda r: r["created_at"]):  # in the order the clean build made them
            first.setdefault(row["call_id"], row)
        self.calls = list(first.values())
        self.total = len(self.calls)
        assert self.total, f"{self.prebuilt} holds no LLM calls: not a complete build of the sample"

    def _clean_build(self) -> Path:
        case = self.case("clean", copy_lake=False)
        result = case.build()
        (case.folder / "build.out").write_text(result.stdout)
        (case.folder / "build.err").write_text(result.stderr)
        assert result.returncode == 0, result.stderr[-3000:]
        print(f"clean build of the sample: {result.seconds:.0f} s", file=sys.stderr, flush=True)
        return case.lake.root

    def case(self, name: str, copy_lake: bool = True, keep_calls: tuple[int, ...] | None = None,
             snapshot: Path = SAMPLE, registry_text: str | None = None) -> Case:
        """A fresh folder for one fault. With `copy_lake`, the lake is a copy of the clean build's, its ledger holding
        the clean build's calls in compacted segments of the sizes in `keep_calls` (in the order they were made;
        default: all of them, in one segment)."""
        folder = self.work / name
        folder.mkdir(parents=True)
        lake = Lake(folder / "lake")
        if copy_lake:
            shutil.copytree(self.prebuilt, lake.root, ignore=shutil.ignore_patterns("llm_calls", "peerify.duckdb*",
                                                                                    ".*.lock"))
            ledger, start = CallLedger(lake.root), 0
            for size in keep_calls or (self.total,):
                for row in self.calls[start:start + size]:
                    ledger.append(row)
                ledger.compact()
                start += size
        if registry_text is None:
            registry = sample_registry(folder, snapshot)
        else:
            registry = folder / "venues.yaml"
            registry.write_text(registry_text)
        home = fresh_home(folder / "home")
        seeded = {(r["call_id"], r["created_at"]) for r in ledger_rows(lake.root)}
        return Case(folder, lake, home, cli_env(lake.root, registry, home), seeded)

    # -- the faults ------------------------------------------------------------------------------------------------
    def kill_mid_llm(self) -> list[Row]:
        """kill -9 during the verifier calls, then a rebuild; also the orphan-server and child-environment rows."""
        case = self.case("kill", keep_calls=(self.total - 20,))
        case.env["OPENAI_API_KEY"] = SECRET
        killed = kill_during_llm_calls("sample", case.env, case.folder / "killed", after_new_calls=5,
                                       total_calls=self.total)
        surviving = killed.surviving_children()
        ports_open = killed.open_ports()
        rebuild = case.build()
        runs, claimed = case.dagster_state()
        [dead] = [run for run in runs if run.tags.get(PID_TAG) == str(killed.pid)]
        rows = case.new_rows()
        before = {r["call_id"] for r in rows if r["run_id"] == dead.run_id}
        remade = {r["call_id"] for r in rows if r["run_id"] != dead.run_id} & (before | {c for c, _ in case.seeded})
        made_by_rebuild = sum(r["run_id"] != dead.run_id for r in rows)
        kill_row = Row(
            "`kill -9` of a build during its LLM calls, then a rebuild",
            f"killed with {len(killed.recorded_before_kill)}/{self.total} calls recorded ({len(before)} by the killed "
            f"run, each on disk when made); rebuild exit {rebuild.returncode} in {rebuild.seconds:.0f} s made the "
            f"other {made_by_rebuild}, **re-made {len(remade)}**; dead run marked {dead.status.value}, "
            f"{claimed} `llm` slot(s) left claimed",
            "recovered" if rebuild.returncode == 0 and not remade and dead.status == dg.DagsterRunStatus.FAILURE
            and not claimed else "open")
        children = Counter(_short_command(command) for command in killed.commands.values())
        orphan_row = Row(
            "the killed build's llama.cpp server keeps running (orphan)",
            f"server ran in the build's own process (listening on {len(killed.listening_ports)} loopback port(s)): "
            f"{len(ports_open)} still accepting after the kill; child processes at the kill: "
            f"{_describe_counts(children) or 'none'}, {len(surviving)} still running 10 s later",
            "recovered" if killed.listening_ports and not ports_open and not surviving else "open")
        leaked = [pid for pid, env in killed.environments.items() if SECRET in env.values()]
        secrets_row = Row(
            "child processes inherit the whole environment, API keys included",
            f"no model-server child any more (llama.cpp runs in-process); the build's only children are Dagster's "
            f"compute-log mirrors ({_describe_counts(children) or 'none'}): {len(leaked)} of "
            f"{len(killed.environments)} carry the API key set for the build",
            "recovered" if not leaked else "open (Dagster's compute-log `tail`/watcher children)")
        return [kill_row, orphan_row, secrets_row]

    def stuck_pool_slot(self) -> Row:
        """Two builds killed in their LLM steps (each holding an `llm` slot), then a third build."""
        case = self.case("slots", keep_calls=(self.total - 4,))
        killed = [kill_during_llm_calls("sample", case.env, case.folder / f"killed{i}", after_new_calls=1,
                                        total_calls=self.total) for i in range(2)]
        third = case.build()
        runs, claimed = case.dagster_state()
        dead = [run for run in runs if run.tags.get(PID_TAG) in {str(k.pid) for k in killed}]
        recovered = [k.stderr.count("is gone; marked FAILURE") for k in killed[1:]] + [
            third.stderr.count("is gone; marked FAILURE")]
        return Row(
            "stuck `llm` pool slot after 2 killed builds: every later build hangs",
            f"each build's start marked the dead runs FAILURE and freed their slots (second build: {recovered[0]}, "
            f"third: {recovered[1]}); third build exit {third.returncode} in {third.seconds:.0f} s; dead runs "
            f"{sorted(r.status.value for r in dead)}, {claimed} `llm` slot(s) claimed after",
            "recovered" if third.returncode == 0 and claimed == 0
            and all(r.status == dg.DagsterRunStatus.FAILURE for r in dead) else "open")

    def truncated_chunks(self) -> Row:
        case = self.case("chunks")
        chunks = case.lake.table_path("chunks", "sample")
        _truncate(chunks)
        query = case.sql("select count(*) as n from reviews")
        named = [line for line in query.stderr.splitlines() if str(chunks) in line]
        build = case.build()
        rows = pl.read_parquet(chunks).height if unreadable_reason(chunks) is None else "unreadable"
        after = case.sql("select count(*) as n from chunks")
        return Row(
            "truncated `chunks/sample.parquet`: every `peerify sql` and the next build fail",
            f"`peerify sql` on reviews exit {query.returncode}, stderr names the file: "
            f"`{_clip(named[0] if named else 'no', 110)}`; build exit {build.returncode} in {build.seconds:.0f} s "
            f"rewrote it ({rows} rows); `select count(*) from chunks` exit {after.returncode}: "
            f"{after.stdout.split()[-1:]}",
            "named, recovered" if query.returncode == 0 and named and build.returncode == 0 and after.returncode == 0
            else "open")

    def truncated_ledger_segment(self) -> Row:
        case = self.case("ledger", keep_calls=(self.total - 5, 5))
        segments = sorted((case.lake.root / "llm_calls").glob("part-*.parquet"))
        [bad] = [s for s in segments if pq.read_metadata(s).num_rows == 5]
        held = pq.read_table(bad, columns=["call_id"])["call_id"].to_pylist()
        _truncate(bad)
        build = case.build()
        [line] = [line for line in build.stderr.splitlines() if "is unreadable" in line] or ["(no line)"]
        made = {r["call_id"] for r in case.new_rows()}
        return Row(
            "truncated ledger segment: raw `pyarrow` traceback, every build dies",
            f"build exit {build.returncode} in {build.seconds:.0f} s; before any work it said "
            f"`{_clip(line.split(' (')[0], 110)} (...); moved to quarantine; {_clip(line.split('; ')[-1], 60)}`; "
            f"segment in `llm_calls/quarantine/`: {(case.lake.root / 'llm_calls' / 'quarantine' / bad.name).exists()}; "
            f"the build made {len(made)} calls, {len(made & set(held))} of them the {len(held)} it held",
            "named, recovered" if build.returncode == 0 and all(i in line for i in held[:5]) and made == set(held)
            else "open")

    def reader_holds_catalog(self) -> Row:
        case = self.case("reader")
        case.sql("select 1")  # creates the catalog, as a first `peerify sql` does
        holder = hold_catalog(case.lake.catalog_path, read_only=False)  # a notebook, catalog open for writing
        try:
            build = case.build()
        finally:
            holder.kill()
            holder.wait()
        [said] = [line for line in build.stderr.splitlines() if "catalog not refreshed" in line] or ["(nothing)"]
        after = case.sql("select count(*) as n from predictions")
        return Row(
            "another process holds `peerify.duckdb` during a build: the build fails at its first step",
            f"build exit {build.returncode} in {build.seconds:.0f} s; it said `{_clip(said, 110)}`; after the holder "
            f"let go, `peerify sql` exit {after.returncode}: {after.stdout.split()[-1:]} verifications",
            "recovered" if build.returncode == 0 and after.returncode == 0 else "open")

    def concurrent_builds(self) -> list[Row]:
        """Two builds started at once on one lake and a fresh Dagster home, 7 calls still to make."""
        case = self.case("concurrent", keep_calls=(self.total - 7,))
        started = [(start_peerify("build", "sample", env=case.env, logs=case.folder / f"build{i}"),
                    case.folder / f"build{i}") for i in range(2)]
        results = [finish(process, logs, timeout=1800) for process, logs in started]
        rows = case.new_rows()
        per_call = Counter(r["call_id"] for r in rows)
        waited = sum("waiting for the build of sample" in r.stderr for r in results)
        heads = alembic_heads(case.home)
        both_ok = [r.returncode for r in results] == [0, 0]
        return [
            Row("two builds at once on one lake: each makes the same LLM calls (paid twice)",
                f"exit codes {[r.returncode for r in results]}; {waited} waited for the other's per-venue lock; "
                f"{len(per_call)} calls made (7 were missing), each once: {set(per_call.values()) == {1}}, "
                f"all by {len({r['run_id'] for r in rows})} run",
                "recovered" if both_ok and len(per_call) == 7 and set(per_call.values()) == {1} else "open"),
            Row("two concurrent first builds on a fresh `DAGSTER_HOME`: two alembic heads, every build fails after",
                f"alembic heads per database: {json.dumps({db: len(h) for db, h in heads.items()})}",
                "recovered" if both_ok and heads and all(len(h) == 1 for h in heads.values()) else "open"),
        ]

    def sql_write_refused(self) -> Row:
        case = self.case("sql_write")
        reviews = case.lake.table_path("reviews", "sample")
        before = hashlib.sha256(reviews.read_bytes()).hexdigest()
        result = case.sql(f"copy (select 1 as x) to '{reviews.as_posix()}'")
        intact = hashlib.sha256(reviews.read_bytes()).hexdigest() == before
        return Row(
            "`peerify sql \"copy ... to '<lake>/reviews/sample.parquet'\"` replaces a partition",
            f"exit {result.returncode}: `{_clip(result.stderr.strip(), 120)}`; "
            f"partition unchanged: {intact}",
            "refused" if result.returncode == 2 and intact else "open")

    def configuration_errors(self) -> list[Row]:
        good = self.case("config_good", copy_lake=False)
        broken = self.case("config_yaml", copy_lake=False,
                           registry_text="venues:\n  sample:\n    seed: 1\n   source: snapshot\n")
        cases = [
            ("unknown profile (`PEERIFY_LLM_PROFILE=fast`)", good, {"PEERIFY_LLM_PROFILE": "fast"}),
            ("unknown role model (`PEERIFY_ROLE_VERIFIERS=gpt-9`)", good, {"PEERIFY_ROLE_VERIFIERS": "gpt-9"}),
            ("`venues.yaml` syntax error", broken, {}),
            ("`PEERIFY_LLM_CACHE_MODE=replay-only` on an empty ledger", good,
             {"PEERIFY_LLM_CACHE_MODE": "replay-only"}),
        ]
        rows = []
        for fault, case, extra in cases:
            result = peerify("build", "sample", env={**case.env, **extra})
            lines = result.stderr.strip().splitlines()
            written = [p for p in case.lake.root.rglob("*") if p.is_file()] if case.lake.root.exists() else []
            text = lines[-1] if lines else ""
            rows.append(Row(
                f"{fault}: a 16-65-line traceback, or work before failing",
                f"exit {result.returncode} after {result.seconds:.1f} s (Python start included), {len(lines)} line: "
                f"`{_clip(text, 150)}`; files written: {len(written)}",
                "refused" if result.returncode == 2 and len(lines) == 1 and not written else "open"))
        return rows

    def empty_venue(self) -> Row:
        snapshot = self._snapshot_copy("empty", lambda s: _keep_submissions(s, []))
        case = self.case("empty", copy_lake=False, snapshot=snapshot)
        build = case.build()
        errors = case.lake.read_table("ingest_errors", "sample")
        queries = case.lake.read_table("retrieval_queries", "sample").height
        checks = [line for line in build.stdout.splitlines() if line.startswith("asset checks:")]
        return Row(
            "empty submissions list: builds green, no error row, claims and `no_chunks` rows for absent papers",
            f"build exit {build.returncode}, `{_clip(checks[0] if checks else '', 100)}`; ingest_errors: "
            f"{errors.select('stage', 'reason').rows()}; retrieval_queries: {queries} rows",
            "named" if "paper_sample:has_submissions" in build.stdout and queries == 0 else "open")

    def claims_outside_venue(self) -> Row:
        kept = ["Rk7bWq2NzA", "Tc9vPe5XmS"]  # 14 answer-key claims and none
        case = self.case("outside", snapshot=self._snapshot_copy("outside", lambda s: _keep_submissions(s, kept)))
        build = case.build()
        queries = case.lake.read_table("retrieval_queries", "sample")
        runs = case.lake.read_table("retrieval_runs", "sample")
        verifications = case.lake.read_table("predictions", SAMPLE_PREDICTIONS).height
        no_chunks = runs.filter(pl.col("status") == "no_chunks").height
        return Row(
            "answer-key claims for papers not in the venue: 47 claims and 141 `no_chunks` rows anyway",
            f"venue of 2 papers (14 answer-key claims): build exit {build.returncode}; retrieval_queries "
            f"{queries.height} rows, all for {sorted(set(queries['paper_id']))}; `no_chunks` rows {no_chunks}; "
            f"predictions ({SAMPLE_PREDICTIONS}) {verifications} rows",
            "recovered" if build.returncode == 0 and set(queries["paper_id"]) <= set(kept) and no_chunks == 0
            else "open")

    def truncated_pdf(self) -> Row:
        def cut(snapshot: Path) -> None:
            _truncate(snapshot / "pdfs" / f"{TRUNCATED_PDF}.pdf")

        case = self.case("pdf", snapshot=self._snapshot_copy("pdf", cut))
        build = case.build()
        claims = case.lake.read_table("retrieval_queries", "sample").height
        verifications = case.lake.read_table("predictions", SAMPLE_PREDICTIONS)
        lost = verifications.filter((pl.col("status") == "no_manuscript")
                                    & (pl.col("claim_source") != "review")).height  # the answer key's 13
        errors = case.lake.read_table("ingest_errors", "sample").filter(pl.col("forum_id") == TRUNCATED_PDF)
        metrics = case.lake.read_table("retrieval_metrics", "sample").filter(
            (pl.col("retriever") == "hybrid") & (pl.col("relevance") == "strict"))
        counted = metrics.select("n_claims", "n_claims_scored", "n_claims_without_manuscript").rows()
        return Row(
            "truncated PDF: its 13 claims vanish from the predictions, recall goes up",
            f"build exit {build.returncode}; ingest_errors {errors.select('stage', 'reason').rows()}; "
            f"predictions {verifications.height} rows for {claims} claims, {lost} `no_manuscript`; "
            f"hybrid metrics (claims, scored, without manuscript): {counted}",
            "named" if build.returncode == 0 and verifications.height == claims and lost == 13 else "open")

    def wrong_shape_forum(self) -> Row:
        def break_forum(snapshot: Path) -> None:
            (snapshot / "forums" / "Zd2fGm8KrE.json").write_text("[]")

        case = self.case("forum_shape", snapshot=self._snapshot_copy("forum_shape", break_forum))
        build = case.build()
        errors = case.lake.read_table("ingest_errors", "sample").filter(pl.col("reason") == "malformed_forum_file")
        reviews = case.lake.read_table("reviews", "sample").height
        return Row(
            "valid JSON of the wrong shape in one forum file stops the venue (`AttributeError`)",
            f"build exit {build.returncode}; ingest_errors: `{_clip('; '.join(errors['message'].to_list()), 110)}`; "
            f"reviews of the other forums: {reviews}",
            "named" if build.returncode == 0 and errors.height == 1 and reviews > 0 else "open")

    def _snapshot_copy(self, name: str, change) -> Path:  # noqa: ANN001
        snapshot = self.work / f"snapshot_{name}"
        shutil.copytree(SAMPLE, snapshot)
        change(snapshot)
        return snapshot


def _truncate(path: Path) -> None:
    """What a crash or a full disk outside the atomic writes leaves: the first half of the file."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _keep_submissions(snapshot: Path, forum_ids: list[str]) -> None:
    path = snapshot / "submissions.json"
    record = json.loads(path.read_text())
    record["notes"] = [note for note in record["notes"] if note["id"] in forum_ids]
    path.write_text(json.dumps(record))


def _short_command(command: str) -> str:
    words = command.split()
    if words[:1] == ["tail"]:
        return "`tail -F` (compute-log mirror)"
    if any(word.endswith("watch_orphans.py") for word in words):
        return "Dagster's orphan watcher"
    return f"`{' '.join(words[:3])}`"


def _describe_counts(counts: Counter) -> str:
    return ", ".join(f"{n} x {what}" for what, n in counts.most_common())


def _clip(text: str, width: int) -> str:
    for folder, placeholder in PLACEHOLDERS.items():
        text = text.replace(folder, placeholder)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prebuilt", type=Path, help="a lake holding a complete build of the sample (make demo's)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its path is printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="peerify-faults-"))
    started = time.monotonic()
    try:
        table = FaultTable(work, args.prebuilt)
        rows: list[Row] = []
        for fault in (table.kill_mid_llm, table.stuck_pool_slot, table.truncated_chunks,
                      table.truncated_ledger_segment, table.reader_holds_catalog, table.concurrent_builds,
                      table.sql_write_refused, table.configuration_errors, table.empty_venue,
                      table.claims_outside_venue, table.truncated_pdf, table.wrong_shape_forum):
            fault_started = time.monotonic()
            try:
                produced = fault()
            except Exception as error:  # noqa: BLE001 - one fault's failure must not hide the other rows
                traceback.print_exc()
                produced = Row(fault.__name__, f"the benchmark itself failed: {_clip(repr(error), 200)}", "error")
            rows += produced if isinstance(produced, list) else [produced]
            print(f"{fault.__name__}: {time.monotonic() - fault_started:.0f} s", file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"work folder kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("| fault (issue 7) | what happened now | verdict |\n|---|---|---|")
    for row in rows:
        print(f"| {row.fault} | {row.happened} | {row.verdict} |")
    print(f"\n{len(rows)} rows in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
