"""`peerify verify` end to end (the command's own entry point, run in this process so that the Dagster definitions
load once) on a fresh lake with the repository's registry: one forum of the built sample venue (every call answered by
the sample's recording); the sample's PDF with one of its reviews (answered by the same recorded calls: the PDF keeps
its paper id, the review its sections) and a short review of our own (live calls to the offline SmolLM2 model), then
the same input again (0 calls made live); its estimate (no model called, nothing registered) before and after; a
budget that stops the verification after its first live call (a scripted loopback model), nothing half-written; and
every refused input (one line naming the file or forum and the reason, exit 2, nothing registered)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
import yaml

from peerify_dagster import cli
from peerify_dagster.domain import uploads
from peerify_dagster.domain.predictions import prediction_key
from peerify_dagster.domain.venues import load_registry
from tests.cli_support import fresh_home
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.test_claims_assets import scripted_answer
from tests.test_cost_control import priced_models, temporaries

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "venues.yaml"
SAMPLE = REPO / "peerify_dagster" / "sample_venue" / "snapshot"
SAMPLE_PDF = SAMPLE / "pdfs" / "Rk7bWq2NzA.pdf"
SAMPLE_REVIEW_ID = "NL9PqtHGLz"
# Short on purpose: its calls are made live, on 2 CPU cores.
SHORT_REVIEW = "Weaknesses: The paper does not report the variance of its results across runs.\n"
LABELS = "Supported|Partially Supported|Not Supported|Not Determined"
VERDICT_LINE = re.compile(rf"^   hybrid-top3 / smollm2-135m-verifier: ({LABELS}|unparsed answer)", re.MULTILINE)


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float


def verify(env: dict[str, str], *args: str) -> Run:
    """`peerify verify` in this process (the Dagster definitions load once for the module), in `env`'s lake."""
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
        for name, value in env.items():
            patch.setenv(name, value)
        code = cli.main(["verify", *args])
    return Run(code, out.getvalue(), err.getvalue(), time.monotonic() - started)


def venue_of(result: Run) -> str:
    return re.search(r"^venue: (upload-[0-9a-f]{12}) ", result.stdout, re.MULTILINE).group(1)


def made_live(result: Run) -> int:
    return int(re.search(r"LLM calls of this build: (\d+) made live", result.stderr).group(1))


def estimate_rows(result: Run) -> dict[tuple[str, str], dict[str, str]]:
    """The rows of `--estimate`'s table by (stage, role), each by column name (columns are 2+ spaces apart)."""
    lines = result.stdout.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("stage "))
    header = re.split(r"\s{2,}", lines[start].strip())
    rows = [dict(zip(header, re.split(r"\s{2,}", line.strip()))) for line in lines[start + 1:] if line.strip()]
    return {(row["stage"], row["role"]): row for row in rows[:next(i for i, r in enumerate(rows)
                                                                    if r["stage"].startswith("total:"))]}


def bare_env(folder: Path, **extra: str) -> dict[str, str]:
    return {"PEERIFY_LAKE": str(folder / "lake"), "PEERIFY_VENUES": str(REGISTRY),
            "DAGSTER_HOME": str(fresh_home(folder / "home")), **extra}


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("verify")
    review = next(note for note in json.loads((SAMPLE / "forums" / "Rk7bWq2NzA.json").read_text())["notes"]
                  if note["id"] == SAMPLE_REVIEW_ID)
    (folder / "sample_review.json").write_text(json.dumps(review))
    (folder / "short_review.txt").write_text(SHORT_REVIEW)
    registry_sha = hashlib.sha256(REGISTRY.read_bytes()).hexdigest()
    env = {"PEERIFY_LAKE": str(folder / "lake"), "PEERIFY_VENUES": str(REGISTRY),
           "DAGSTER_HOME": str(fresh_home(folder / "home"))}
    yield {"folder": folder, "root": folder / "lake", "env": env}
    assert hashlib.sha256(REGISTRY.read_bytes()).hexdigest() == registry_sha  # the tracked registry is never written


