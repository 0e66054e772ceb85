"""`peerify verify` on one paper and one of the sample's reviews, first run and second run: time to the first verdict
and to all verdicts, first with every call made live (the offline profile: SmolLM2 on this machine's CPU; a fresh lake
without the sample's recording), then the same input again: in the same process, by the `peerify verify` command (a
new process) and by the web app's verify job (its worker's child process), each answered from the lake (the input was
verified before from the same code, models and settings); and once more by the command with that record removed, so
every step runs again and the manuscript comes from the parse cache.

Runs `cli.verification.run_verification` (what `peerify verify` and the web app's worker run) in this process on a
temporary lake and Dagster home, with a thread watching the ledger: the first verdict is the first verifier call the
run records (live), or, when the ledger answers them all, the end of the predictions run (its verdicts are written
together). "To the verifier" is the time before the first predictions run starts (registering, parsing, claims,
retrieval); a result read back has neither. The command's rows read its progress lines' times from its output; the web
job's row is the time from submitting the job to its being done.

    .venv/bin/python benchmarks/bench_verify.py                       # the sample's paper Rk7bWq2NzA (4 pages)
    .venv/bin/python benchmarks/bench_verify.py --pdf paper.pdf       # another paper, with the same review
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SAMPLE = REPO / "peerify_dagster" / "sample_venue" / "snapshot"
FORUM, REVIEW = "Rk7bWq2NzA", "NL9PqtHGLz"
PROGRESS_PERCENT = "%]"  # a progress line of `peerify verify`: `[ 55%] retrieval: ...`


class LedgerWatch:
    """The first `verifiers` call the ledger records after `since` (a thread reading its segments)."""

    def __init__(self, lake: Path, since: datetime):
        self.lake, self.since = lake, since
        self.first: datetime | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> LedgerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        import pyarrow.parquet as pq

        while self.first is None and not self._stop.wait(0.2):
            for segment in sorted((self.lake / "llm_calls").glob("*.parquet")):
                try:
                    rows = pq.read_table(segment, columns=["role", "created_at"]).to_pylist()
                except (OSError, ValueError):
                    continue  # being compacted or written: the next look reads it
                times = [row["created_at"] for row in rows if row["role"] == "verifiers"
                         and row["created_at"] >= self.since]
                if times and (self.first is None or min(times) < self.first):
                    self.first = min(times)


def row(label: str, usage: str, claims: int, total: float, marks: dict[str, float],
        first_live: float | None = None) -> dict:
    """A table row; `marks`: when each phase began (none for a result read back)."""
    from peerify_dagster.domain.uploads import PREDICTING, WRITING

    all_verdicts = marks.get(WRITING, total)
    return {"run": label, "usage": usage, "claims": claims, "to_verifier": marks.get(PREDICTING),
            "first": first_live if first_live is not None else all_verdicts, "all": all_verdicts, "total": total}


def verify_once(request, label: str) -> dict:  # noqa: ANN001 - a VerificationRequest
    from peerify_dagster import paths
    from peerify_dagster.cli.verification import run_verification
    from peerify_dagster.domain.uploads import PREDICTING

    marks: dict[str, float] = {}
    started, since = time.monotonic(), datetime.now(timezone.utc)

    def progress(phase: str, message: str, percent: float) -> None:
        marks.setdefault(phase.split(" ")[0] if phase.startswith(PREDICTING) else phase, time.monotonic() - started)
        print(f"  [{time.monotonic() - started:6.1f} s] {message}", flush=True)

    with LedgerWatch(Path(paths.lake_root()), since) as watch:
        outcome = run_verification(request, progress)
    assert outcome.succeeded, outcome.failure
    first_live = (watch.first - since).total_seconds() if watch.first else None
    return row(label, outcome.usage, len(outcome.summary.claims), outcome.seconds, marks, first_live)


def verify_command(pdf: Path, review: Path, label: str) -> dict:
    """`peerify verify --pdf --review` in a new process, its phases timed from its progress lines."""
    from peerify_dagster.domain.uploads import PHASE_START, PREDICTING

    phase_by_percent = {f"{percent:3.0f}": phase for phase, percent in PHASE_START.items()}
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "peerify_dagster.cli", "verify", "--pdf", str(pdf), "--review",
                                str(review)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    marks, usage = {}, ""
    for line in process.stderr:
        if line.startswith("[") and PROGRESS_PERCENT in line:
            percent, message = line[1:].split(PROGRESS_PERCENT, 1)
            phase = PREDICTING if message.strip().startswith("verifying the claims") else phase_by_percent.get(percent)
            if phase is not None:
                marks.setdefault(phase, time.monotonic() - started)
        if line.startswith("LLM calls of this build"):
            usage = line.strip()
    output = process.stdout.read()
    assert process.wait() == 0, output[-2000:]
    return row(label, usage, output.count("\n   review "), time.monotonic() - started, marks)


def verify_web_job(request, label: str) -> dict:  # noqa: ANN001 - a VerificationRequest
    """The web app's verify job: submitted to the job store, run by the server's worker in its child process."""
    from peerify_dagster import paths
    from peerify_dagster.verification_jobs import DONE, FAILED, JobStore, Worker

    store = JobStore(paths.lake_root())
    worker = Worker(store, paths.lake_root(), poll_s=0.1)
    worker.start()
    started = time.monotonic()
    job = store.submit(request)
    worker.wake()
    while (done := store.get(job["id"]))["status"] not in (DONE, FAILED):
        time.sleep(0.05)
    total = time.monotonic() - started
    worker.stop()
    assert done["status"] == DONE, done["error"]
    return row(label, done["usage"], done["claims"], total, {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdf", type=Path, default=SAMPLE / "pdfs" / f"{FORUM}.pdf",
                        help="the paper (default: the sample's Rk7bWq2NzA); the review is the sample's NL9PqtHGLz")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peerify-bench-verify-") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
        os.environ.update(PEERIFY_LAKE=str(Path(scratch) / "lake"), PEERIFY_VENUES=str(REPO / "venues.yaml"),
                          DAGSTER_HOME=str(home))
        from peerify_dagster.cli.verification import Verified, prepare
        from peerify_dagster.domain import uploads
        from peerify_dagster.domain.uploads import VerificationRequest

        note = next(n for n in json.loads((SAMPLE / "forums" / f"{FORUM}.json").read_text())["notes"]
                    if n["id"] == REVIEW)
        reviews, _ = uploads.read_reviews(f"{REVIEW}.json", json.dumps(note).encode())
        request = VerificationRequest(upload=uploads.Upload(
            pdf=options.pdf.read_bytes(), pdf_name=options.pdf.name, reviews=tuple(reviews)))
        review_file = Path(scratch) / f"{REVIEW}.json"
        review_file.write_text(json.dumps(note))
        rows = [verify_once(request, "live (offline model)"), verify_once(request, "again, same process"),
                verify_command(options.pdf, review_file, "again, `peerify verify` (a new process)"),
                verify_web_job(request, "again, the web app's verify job (a new process)")]
        Verified.forget(prepare(request).venue.key)
        rows.append(verify_command(options.pdf, review_file, "rebuilt, `peerify verify` (record removed; the "
                                                             "manuscript from the parse cache)"))
    print(f"\n{options.pdf.name}, review {REVIEW}\n")
    print("| run | claims | LLM calls | to the verifier (s) | first verdict (s) | all verdicts (s) | "
          "with the result page (s) |")
    print("|---|---|---|---|---|---|---|")
    for result in rows:
        calls = result["usage"].removeprefix("LLM calls of this build: ").split(";")[0]
        to_verifier = "-" if result["to_verifier"] is None else f"{result['to_verifier']:.1f}"
        print(f"| {result['run']} | {result['claims']} | {calls} | {to_verifier} | {result['first']:.1f} | "
              f"{result['all']:.1f} | {result['total']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
