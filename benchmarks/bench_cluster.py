"""Scale-out on Celery: the heavy part of a synthetic venue's graph (its PDFs parsed, chunked and embedded, shard by
shard) built on the cluster profile in four configurations, each worker one process:

- `one-core`: one worker with one core of its own (`peerify worker --cpus 1`);
- `two-own-cores`: two workers with one core of their own each (`--cpus 1` each): what a second machine adds;
- `one-whole`: one worker left to the default (alone on the machine, it has every core);
- `two-shared`: two workers left to the default on the same machine (they split its cores between them).

`two-own-cores` is compared with `one-core` (the goal: 1.8 times as fast), `two-shared` with `one-whole` (a second
worker on the same machine must not make it slower).

The cluster is real and started here: Postgres (Dagster's storage), Redis (the Celery broker), `peerify worker`
processes; the lake is a folder. Each run gets a fresh Dagster home, Postgres database, Redis database and lake (so
an empty embedding cache): the second run reuses none of the first's work. The run is orchestrated as `peerify build`
orchestrates one (cli/home.py `run_job`, the steps sent to the workers), in a child process of its own.

The venue clones the sample venue's forums (tests/fakes/synthetic_venue.py), and every clone's PDF is
re-rendered from its sample manuscript with a sentence naming the clone added to each paragraph, so that the
chunk texts differ between clones: the embedding cache (keyed by text hash) would otherwise embed one copy of each
and the benchmark would measure the cache, not the embedder.

Measured per run: wall-clock of the run (orchestrator's `run_job`, submission to the last step), the parse phase
(first parse step's start to the last one's end) and the embedding phase likewise, pages parsed (the `pages` of
`parsed_manuscripts`) and passages embedded (the chunk texts the embedder computed: the rows its cache gained; a
text repeated in two shards that run at once is embedded in both). Rates are per phase. The orchestrator, Redis and
Postgres run beside the workers on the same machine, on no core of their own. Progress goes to stderr, the Markdown
table to stdout. Everything started is stopped by its PID at the end, also on Ctrl-C or SIGTERM.

    nice -n 10 .venv/bin/python benchmarks/bench_cluster.py --papers 500
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

VENUE = "synthetic"
ROOTS = ("parsed_manuscripts", "chunks", "chunk_embeddings")  # and what they need
PHASES = {"parse": "parse_shard", "embed": "embed_shard"}  # phase -> the op its steps run
WORKER_READY_TIMEOUT_S = 180


@dataclasses.dataclass(frozen=True)
class Configuration:
    name: str
    workers: int
    cpus: int | None  # `peerify worker --cpus` of each worker; None: the default share
    baseline: str | None  # the configuration its speed-up is measured against


CONFIGURATIONS = {config.name: config for config in (
    Configuration("one-core", 1, 1, None), Configuration("two-own-cores", 2, 1, "one-core"),
    Configuration("one-whole", 1, None, None), Configuration("two-shared", 2, None, "one-whole"))}
RUN_TIMEOUT_S = 6 * 3600
PROGRESS_EVERY_S = 15

# The run's orchestrating process (argv: the asset keys as JSON). Prints the run id, success and seconds.
ORCHESTRATOR = """
import json, sys, time
import dagster as dg
from peerify_dagster.cli.home import open_home, run_job
from peerify_dagster.partitions import add_venue_partitions