@pytest.fixture(scope="module")
def forum_run(lake):
    return verify(lake["env"], "--venue", "sample", "--forum", "Rk7bWq2NzA")


@pytest.fixture(scope="module")
def upload_runs(lake, forum_run):
    """The sample's PDF with its review NL9PqtHGLz (JSON) and a short review (text), twice."""
    args = ("--pdf", str(SAMPLE_PDF), "--review", str(lake["folder"] / "sample_review.json"),
            "--review", str(lake["folder"] / "short_review.txt"))
    return verify(lake["env"], *args), verify(lake["env"], *args)


def test_a_forum_of_a_built_venue_is_verified_through_the_graph_from_its_recording(lake, forum_run):
    assert forum_run.code == 0, forum_run.stderr[-3000:]
    assert made_live(forum_run) == 0, forum_run.stderr[-2000:]
    venue = venue_of(forum_run)
    assert len(VERDICT_LINE.findall(forum_run.stdout)) >= 10  # every review claim of the forum has its verdict
    assert re.search(r"^      p\.\d \S.*, score 0\.\d{3}: ", forum_run.stdout, re.MULTILINE)  # evidence: page, section
    registered = yaml.safe_load((lake["root"] / "uploads" / "venues.yaml").read_text())["venues"]
    assert registered[venue]["source"] == "upload"
    assert registered[venue]["openreview_id"] == "PeerifySample.cc/2026/Workshop"
    predictions = pl.read_parquet(lake["root"] / "predictions" / f"{prediction_key(venue, 'hybrid-top3')}.parquet")
    assert predictions["call_id"].null_count() == 0 and set(predictions["claim_source"]) == {"review"}
    assert set(pl.read_parquet(lake["root"] / "chunks" / f"{venue}.parquet")["paper_id"]) == {"Rk7bWq2NzA"}
    page = (lake["root"] / "uploads" / venue / "result.html").read_text()
    assert f"result: {lake['root'] / 'uploads' / venue / 'result.html'}" in forum_run.stdout
    claim = predictions.join(pl.read_parquet(lake["root"] / "review_claims" / f"{venue}.parquet"), on="claim_id")
    assert claim["claim_text"][0].replace("'", "&#39;") in page and "page " in page
    # labellers, slices and metrics need a benchmark: not built for an upload
    assert not (lake["root"] / "claim_labels" / f"{venue}.parquet").exists()
    assert not (lake["root"] / "paper_claims" / f"{venue}.parquet").exists() or \
        pl.read_parquet(lake["root"] / "paper_claims" / f"{venue}.parquet").height == 0


def test_the_sample_pdf_with_one_of_its_reviews_and_a_short_one_ends_with_verdicts(lake, upload_runs):
    first, _ = upload_runs
    assert first.code == 0, first.stderr[-3000:]
    venue = venue_of(first)
    claims = pl.read_parquet(lake["root"] / "review_claims" / f"{venue}.parquet")
    assert set(claims["review_id"]) >= {SAMPLE_REVIEW_ID}  # the uploaded note keeps its id
    assert set(pl.read_parquet(lake["root"] / "chunks" / f"{venue}.parquet")["paper_id"]) == {"Rk7bWq2NzA"}
    assert len(VERDICT_LINE.findall(first.stdout)) == claims.height
    live = made_live(first)
    # Only the short review's calls are live (an extraction, then a tagging and a verdict per claim): the sample
    # review's are answered by its recorded calls, which the same PDF, sections and claims make again.
    short_claims = claims.filter(pl.col("review_id") != SAMPLE_REVIEW_ID).height
    assert 1 <= live <= 1 + 2 * short_claims, first.stderr[-2000:]
    print(f"\nverify with {live} live calls: {first.seconds:.1f} s")


