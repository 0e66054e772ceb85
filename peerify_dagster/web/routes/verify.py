"""The verify page: a PDF and a review (pasted or uploaded, with an optional author response), or one forum of a built
venue, verified through the same graph as `peerify verify` by the server's background worker
(peerify_dagster/verification_jobs.py).

- `/verify`: the form with the input limits (the upload limit, PEERIFY_MAX_PDF_MB; the review section limit of the
  configured extractor), and the jobs so far;
- POST `/verify`: checks the input before anything runs (a real PDF with pages within the upload limit, a review with
  words in it, UTF-8, each section within the extractor's window; a forum the page offers) and queues a job, answered
  with a redirect to its page; a refused input gets the form back with the reason and what was typed (413 for a PDF
  over the limit; the page checks the PDF's size before sending it, too);
- `/verify/jobs/{id}`: the job's progress by phase (htmx polls `.../status`), which survives a reload and a server
  restart; when done, links to its claims in the claim browser and to the one-page result (`.../result`), which names
  the job's own files (the same content is one venue, whoever uploaded it under which name).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from peerify_dagster import paths
from peerify_dagster.domain import uploads
from peerify_dagster.domain.venues import UPLOAD_KEY_PREFIX
from peerify_dagster.verification_jobs import DONE, FAILED, PDF_FILE, JobStore, Worker, phase_steps
from peerify_dagster.web.pages import lake_data, render, settings, venue_url

NAV = (("Verify", "/verify"),)
PASTED_REVIEW, PASTED_RESPONSE = "the pasted review", "the pasted response"
_UPLOAD_VENUE = re.compile(rf"^{re.escape(UPLOAD_KEY_PREFIX)}[0-9a-f]{{12}}$")


@contextlib.asynccontextmanager
async def lifespan(app: ASGIApp) -> AsyncIterator[None]:
    """The job store of the server's lake and its one worker thread (jobs a dead server left running are queued
    again; nothing else runs until a user submits a job)."""
    store = JobStore(app.state.settings.lake_root)
    worker = Worker(store, app.state.settings.lake_root)
    app.state.verify_jobs, app.state.verify_worker = store, worker
    worker.start()
    try:
        yield
    finally:
        worker.stop()


def _store(request: Request) -> JobStore:
    return request.app.state.verify_jobs


def _configurations() -> tuple[list[str], list[str]]:
    """Every configuration of configurations.yaml, and those an upload venue builds by default."""
    from peerify_dagster.domain.predictions import load_configurations
    from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

    configurations = load_configurations(Path(paths.configurations_path()), ModelRegistry.load().models)
    defaults = configurations.for_venue(UPLOAD_KEY_PREFIX)  # the defaults of any upload venue's key
    return list(configurations.configurations), [configuration.name for configuration in defaults]


def _review_limit() -> uploads.ReviewLimit:
    from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

    return uploads.extractor_review_limit(ModelRegistry.load())


def _forums(request: Request) -> list[tuple[str, str, str]]:
    data = lake_data(request)
    return uploads.forum_choices({venue: (data.table("submissions", venue).to_dicts(),
                                          data.table("manuscript_pdfs", venue).to_dicts())
                                  for venue in data.venues() if not venue.startswith(UPLOAD_KEY_PREFIX)
                                  and data.optional_table("manuscript_pdfs", venue) is not None})


def _form_page(request: Request, error: str | None = None, given: dict | None = None, status_code: int = 200):
    names, defaults = _configurations()
    max_pdf = settings(request).max_pdf_bytes
    return render(request, "verify/index.html", {
        "error": error, "given": given or {}, "configurations": names, "default_configurations": defaults,
        "forums": _forums(request), "jobs": _store(request).jobs()[:20], "max_pdf": uploads.size_text(max_pdf),
        "max_pdf_bytes": max_pdf, "too_large": uploads.over_upload_limit("{file}", max_pdf),
        "review_limit": _review_limit().describe()}, status_code=status_code)


async def verify_page(request: Request):
    return _form_page(request)


@dataclass
class _Part:
    """One part of a multipart form as sent: a field, or a file input's (file name "" when no file was chosen)."""

    name: str
    filename: str | None
    data: bytearray = field(default_factory=bytearray)


