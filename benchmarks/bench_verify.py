"""`peerify verify` on one sample paper and one of its reviews: time to the first verdict and to all verdicts, first
with every call made live (the offline profile: SmolLM2 on this machine's CPU; a fresh lake without the sample's
recording), then the same input again, every call answered from the ledger: in the same process, and by the
`peerify verify` command (a new process, which loads Dagster, Docling and the embedding model again).

Runs `cli.verification.run_verification` (what `peerify verify` and the web app's worker run) in this process on a
temporary lake and Dagster home, with a thread watching the ledger: the first verdict is the first verifier call the
run records (live), or, when the ledger answers them all, the end of the predictions run (its verdicts are written
together). "To the verifier" is the time before the first predictions run starts (registering, parsing, claims,
retrieval). The command's row reads its progress lines' times from its output.

    .venv/bin/python benchmarks/bench_verify.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SAMPLE = REPO / "peerify_dagster" / "sample_venue" / "snapshot"
FORUM, REVIEW = "Rk7bWq2NzA", "NL9PqtHGLz"


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


def verify_once(request, label: str) -> dict:  # noqa: ANN001 - a VerificationRequest
    from peerify_dagster import paths
    from peerify_dagster.cli.verification import run_verification
    from peerify_dagster.domain.uploads import PREDICTING, WRITING

    marks: dict[str, float] = {}
    started, since = time.monotonic(), datetime.now(timezone.utc)

    def progress(phase: str, message: str, percent: float) -> None:
        marks.setdefault(phase.split(" ")[0] if phase.startswith(PREDICTING) else phase, time.monotonic() - started)
        print(f"  [{time.monotonic() - started:6.1f} s] {message}", flush=True)

    with LedgerWatch(Path(paths.lake_root()), since) as watch:
        outcome = run_verification(request, progress)
    assert outcome.succeeded, outcome.failure
    first_live = (watch.first - since).total_seconds() if watch.first else None
    all_verdicts = marks[WRITING]
    return {"run": label, "usage": outcome.usage, "claims": len(outcome.summary.claims),
            "to_verifier": marks[PREDICTING], "first": first_live if first_live is not None else all_verdicts,
            "all": all_verdicts, "total": outcome.seconds}


def verify_command(pdf: Path, review: Path) -> dict:
    """`peerify verify --pdf --review` in a new process, its phases timed from its progress lines."""
    import subprocess

    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "peerify_dagster.cli", "verify", "--pdf", str(pdf), "--review",
                                str(review)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    marks, usage = {}, ""
    for line in process.stderr:
        if line.startswith("[") and "%]" in line:
            marks.setdefault(line.split("%]", 1)[1].strip().split(" ")[0], time.monotonic() - started)
        if line.startswith("LLM calls of this build"):
            usage = line.strip()
    output = process.stdout.read()
    assert process.wait() == 0, output[-2000:]
    total = time.monotonic() - started
    return {"run": "again, `peerify verify` (a new process)", "usage": usage, "claims": output.count("\n   review "),
            "to_verifier": marks["verifying"], "first": marks["reading"], "all": marks["reading"], "total": total}


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory(prefix="peerify-bench-verify-") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
        os.environ.update(PEERIFY_LAKE=str(Path(scratch) / "lake"), PEERIFY_VENUES=str(REPO / "venues.yaml"),
                          DAGSTER_HOME=str(home))
        from peerify_dagster.domain import uploads
        from peerify_dagster.domain.uploads import VerificationRequest

        note = next(n for n in json.loads((SAMPLE / "forums" / f"{FORUM}.json").read_text())["notes"]
                    if n["id"] == REVIEW)
        reviews, _ = uploads.read_reviews(f"{REVIEW}.json", json.dumps(note).encode())
        request = VerificationRequest(upload=uploads.Upload(
            pdf=(SAMPLE / "pdfs" / f"{FORUM}.pdf").read_bytes(), pdf_name=f"{FORUM}.pdf", reviews=tuple(reviews)))
        rows = [verify_once(request, "live (offline model)"), verify_once(request, "again, same process")]
        review_file = Path(scratch) / f"{REVIEW}.json"
        review_file.write_text(json.dumps(note))
        rows.append(verify_command(SAMPLE / "pdfs" / f"{FORUM}.pdf", review_file))
    print("\n| run | claims | LLM calls | to the verifier (s) | first verdict (s) | all verdicts (s) | "
          "with the result page (s) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        calls = row["usage"].removeprefix("LLM calls of this build: ").split(";")[0]
        print(f"| {row['run']} | {row['claims']} | {calls} | {row['to_verifier']:.1f} | {row['first']:.1f} | "
              f"{row['all']:.1f} | {row['total']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