def test_the_same_input_again_is_the_same_venue_answered_from_the_ledger_and_faster(upload_runs):
    first, second = upload_runs
    assert second.code == 0, second.stderr[-3000:]
    assert venue_of(second) == venue_of(first)
    assert made_live(second) == 0
    assert VERDICT_LINE.findall(second.stdout) == VERDICT_LINE.findall(first.stdout)
    assert second.seconds < first.seconds, (first.seconds, second.seconds)
    print(f"\nverify answered from the ledger: {second.seconds:.1f} s (first {first.seconds:.1f} s)")


@pytest.fixture
def bare_lake(tmp_path, monkeypatch, capsys):
    """`peerify verify` in this process on an empty lake: refusals happen before Dagster runs anything."""
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("PEERIFY_VENUES", str(REGISTRY))
    monkeypatch.setenv("DAGSTER_HOME", str(fresh_home(tmp_path / "home")))

    def verify(*args: str) -> tuple[int, str]:
        code = cli.main(["verify", *args])
        return code, capsys.readouterr().err.strip()

    return tmp_path, verify


def test_inputs_that_cannot_be_verified_are_refused_naming_the_file_and_the_reason(bare_lake):
    folder, verify = bare_lake
    (folder / "paper.txt").write_text("not a PDF at all\n")
    (folder / "empty.txt").write_text("  \n")
    (folder / "broken.json").write_text('{"content": {"summary": ')
    (folder / "review.txt").write_text(SHORT_REVIEW)
    (folder / "long.txt").write_text("The results are weak. " * 10_000)  # 220,000 characters: over the extractor's
    (folder / "nul.txt").write_bytes(b"\x00" * 64)
    pdf, review, long = str(SAMPLE_PDF), str(folder / "review.txt"), str(folder / "long.txt")
    refusals = [
        (("--pdf", str(folder / "paper.txt"), "--review", review), f"{folder / 'paper.txt'}: bytes are not a PDF"),
        (("--pdf", pdf, "--review", str(folder / "empty.txt")), f"{folder / 'empty.txt'}: the review is empty"),
        (("--pdf", pdf, "--review", str(folder / "broken.json")), f"{folder / 'broken.json'}: unreadable JSON (line 1"),
        (("--pdf", pdf, "--review", str(folder / "nul.txt")), f"{folder / 'nul.txt'}: the review is empty (no letter"),
        (("--pdf", pdf, "--review", review, "--review", long), f"{long}: section 'review' is about 73,336 tokens "
         "(219,999 characters), over the limit of 7,483 tokens (about 22,449 characters) per review section for "
         "extractor smollm2-135m-extractor"),
        (("--pdf", pdf, "--review", long, "--estimate"), f"{long}: section 'review' is about 73,336 tokens"),
        (("--pdf", pdf, "--review", str(folder / "missing.txt")), f"{folder / 'missing.txt'}: cannot read the review"),
        (("--pdf", pdf, "--review", review, "--max-pdf-mb", "0.005"),
         f"{pdf}: {uploads.size_text(SAMPLE_PDF.stat().st_size)} is over the upload limit of 5 KB"),
        (("--venue", "sample", "--forum", "NoSuchForm1"), "forum 'NoSuchForm1': unknown in venue 'sample'"),
        (("--venue", "sample", "--forum", "../../etc/passwd"), "forum '../../etc/passwd': not an OpenReview forum"),
        (("--venue", "sample", "--forum", "Tc9vPe5XmS"), "forum 'Tc9vPe5XmS' of venue 'sample': no PDF in its"),
        (("--venue", "Nope.cc/2026", "--forum", "Rk7bWq2NzA"), "venue 'Nope.cc/2026': not registered"),
        (("--pdf", pdf, "--review", review, "--configuration", "no-such"), "no configuration 'no-such'"),
        (("--pdf", pdf), "verify needs --pdf PAPER.pdf --review REVIEW"),
        (("--venue", "sample", "--forum", "Rk7bWq2NzA", "--review", review), "not both"),
    ]
    for args, message in refusals:
        code, said = verify(*args)
        assert (code, message in said, said.count("\n")) == (2, True, 0), (args, said)
    assert not (folder / "lake" / "uploads").exists()  # nothing registered, nothing written