class UploadForm:
    """The verify form's parts, read from the request body with their bytes as sent: Starlette's form parser reads a
    text field that is not UTF-8 as Latin-1, and a review must be refused instead (uploads names the field)."""

    def __init__(self, body: bytes, content_type: str):
        kind, options = parse_options_header(content_type)
        if kind != b"multipart/form-data" or not options.get(b"boundary"):
            raise uploads.UploadError("the form was not sent as multipart/form-data")
        self.parts: list[_Part] = []
        header = {"field": bytearray(), "value": bytearray(), "disposition": b""}

        def header_end() -> None:
            if bytes(header["field"]).lower() == b"content-disposition":
                header["disposition"] = bytes(header["value"])
            header["field"], header["value"] = bytearray(), bytearray()

        def headers_finished() -> None:
            _, disposition = parse_options_header(header["disposition"])
            filename = disposition.get(b"filename")
            self.parts.append(_Part(disposition.get(b"name", b"").decode("utf-8", "replace"),
                                    None if filename is None else filename.decode("utf-8", "replace")))
            header["disposition"] = b""

        callbacks = {"on_header_field": lambda data, start, end: header["field"].extend(data[start:end]),
                     "on_header_value": lambda data, start, end: header["value"].extend(data[start:end]),
                     "on_header_end": header_end, "on_headers_finished": headers_finished,
                     "on_part_data": lambda data, start, end: self.parts[-1].data.extend(data[start:end])}
        try:
            parser = MultipartParser(options[b"boundary"], callbacks)
            parser.write(body)
            parser.finalize()
        except FormParserError as error:
            raise uploads.UploadError(f"the form could not be read ({error})") from None

    def raw(self, name: str) -> bytes:
        """A text field's bytes (empty when absent)."""
        return next((bytes(part.data) for part in self.parts if part.name == name and part.filename is None), b"")

    def texts(self, name: str) -> list[str]:
        """Every value of a field (checkboxes), as text; only the review and the response are checked as UTF-8."""
        return [part.data.decode("utf-8", "replace") for part in self.parts
                if part.name == name and part.filename is None]

    def text(self, name: str) -> str:
        return next(iter(self.texts(name)), "")

    def file(self, name: str) -> tuple[str, bytes] | None:
        """(file name, bytes) of a file input with a file chosen, else None."""
        return next(((Path(part.filename).name, bytes(part.data)) for part in self.parts
                     if part.name == name and part.filename), None)


async def submit(request: Request):
    """Check the input before anything runs, then queue the job (the access gate has bounded the body)."""
    given: dict = {}
    try:
        form = UploadForm(await request.body(), request.headers.get("content-type", ""))
        given = {"mode": form.text("mode") or "upload", "forum": form.text("forum"),
                 "review_text": form.text("review_text"), "response_text": form.text("response_text")}
        names, _ = _configurations()
        chosen = form.texts("configuration")
        if unknown := [name for name in chosen if name not in names]:
            raise uploads.UploadError(f"unknown configuration {unknown[0]!r}; known: {', '.join(names)}")
        if not chosen:
            raise uploads.UploadError("choose at least one configuration to verify with")
        request_ = _request(request, form, given, tuple(chosen))
    except uploads.UploadError as refused:
        status = 413 if isinstance(refused, uploads.UploadTooLarge) else 400
        return _form_page(request, str(refused), given, status_code=status)
    job = _store(request).submit(request_)
    request.app.state.verify_worker.wake()
    return RedirectResponse(f"/verify/jobs/{job['id']}", status_code=303)


