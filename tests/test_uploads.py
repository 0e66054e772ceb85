"""What `peerify verify` is given (domain/uploads.py): review and response files read into notes, PDFs checked, the
snapshot the crawler's readers take, the upload registry merged into the repository's, and the result's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peerify_dagster.domain import uploads
from peerify_dagster.domain.claims import section_label
from peerify_dagster.domain.forum_tables import build_tables
from peerify_dagster.domain.llm_calls import answer_justification
from peerify_dagster.domain.predictions import load_configurations
from peerify_dagster.domain.venues import (
    SOURCE_UPLOAD,
    RegistryError,
    Venue,
    load_registry,
    missing_files,
    upload_registry_text,
)
from peerify_dagster.resources.llm_gateway import ModelRegistry
from peerify_dagster.resources.openreview import SnapshotReader

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "peerify_dagster" / "sample_venue" / "snapshot"
SAMPLE_PDF = (SAMPLE / "pdfs" / "Rk7bWq2NzA.pdf").read_bytes()
SAMPLE_FORUM = json.loads((SAMPLE / "forums" / "Rk7bWq2NzA.json").read_text())
SAMPLE_REVIEW = next(note for note in SAMPLE_FORUM["notes"] if note["id"] == "NL9PqtHGLz")
ASSEMBLED = ("Summary: The paper proposes ASR.\n\nStrengths: - Cheap at query time.\n- Three datasets.\n\n"
             "Weaknesses: No variance across runs is reported.")


def test_a_text_laid_out_as_openreview_fields_keeps_them_and_any_other_text_is_one_review_field():
    assert uploads.review_fields(ASSEMBLED) == {"summary": "The paper proposes ASR.",
                                                "strengths": "- Cheap at query time.\n- Three datasets.",
                                                "weaknesses": "No variance across runs is reported."}
    plain = "The paper reports Recall@10 on three benchmarks.\nIt has no ablation of k."
    assert uploads.review_fields(f"  {plain}\n") == {"review": plain}
    pasted = ASSEMBLED.replace("\n", "\r\n").encode()  # as a browser sends a textarea
    assert uploads.read_reviews("the pasted review", pasted)[0][0].fields == uploads.review_fields(ASSEMBLED)


def test_the_sample_review_assembled_as_reviews_review_text_gives_back_its_own_fields():
    fields = {name: SAMPLE_REVIEW["content"][name]["value"] for name in ("summary", "strengths", "weaknesses",
                                                                       "questions")}
    text = "\n\n".join(f"{name.capitalize()}: {value}" for name, value in fields.items())
    assert uploads.review_fields(text) == fields


@pytest.mark.parametrize(("name", "data", "message"), [
    ("review.txt", b"  \n\t", "review.txt: the review is empty"),
    ("review.json", b"{\"content\": ", "review.json: unreadable JSON (line 1"),
    ("review.json", b"[]", "review.json: no review in the file"),
    ("review.json", b'{"content": {"rating": {"value": "6"}, "summary": {"value": " "}}}',
     "review.json: review 1: the review is empty"),
    ("review.json", b'[{"text": "no content"}]', "review.json: review 1: expected a note with a `content` mapping"),
    ("review.json", b'{"reviews": {"a": 1}}', "review.json: `reviews` and `responses` must be lists"),
    ("review.txt", b"\xff\xfe\x00bad", "review.txt: not UTF-8 text"),
    ("review.txt", b"\x00" * 40, "review.txt: the review is empty (no letter or digit)"),  # NULs only
    ("review.txt", b" \x01\x1b[;\x7f\t\r\n -- ... \xe2\x80\xa8", "review.txt: the review is empty"),  # controls
    ("review.json", b'{"content": {"review": {"value": "\\u0000\\u0000"}}}',
     "review.json: review 1: the review is empty"),
])
def test_a_review_file_that_cannot_be_used_is_refused_naming_the_file_and_the_reason(name, data, message):
    with pytest.raises(uploads.UploadError) as refused:
        uploads.read_reviews(name, data)
    assert str(refused.value).startswith(message)


def test_review_json_shapes_note_list_and_reviews_with_responses():
    note = json.dumps(SAMPLE_REVIEW).encode()
    [review], responses = uploads.read_reviews("r.json", note)
    assert review.note_id == "NL9PqtHGLz" and review.reviewer == "Reviewer_k3Tq" and responses == []
    assert review.fields["weaknesses"] == SAMPLE_REVIEW["content"]["weaknesses"]["value"]
    assert review.fields["rating"] == "6: marginally above the acceptance threshold"  # scores kept as given
    both = {"reviews": [{"id": "R1", "content": {"review": "Plain, unwrapped text."}}],
            "responses": [{"replyto": "R1", "content": {"comment": {"value": "We added it."}}}, "Thanks."]}
    reviews, responses = uploads.read_reviews("thread.json", json.dumps(both).encode())
    assert [r.fields for r in reviews] == [{"review": "Plain, unwrapped text."}]
    assert [(r.replyto, r.fields) for r in responses] == [("R1", {"comment": "We added it."}),
                                                          (None, {"comment": "Thanks."})]
    assert uploads.read_responses("answer.txt", b"We ran it twice.\n") == [
        uploads.UploadedText(fields={"comment": "We ran it twice."})]
    for nothing in (b"\n", b"\x00\x00", b"\x07 \x1b"):
        with pytest.raises(uploads.UploadError, match="answer.txt: the response is empty"):
            uploads.read_responses("answer.txt", nothing)


def test_pdfs_are_checked_before_anything_runs():
    assert uploads.check_pdf("paper.pdf", SAMPLE_PDF, 2**20).pages == 4
    for data, limit, message in ((b"Hello, I am a text file.\n", 2**20, "paper.pdf: bytes are not a PDF"),
                                 (SAMPLE_PDF[:-200], 2**20, "paper.pdf: PDF is truncated"),
                                 (SAMPLE_PDF, 1000, f"paper.pdf: {uploads.size_text(len(SAMPLE_PDF))} is over the "
                                                    "upload limit of 1 KB"),
                                 (b"", 2**20, "paper.pdf: PDF is empty")):
        with pytest.raises(uploads.UploadError) as refused:
            uploads.check_pdf("paper.pdf", data, limit)
        assert str(refused.value).startswith(message)


def test_a_review_section_longer_than_the_extractor_reads_is_refused_naming_the_file_and_the_section():
    limit = uploads.extractor_review_limit(ModelRegistry.load(env={}))  # the repository's offline profile
    template = uploads.load_prompt("extract_claims")
    assert limit.model == "smollm2-135m-extractor"  # 8192 tokens, less its 384 answer tokens and the prompt
    assert limit.max_tokens == 8192 - 384 - uploads.estimated_tokens(template.system + template.user)
    assert uploads.extractor_review_limit(ModelRegistry.load(env={"PEERIFY_LLM_PROFILE": "paper"})).max_tokens > \
        limit.max_tokens  # qwen3-4b reads 32,768 tokens
    room = limit.max_characters - len(section_label("weaknesses") + ": ")
    fits = {"summary": "Short.", "weaknesses": "w" * room}
    uploads.check_review_length("review.json", [uploads.UploadedText(fields=fits)], limit)
    too_long = [uploads.UploadedText(fields={"summary": "Short."}),
                uploads.UploadedText(fields={**fits, "weaknesses": "w" * (room + 1), "rating": "6" * 10**6})]
    with pytest.raises(uploads.UploadError) as refused:
        uploads.check_review_length("review.json", too_long, limit)
    assert str(refused.value) == (
        f"review.json: review 2: section 'weaknesses' is about {limit.max_tokens + 1:,} tokens ({room + 1:,} "
        f"characters), over the limit of {limit.max_tokens:,} tokens (about {limit.max_characters:,} characters) per "
        "review section for extractor smollm2-135m-extractor; shorten it, or split it into OpenReview's labelled "
        "sections (Summary:, Weaknesses:, ...), each read on its own")
    pasted = uploads.read_reviews("the pasted review", ("The results are weak. " * 10_000).encode())[0]
    with pytest.raises(uploads.UploadError, match="^the pasted review: section 'review' is about 73,336 tokens"):
        uploads.check_review_length("the pasted review", pasted, limit)


def test_the_result_read_back_from_its_data_is_the_result():
    result = _result()
    assert uploads.ResultSummary.from_dict(json.loads(json.dumps(result.as_dict()))) == result


def _upload(review_text: str = "The paper reports Recall@10 on three benchmarks.", responses=()) -> uploads.Upload:
    return uploads.Upload(pdf=SAMPLE_PDF, pdf_name="../../paper.pdf",
                          reviews=(uploads.UploadedText(fields=uploads.review_fields(review_text)),),
                          responses=tuple(responses))


def test_the_venue_key_is_the_content():
    key = _upload().key()
    assert key.startswith("upload-") and len(key) == len("upload-") + 12
    assert _upload().key() == key
    assert _upload("Another review.").key() != key
    assert _upload(responses=[uploads.UploadedText(fields={"comment": "Yes."})]).key() != key


def test_the_snapshot_is_what_the_crawler_lands_and_its_notes_fill_the_forum_tables(tmp_path):
    upload = _upload(ASSEMBLED, [uploads.UploadedText(fields={"comment": "We report variance in Appendix A."})])
    key = upload.key()
    files = uploads.upload_snapshot(key, upload, created_ms=1_777_000_000_000)
    for relative, data in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(data)
    reader = SnapshotReader(tmp_path)
    [submission] = reader.submissions()
    forum_id = submission["id"]
    assert reader.venue()["api_version"] == 2 and reader.pdf_bytes(forum_id) == SAMPLE_PDF
    assert reader.pdf_meta(forum_id)["source_url"] == "upload:paper.pdf"  # the name only, never a path
    tables = build_tables(key, [reader.forum(forum_id)])
    assert tables.rows["note_errors"] == []
    [paper] = tables.rows["submissions"]
    assert paper["title"] == "Anchor-Conditioned Sparse Retrieval for Long Scientific Documents"  # PDF metadata
    [review] = tables.rows["reviews"]
    assert (review["summary"], review["reviewer_id"]) == ("The paper proposes ASR.", "Reviewer_1")
    assert review["review_text"].startswith("Summary: The paper proposes ASR.\n\nStrengths: - Cheap")
    [response] = tables.rows["author_responses"]
    assert response["review_id"] == review["review_id"]  # the only review is the one answered
    assert uploads.upload_snapshot(key, upload, created_ms=1_777_000_000_000) == files  # deterministic
    assert uploads.upload_snapshot(key, upload, 1_777_000_000_000, paper_id="Rk7bWq2NzA")[
        "forums/Rk7bWq2NzA.json"]


def test_a_response_to_a_review_that_was_not_uploaded_is_refused_and_one_to_the_forum_answers_the_paper():
    upload = _upload(responses=[uploads.UploadedText(fields={"comment": "Done."}, replyto="Nope")])
    with pytest.raises(uploads.UploadError, match="the upload: response 1 answers note 'Nope', which is none of"):
        uploads.upload_snapshot(upload.key(), upload, 0)
    with pytest.raises(uploads.UploadError, match="answers.json: response 1 answers note 'R9', which is none of the "
                                                  r"uploaded reviews \(R1\)"):
        uploads.check_replies("answers.json", [uploads.UploadedText(fields={"comment": "x"}, replyto="R9")],
                              [uploads.UploadedText(fields={"review": "y"}, note_id="R1")])
    [response] = uploads.read_responses("global.json", json.dumps(
        {"forum": "F1", "replyto": "F1", "content": {"comment": "To all reviewers: thank you."}}).encode())
    assert response.replyto == uploads.PAPER
    upload = _upload(responses=[response])
    files = uploads.upload_snapshot(upload.key(), upload, 0)
    [forum] = [json.loads(data) for path, data in files.items() if path.startswith("forums/")]
    assert forum["notes"][-1]["replyto"] == forum["forum_id"]  # the paper, even with a single review


def test_a_forum_id_is_checked_before_it_names_a_file():
    assert uploads.check_forum_id("Rk7bWq2NzA") == "Rk7bWq2NzA"
    with pytest.raises(uploads.UploadError, match="not an OpenReview forum id"):
        uploads.check_forum_id("../../etc/passwd")


def test_the_lake_upload_registry_is_merged_into_the_repository_registry(tmp_path):
    repository = tmp_path / "venues.yaml"
    repository.write_text("venues:\n  sample:\n    source: snapshot\n    snapshot: snap\n    seed: 1\n")
    lake_registry = tmp_path / "lake" / "uploads" / "venues.yaml"
    assert list(load_registry(repository, lake_registry)) == ["sample"]  # no upload registry yet: the repository's
    lake_registry.parent.mkdir(parents=True)
    venue = Venue(key="upload-0123456789ab", openreview_id="Peerify/Upload/upload-0123456789ab", source=SOURCE_UPLOAD,
                  seed=0, snapshot="upload-0123456789ab/snapshot")
    lake_registry.write_text(upload_registry_text(lake_registry, venue))
    merged = load_registry(repository, lake_registry)
    assert list(merged) == ["sample", "upload-0123456789ab"]
    assert merged["upload-0123456789ab"].snapshot == str(lake_registry.parent / "upload-0123456789ab" / "snapshot")
    assert missing_files(merged["upload-0123456789ab"], repository) == [
        f"{repository}: venue 'upload-0123456789ab': snapshot {merged['upload-0123456789ab'].snapshot!r} does not "
        f"exist ({merged['upload-0123456789ab'].snapshot})"]
    assert list(load_registry(repository)) == ["sample"]  # without the lake's file: the repository's only
    other = Venue(key="upload-ba9876543210", openreview_id="x", source=SOURCE_UPLOAD, seed=0, snapshot="s")
    lake_registry.write_text(upload_registry_text(lake_registry, other))
    assert sorted(load_registry(repository, lake_registry)) == ["sample", "upload-0123456789ab", "upload-ba9876543210"]


@pytest.mark.parametrize(("where", "entry", "message"), [
    ("repository", "upload-0123456789ab:\n    source: upload\n    snapshot: s\n    seed: 0",
     "registered by `peerify verify` in the lake's upload registry"),
    ("repository", "upload-0123456789ab:\n    source: api\n    seed: 0", "the key prefix 'upload-' is for source"),
    ("uploads", "ICLR.cc/2024/Conference:\n    source: api\n    seed: 0", "source must be one of ('upload',)"),
    ("uploads", "upload-0123456789ab:\n    source: upload\n    seed: 0", "source 'upload' needs a 'snapshot' folder"),
    ("uploads", "sample:\n    source: upload\n    snapshot: s\n    seed: 0", "the key prefix 'upload-' is for"),
])
def test_upload_venues_live_only_in_the_lake_upload_registry(tmp_path, where, entry, message):
    repository, lake_registry = tmp_path / "venues.yaml", tmp_path / "uploads.yaml"
    repository.write_text("venues:\n  sample:\n    source: snapshot\n    snapshot: snap\n    seed: 1\n")
    (repository if where == "repository" else lake_registry).write_text(
        ("venues:\n  sample:\n    source: snapshot\n    snapshot: snap\n    seed: 1\n" if where == "repository"
         else "venues:\n") + f"  {entry}\n")
    with pytest.raises(RegistryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_registry(repository, lake_registry)


def test_an_upload_venue_builds_the_upload_default_configurations(tmp_path):
    configurations = load_configurations(REPO / "configurations.yaml", ["smollm2-135m"])
    assert [c.name for c in configurations.for_venue("upload-0123456789ab")] == ["hybrid-top3"]
    assert "hybrid-top3" not in [c.name for c in configurations.for_venue("ICML.cc/2024/Conference")]


def _result() -> uploads.ResultSummary:
    chunks = [{"chunk_id": "P:0001:a", "page": 2, "section_path": ["3 Method", "3.1 Anchors"], "section": "3.1",
               "text": "We use k = 8 anchors.", "regions": [{"page": 2, "x0": 70.0, "y0": 100.0, "x1": 500.0,
                                                             "y1": 160.0}]},
              {"chunk_id": "P:0002:b", "page": 3, "section_path": [], "section": "Results", "text": "Recall rises."}]
    claims = [{"claim_id": "c2", "review_id": "R", "reviewer_id": "Reviewer_1", "section": "weaknesses",
               "claim_text": "No variance is reported.", "claim_order": 1},
              {"claim_id": "c1", "review_id": "R", "reviewer_id": "Reviewer_1", "section": "summary",
               "claim_text": "ASR uses 8 anchors.", "claim_order": 0}]
    predictions = [
        {"claim_id": "c1", "configuration": "hybrid-top3", "verifier": "m", "retriever": "hybrid", "status": "ok",
         "label": "Supported", "call_id": "call-1", "error": None, "evidence_chunk_ids": ["P:0001:a", "P:0002:b"]},
        {"claim_id": "c2", "configuration": "hybrid-top3", "verifier": "m", "retriever": "hybrid", "status": "ok",
         "label": None, "call_id": "call-2", "error": "parse_failed: no verification label in the answer",
         "evidence_chunk_ids": ["P:0002:b"]},
        {"claim_id": "c1", "configuration": "full-context", "verifier": "m", "retriever": None,
         "status": "too_long", "label": None, "call_id": None, "error": "does not fit", "evidence_chunk_ids": []}]
    runs = [{"claim_id": "c1", "retriever": "hybrid", "chunk_id": "P:0001:a", "score": 0.5, "status": "ok"},
            {"claim_id": "c1", "retriever": "hybrid", "chunk_id": "P:0002:b", "score": 0.25, "status": "ok"}]
    reasons = {"call-1": answer_justification('{"label": "Supported", "justification": " Section 3.1 says k = 8. "}'),
               "call-2": answer_justification("not json")}
    claim_rows = uploads.claim_results(claims, [{"claim_id": "c1", "claim_type": "factual"}], predictions, chunks,
                                       runs, reasons, ["hybrid-top3", "full-context"])
    return uploads.ResultSummary(venue="upload-x", title="ASR", origin="paper.pdf with 1 review(s)", pages=4,
                                 configurations=("hybrid-top3", "full-context"), claims=tuple(claim_rows))


def test_the_result_lists_each_claim_with_its_verdicts_and_the_passages_shown():
    result = _result()
    first, second = result.claims
    assert (first.claim_id, first.claim_type, second.claim_type) == ("c1", "factual", None)  # claim order
    assert [(v.configuration, v.outcome, v.justification) for v in first.verdicts] == [
        ("hybrid-top3", "Supported", "Section 3.1 says k = 8."), ("full-context", "too_long", None)]
    passages = first.verdicts[0].passages
    assert [(p.rank, p.page, p.section, p.score) for p in passages] == [
        (1, 2, "3 Method > 3.1 Anchors", 0.5), (2, 3, "Results", 0.25)]
    assert passages[0].regions[0]["x0"] == 70.0
    assert second.verdicts[0].outcome == "unparsed answer"
    assert result.verdict_counts() == {"hybrid-top3": {"Supported": 1, "unparsed answer": 1},
                                       "full-context": {"too_long": 1}}
    text = uploads.format_result(result)
    assert "1. [factual] ASR uses 8 anchors." in text
    assert "hybrid-top3 / m: Supported: Section 3.1 says k = 8." in text
    assert "p.2 3 Method > 3.1 Anchors, score 0.500: We use k = 8 anchors." in text
    assert "full-context / m: too_long (does not fit)" in text


def test_the_result_page_is_one_self_contained_file_quoting_the_evidence():
    from peerify_dagster.cli.verification import render_result

    page = render_result(_result())
    assert "<script" not in page and "<link" not in page and "src=" not in page  # nothing fetched
    assert "We use k = 8 anchors." in page and "page 2" in page and "3 Method &gt; 3.1 Anchors" in page
    assert "box p.2 (70, 100)" in page and "Section 3.1 says k = 8." in page
    assert '<span class="label Supported">Supported</span>' in page