VERIFY_STAGES = {("review_claims", "extractor"), ("claim_types", "fact_tagger"),
                 ("predictions:hybrid-top3", "verifiers")}


def test_the_estimate_counts_the_calls_of_a_verify_without_calling_a_model_or_registering(tmp_path):
    (tmp_path / "review.txt").write_text(SHORT_REVIEW)
    env = bare_env(tmp_path)
    run = verify(env, "--pdf", str(SAMPLE_PDF), "--review", str(tmp_path / "review.txt"), "--estimate")
    assert run.code == 0, run.stderr
    rows = estimate_rows(run)
    assert set(rows) == VERIFY_STAGES  # no labellers, no paper claims: an upload is no benchmark
    assert rows[("review_claims", "extractor")]["calls"] == "1"  # the review's one section
    assert {row["counted from"] for row in rows.values()} == {"upload"}
    low, high = (int(n) for n in rows[("predictions:hybrid-top3", "verifiers")]["calls"].split("-"))
    assert 1 <= low < high  # claims expected at the release's per-review averages
    assert run.stdout.startswith("Estimate for upload-") and "no model was called" in run.stdout
    assert not (tmp_path / "lake").exists()  # nothing registered, no ledger opened for writing
    assert sorted(path.name for path in (tmp_path / "home").iterdir()) == ["dagster.yaml"]  # no run


def test_the_estimate_of_a_verified_upload_is_counted_from_the_lake_all_in_the_ledger(lake, upload_runs):
    args = ("--pdf", str(SAMPLE_PDF), "--review", str(lake["folder"] / "sample_review.json"),
            "--review", str(lake["folder"] / "short_review.txt"), "--estimate")
    registry = (lake["root"] / "uploads" / "venues.yaml").read_bytes()
    run = verify(lake["env"], *args)
    assert run.code == 0, run.stderr
    assert run.stdout.startswith(f"Estimate for {venue_of(upload_runs[0])}:")
    rows = estimate_rows(run)
    assert set(rows) == VERIFY_STAGES
    assert {(row["calls"], row["counted from"]) for row in rows.values()} == {("0", "lake")}
    assert all(int(row["ledger_hits"]) > 0 for row in rows.values())
    assert (lake["root"] / "uploads" / "venues.yaml").read_bytes() == registry


def test_a_budget_stops_the_verify_after_its_first_live_call_and_leaves_nothing_half_written(tmp_path):
    """`--max-tokens 1`: the extraction's one call (a scripted loopback model) spends it; the fact tagger's first
    call is refused, no further run starts, and the upload stays registered whole, for a later verify to go on."""
    (tmp_path / "review.txt").write_text(SHORT_REVIEW)
    with ScriptedOpenAIServer(responder=scripted_answer) as server:
        env = bare_env(tmp_path, PEERIFY_MODELS_FILE=str(priced_models(tmp_path, server.base_url)),
                       LOOPBACK_API_KEY="k")
        run = verify(env, "--pdf", str(SAMPLE_PDF), "--review", str(tmp_path / "review.txt"), "--max-tokens", "1")
        made = server.request_count
    assert run.code == 1, run.stderr[-3000:]
    venue = re.search(r"verify of (upload-[0-9a-f]{12}) stopped: LLM budget spent after run", run.stderr).group(1)
    assert "tokens reached the build budget of 1 tokens" in run.stderr
    assert made == 1 and "LLM calls of this build: 1 made live" in run.stderr and "(budget 1 tokens)" in run.stderr
    root = tmp_path / "lake"
    assert (root / "review_claims" / f"{venue}.parquet").exists()  # the step before the budget ran out, whole
    assert not (root / "claim_types" / f"{venue}.parquet").exists()
    assert not list(root.glob(f"predictions/*|{venue}.parquet"))
    assert not list((root / "uploads" / venue).glob("result.*"))  # no result page, no result data
    assert not temporaries(root)
    assert load_registry(REGISTRY, root / "uploads" / "venues.yaml")[venue].source == "upload"
    assert run.stdout == ""  # no result printed