instance = open_home("the cluster benchmark's orchestrator", capture_step_output=False)
add_venue_partitions(instance, sys.argv[2], [])
started = time.monotonic()
keys = [dg.AssetKey(name) for name in json.loads(sys.argv[1])]
result = run_job(instance, "build_venue", sys.argv[2], asset_selection=keys)
print(json.dumps({"run_id": result.run_id, "success": result.success, "seconds": time.monotonic() - started}))
"""


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- the venue -------------------------------------------------------------------------------------------------------
def distinct_pdfs(snapshot: Path) -> int:
    """Re-render every cloned PDF of `snapshot` from its sample manuscript, each paragraph ending in a sentence that
    names the clone; returns the number of PDFs."""
    from peerify_dagster.sample_venue.markup import Paragraph, load_manuscript
    from peerify_dagster.sample_venue.render import render_manuscript
    from tests.fakes.synthetic_venue import SAMPLE

    manuscripts = SAMPLE.parent / "manuscripts"
    # A clone's PDF is a byte copy of one sample PDF: its bytes name its manuscript.
    sources = {hashlib.sha256(pdf.read_bytes()).hexdigest(): load_manuscript(manuscripts / f"{pdf.stem}.md")
               for pdf in (SAMPLE / "pdfs").glob("*.pdf")}
    pdfs = sorted((snapshot / "pdfs").glob("*.pdf"))
    for done, pdf in enumerate(pdfs, start=1):
        manuscript = sources[hashlib.sha256(pdf.read_bytes()).hexdigest()]
        marker = f" This is synthetic copy {pdf.stem}."
        blocks = tuple(dataclasses.replace(block, text=block.text + marker) if isinstance(block, Paragraph) else block
                       for block in manuscript.blocks)
        clone = dataclasses.replace(manuscript, abstract=manuscript.abstract + marker, blocks=blocks)
        pdf.write_bytes(render_manuscript(clone, pdf.stem).pdf_bytes)
        if done % 200 == 0:
            say(f"rendered {done}/{len(pdfs)} distinct PDFs")
    return len(pdfs)


def make_venue(folder: Path, papers: int, shards: int) -> Path:
    """The synthetic venue's snapshot and its one-venue registry (every submission, `shards` shards)."""
    from tests.fakes.cli import write_registry
    from tests.fakes.synthetic_venue import synthetic_venue

    synthetic_venue(folder / "snapshot", papers)
    pdfs = distinct_pdfs(folder / "snapshot")
    say(f"venue: {papers} papers, {pdfs} PDFs, {shards} shards")
    return write_registry(folder, VENUE, source="snapshot", snapshot=str(folder / "snapshot"), seed=1,
                          sample_size=None, shards=shards)


def selected_assets() -> list[str]:
    import dagster as dg

    from peerify_dagster.definitions import defs

    selection = dg.AssetSelection.assets(*ROOTS).upstream().required_multi_asset_neighbors()
    return sorted(key.to_user_string() for key in selection.resolve(defs.resolve_asset_graph()))