def _request(request: Request, form: UploadForm, given: dict, configurations: tuple[str, ...]
             ) -> uploads.VerificationRequest:
    if given["mode"] == "forum":
        venue, _, forum = given["forum"].rpartition("|")
        if not venue or not forum:
            raise uploads.UploadError("choose a forum of a built venue")
        _check_offered(request, venue, forum)
        return uploads.VerificationRequest(venue=venue, forum=forum, configurations=configurations)
    pdf = form.file("pdf")
    if pdf is None:
        raise uploads.UploadError("choose the paper's PDF to upload")
    pdf_name, data = pdf
    uploads.check_pdf(pdf_name, data, settings(request).max_pdf_bytes)
    review_name, review = form.file("review_file") or (PASTED_REVIEW, form.raw("review_text"))
    reviews, responses = uploads.read_reviews(review_name, review)
    uploads.check_replies(review_name, responses, reviews)
    uploads.check_review_length(review_name, reviews, _review_limit())
    response_name, response = form.file("response_file") or (PASTED_RESPONSE, form.raw("response_text"))
    if response.strip():  # optional
        responses += uploads.read_responses(response_name, response)
    return uploads.VerificationRequest(upload=uploads.Upload(pdf=data, pdf_name=pdf_name, reviews=tuple(reviews),
                                                             responses=tuple(responses)),
                                       configurations=configurations)


def _check_offered(request: Request, venue: str, forum: str) -> None:
    """A forum is verified only when the page offers it: a paper with a usable PDF in a venue built in this lake."""
    offered = {(choice_venue, choice_forum) for choice_venue, choice_forum, _ in _forums(request)}
    if (venue, forum) in offered:
        return
    built = sorted({choice_venue for choice_venue, _ in offered})
    if venue not in built:
        raise uploads.UploadError(f"venue {venue!r}: not a venue built in this lake with manuscripts (built: "
                                  f"{', '.join(built) or 'none'})")
    raise uploads.UploadError(f"forum {forum!r}: not a paper with a usable PDF in venue {venue!r}")


def _job(request: Request) -> dict:
    job = _store(request).get(request.path_params["job_id"])
    if job is None:
        raise HTTPException(404, f"There is no verification job {request.path_params['job_id']!r} in this lake.")
    return job


def _job_context(job: dict) -> dict:
    venue = job.get("venue")
    return {"job": job, "steps": phase_steps(job), "finished": job["status"] in (DONE, FAILED),
            "claims_url": venue_url(venue, "claims") if venue and job["status"] == DONE else None}


async def job_page(request: Request):
    return render(request, "verify/job.html", _job_context(_job(request)))


async def job_status(request: Request):
    return render(request, "verify/_status.html", _job_context(_job(request)))


async def job_result(request: Request):
    """The job's one-page result, found by the job's own record (no path from the request reaches the disk). The
    venue's result.json holds the verdicts; the page names the job's own upload: jobs with the same content share
    their venue, not their file names."""
    job = _job(request)
    venue = job.get("venue") or ""
    data = settings(request).lake_root / "uploads" / venue / "result.json"
    missing = HTTPException(404, f"Verification job {job['id']} has no result page (yet): it is {job['status']}.")
    if job["status"] != DONE or not _UPLOAD_VENUE.match(venue) or not data.is_file():
        raise missing
    try:
        summary = uploads.ResultSummary.from_dict(json.loads(data.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        raise missing from None
    record = job["request"]
    own = {"origin": record["description"]}
    if record["upload"] is not None:
        pdf = _store(request).folder / job["id"] / PDF_FILE
        with contextlib.suppress(OSError):
            own["title"] = uploads.upload_title(pdf.read_bytes(), record["upload"]["pdf_name"]) or summary.title
    summary = dataclasses.replace(summary, **own)
    return render(request, "verify/result_page.html", {"summary": summary, "counts": summary.verdict_counts()})


ROUTES = [
    Route("/verify", verify_page, methods=["GET"], name="verify"),
    Route("/verify", submit, methods=["POST"], name="verify_submit"),
    Route("/verify/jobs/{job_id}", job_page, methods=["GET"], name="verify_job"),
    Route("/verify/jobs/{job_id}/status", job_status, methods=["GET"], name="verify_job_status"),
    Route("/verify/jobs/{job_id}/result", job_result, methods=["GET"], name="verify_job_result"),
]