# -- processes -------------------------------------------------------------------------------------------------------
def wait_until(what: str, done, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


@dataclasses.dataclass
class Run:
    """One run's cluster: its Dagster home, lake, Postgres database, Redis database and workers."""

    root: Path
    env: dict[str, str]
    postgres_url: str
    workers: list[subprocess.Popen] = dataclasses.field(default_factory=list)

    def instance(self):
        import dagster as dg
        from dagster._core.instance.ref import InstanceRef

        return dg.DagsterInstance.from_ref(InstanceRef.from_dir(
            str(self.root / "home"), overrides={"storage": {"postgres": {"postgres_url": self.postgres_url}}}))


def start_cluster(run: Run, config: Configuration) -> None:
    from tests.fakes.cli import peerify, start_peerify

    names = [f"bench-w{n}" for n in range(1, config.workers + 1)]
    cpus = ["--cpus", str(config.cpus)] if config.cpus else []
    for name in names:
        run.workers.append(start_peerify("worker", "--name", name, "--concurrency", "1", *cpus, env=run.env,
                                         logs=run.root / name))
    initialised = peerify("cluster", "init", str(run.root / "home"), env=run.env, timeout=300)
    if initialised.returncode != 0:
        raise SystemExit(f"`peerify cluster init` failed:\n{initialised.stderr[-3000:]}")
    for name, worker in zip(names, run.workers):
        log = run.root / f"{name}.err"
        wait_until(f"worker {name}", lambda: " ready." in log.read_text() or worker.poll() is not None,
                   WORKER_READY_TIMEOUT_S)
        if worker.poll() is not None:
            raise SystemExit(f"worker {name} exited:\n{log.read_text()[-3000:]}")
    say(f"{config.name}: {config.workers} worker(s) ready")


# -- measuring -------------------------------------------------------------------------------------------------------
def step_spans(instance, run_id: str) -> dict[str, tuple[float, float]]:
    """step key -> (start, end) timestamps of the run's finished steps."""
    import dagster as dg

    starts, spans = {}, {}
    for record in instance.all_logs(run_id, of_type={dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS,
                                                     dg.DagsterEventType.STEP_FAILURE}):
        if record.dagster_event.event_type == dg.DagsterEventType.STEP_START:
            starts[record.step_key] = record.timestamp
        elif record.step_key in starts:
            spans[record.step_key] = (starts[record.step_key], record.timestamp)
    return spans


def op_of(step_key: str) -> str:
    """The op a step runs: `parsed_manuscripts.parse_shard[shard_0003]` -> `parse_shard`."""
    return step_key.split("[", 1)[0].rsplit(".", 1)[-1]


def report_progress(instance, started: float, config: str) -> None:
    runs = instance.get_runs(limit=1)
    if not runs:
        return
    spans = step_spans(instance, runs[0].run_id)
    done = {phase: sum(1 for key in spans if op_of(key) == op) for phase, op in PHASES.items()}
    say(f"{config}, {time.monotonic() - started:.0f} s: {len(spans)} steps done "
        f"({', '.join(f'{phase} shards {n}' for phase, n in done.items())})")


def measure(folder: Path, registry: Path, config: Configuration, database: int, redis, postgres,
            assets: list[str]) -> dict:
    """Build the selection on a fresh cluster of `config`'s workers; the run's figures."""
    from tests.fakes.cli import cli_env, stop_process

    root = folder / config.name
    root.mkdir()
    postgres_url = postgres.create_database(f"bench_{config.name.replace('-', '_')}")
    # The workers of this configuration count each other only (a registry of their own).
    env = cli_env(root / "lake", registry, root / "home", PEERIFY_EXECUTOR="celery",
                  PEERIFY_REDIS_URL=redis.url_for(database), PEERIFY_POSTGRES_URL=postgres_url,
                  PEERIFY_WORKER_REGISTRY=str(root / "workers"))
    run = Run(root, env, postgres_url)
    orchestrator = None
    try:
        start_cluster(run, config)
        instance = run.instance()
        started = time.monotonic()
        with open(root / "orchestrator.err", "w") as err:
            orchestrator = subprocess.Popen([sys.executable, "-c", ORCHESTRATOR, json.dumps(assets), VENUE], env=env,
                                            cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
            reported = started
            while orchestrator.poll() is None:
                if time.monotonic() - started > RUN_TIMEOUT_S:
                    raise SystemExit(f"the {config.name} run ran past {RUN_TIMEOUT_S} s")
                if time.monotonic() - reported > PROGRESS_EVERY_S:
                    report_progress(instance, started, config.name)
                    reported = time.monotonic()
                time.sleep(1)
        lines = orchestrator.stdout.read().strip().splitlines()
        log_tail = (root / "orchestrator.err").read_text()[-4000:]
        if orchestrator.returncode != 0 or not lines:
            raise SystemExit(f"the {config.name} orchestrator failed:\n{log_tail}")
        outcome = json.loads(lines[-1])
        if not outcome["success"]:
            raise SystemExit(f"the {config.name} run {outcome['run_id']} failed:\n{log_tail}")
        figures = {"config": config.name, "workers": config.workers, "wall_s": outcome["seconds"],
                   **counts(Path(env["PEERIFY_LAKE"])), **phase_seconds(step_spans(instance, outcome["run_id"]))}
        instance.dispose()
        say(f"{config.name}: {figures['wall_s']:.1f} s, {figures['pages']} pages, "
            f"{figures['embedded']} passages embedded")
        return figures
    finally:
        if orchestrator is not None:
            stop_process(orchestrator, grace_s=10)
        for worker in run.workers:
            stop_process(worker)


def counts(lake_root: Path) -> dict:
    """Pages of the parsed papers, chunks, and the chunk texts the embedder computed (the rows of the run's embedding
    cache, which started empty)."""
    import pyarrow.parquet as pq

    from peerify_dagster.resources.lake import Lake

    lake = Lake(lake_root)
    parsed = lake.read_table("parsed_manuscripts", VENUE)
    embedded = sum(pq.read_metadata(part).num_rows for part in (lake_root / "embedding_cache").rglob("part-*.parquet"))
    return {"papers_parsed": parsed.height, "pages": int(parsed["pages"].sum() or 0),
            "chunks": lake.read_table("chunks", VENUE).height, "embedded": embedded}


def phase_seconds(spans: dict[str, tuple[float, float]]) -> dict:
    """Per phase, its steps and the seconds from its first step's start to its last step's end."""
    figures = {}
    for phase, op in PHASES.items():
        steps = [span for key, span in spans.items() if op_of(key) == op]
        figures[f"{phase}_steps"] = len(steps)
        figures[f"{phase}_s"] = max(end for _, end in steps) - min(start for start, _ in steps) if steps else None
    return figures


def table(papers: int, results: list[dict]) -> str:
    first = results[0]
    lines = [f"papers: {papers}; pages parsed: {first['pages']}; chunks: {first['chunks']}; shards: "
             f"{first['parse_steps']} parse, {first['embed_steps']} embed", "",
             "| configuration | workers | cores each | wall s | speed-up vs | parse s | pages/s | embed s "
             "| passages embedded | passages/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    by_name = {run["config"]: run for run in results}
    for run in results:
        config = CONFIGURATIONS[run["config"]]
        base = by_name.get(config.baseline)
        speed_up = f"{base['wall_s'] / run['wall_s']:.2f}x {config.baseline}" if base else "-"
        cores = str(config.cpus) if config.cpus else "all / split"
        lines.append(f"| {config.name} | {config.workers} | {cores} | {run['wall_s']:.1f} | {speed_up} "
                     f"| {run['parse_s']:.1f} | {run['pages'] / run['parse_s']:.1f} | {run['embed_s']:.1f} "
                     f"| {run['embedded']} | {run['embedded'] / run['embed_s']:.1f} |")
    return "\n".join(lines)


def run_all(papers: int, shards: int, configs: list[Configuration]) -> list[dict]:
    """The venue made once, then one measured run per configuration, on one Redis and one Postgres."""
    from peerify_dagster.resources.local_services import PostgresService, RedisService

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        folder = Path(tmp)
        registry = make_venue(folder, papers, shards)
        assets = selected_assets()
        say(f"selection: {', '.join(assets)}")
        with RedisService(folder / "redis") as redis, PostgresService(folder / "postgres") as postgres:
            return [measure(folder, registry, config, database, redis, postgres, assets)
                    for database, config in enumerate(configs, start=1)]


def interrupted(signum, frame) -> None:
    """SIGINT and SIGTERM end the benchmark; the `finally` blocks and context managers stop every process started."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--papers", type=int, default=2000, help="the synthetic venue's papers (default 2000)")
    parser.add_argument("--shards", type=int, default=8, help="shards of its parse and embed steps (default 8)")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGURATIONS), default=list(CONFIGURATIONS),
                        help="configurations to run, in order (default all four; a speed-up is printed when its "
                             "baseline ran too)")
    args = parser.parse_args()
    # Set for SIGINT too: a shell starting the benchmark in the background has it ignored.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupted)

    try:
        results = run_all(args.papers, args.shards, [CONFIGURATIONS[name] for name in args.configs])
    except KeyboardInterrupt as stopped:
        say(f"{stopped or 'interrupted'}: everything the benchmark started is stopped")
        raise SystemExit(130) from None
    print(table(args.papers, results))


if __name__ == "__main__":
    main()
