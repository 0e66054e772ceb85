"""The verify page: a PDF and a review (pasted or uploaded, with an optional author response), or one forum of a built
venue, verified through the same graph as `peerify verify` by the server's background worker
(peerify_dagster/verification_jobs.py).

- `/verify`: the form, and the jobs so far;
- POST `/verify`: checks the input before anything runs (the size limit, a real PDF with pages, a review that is not
  empty) and queues a job, answered with a redirect to its page; a refused input gets the form back with the reason;
- `/verify/jobs/{id}`: the job's progress by phase (htmx polls `.../status`), which survives a reload and a server
  restart; when done, links to its claims in the claim browser and to the one-page result (`.../result`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from peerify_dagster import paths
from peerify_dagster.domain import uploads
from peerify_dagster.domain.venues import UPLOAD_KEY_PREFIX
from peerify_dagster.verification_jobs import DONE, FAILED, JobStore, Worker, phase_steps
from peerify_dagster.web.pages import lake_data, render, settings, venue_url
from peerify_dagster.web.security import limited_body

NAV = (("Verify", "/verify"),)
TEXT_FIELDS_BYTES = 4 * 2**20  # what the form may carry beside the PDF: the review and the response
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


def _forums(request: Request) -> list[tuple[str, str, str]]:
    data = lake_data(request)
    return uploads.forum_choices({venue: (data.table("submissions", venue).to_dicts(),
                                          data.table("manuscript_pdfs", venue).to_dicts())
                                  for venue in data.venues() if not venue.startswith(UPLOAD_KEY_PREFIX)
                                  and data.optional_table("manuscript_pdfs", venue) is not None})


def _form_page(request: Request, error: str | None = None, given: dict | None = None, status_code: int = 200):
    names, defaults = _configurations()
    return render(request, "verify/index.html", {
        "error": error, "given": given or {}, "configurations": names, "default_configurations": defaults,
        "forums": _forums(request), "jobs": _store(request).jobs()[:20],
        "max_pdf": uploads.size_text(uploads.max_pdf_bytes())}, status_code=status_code)


async def verify_page(request: Request):
    return _form_page(request)


async def _given_text(form, text_field: str, file_field: str, pasted_name: str) -> tuple[str, bytes]:  # noqa: ANN001
    """(name, bytes) of a text given as a file, else of the pasted one (maybe empty)."""
    given = form.get(file_field)
    if isinstance(given, UploadFile) and given.filename:
        return Path(given.filename).name, await given.read()
    return pasted_name, str(form.get(text_field) or "").encode()


async def submit(request: Request):
    """Check the input before anything runs, then queue the job."""
    limit = uploads.max_pdf_bytes()
    await limited_body(request, limit + TEXT_FIELDS_BYTES)
    form = await request.form()
    given = {"mode": str(form.get("mode") or "upload"), "forum": str(form.get("forum") or ""),
             "review_text": str(form.get("review_text") or ""), "response_text": str(form.get("response_text") or "")}
    names, _ = _configurations()
    chosen = [str(name) for name in form.getlist("configuration")]
    try:
        if unknown := [name for name in chosen if name not in names]:
            raise uploads.UploadError(f"unknown configuration {unknown[0]!r}; known: {', '.join(names)}")
        if not chosen:
            raise uploads.UploadError("choose at least one configuration to verify with")
        request_ = await _request(form, given, tuple(chosen), limit)
    except uploads.UploadError as refused:
        return _form_page(request, str(refused), given, status_code=400)
    job = _store(request).submit(request_)
    request.app.state.verify_worker.wake()
    return RedirectResponse(f"/verify/jobs/{job['id']}", status_code=303)


async def _request(form, given: dict, configurations: tuple[str, ...],  # noqa: ANN001 - a FormData
                   limit: int) -> uploads.VerificationRequest:
    if given["mode"] == "forum":
        venue, _, forum = given["forum"].rpartition("|")
        if not venue or not forum:
            raise uploads.UploadError("choose a forum of a built venue")
        return uploads.VerificationRequest(venue=venue, forum=uploads.check_forum_id(forum),
                                           configurations=configurations)
    pdf = form.get("pdf")
    if not isinstance(pdf, UploadFile) or not pdf.filename:
        raise uploads.UploadError("choose the paper's PDF to upload")
    data = await pdf.read()
    uploads.check_pdf(pdf.filename, data, limit)
    review_name, review = await _given_text(form, "review_text", "review_file", PASTED_REVIEW)
    reviews, responses = uploads.read_reviews(review_name, review)
    uploads.check_replies(review_name, responses, reviews)
    name, response = await _given_text(form, "response_text", "response_file", PASTED_RESPONSE)
    if response.strip():  # optional
        responses += uploads.read_responses(name, response)
    return uploads.VerificationRequest(upload=uploads.Upload(pdf=data, pdf_name=Path(pdf.filename).name,
                                                     reviews=tuple(reviews), responses=tuple(responses)),
                               configurations=configurations)


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
    """The job's one-page result, found by the job's own record (no path from the request reaches the disk)."""
    job = _job(request)
    venue = job.get("venue") or ""
    page = settings(request).lake_root / "uploads" / venue / "result.html"
    if job["status"] != DONE or not _UPLOAD_VENUE.match(venue) or not page.is_file():
        raise HTTPException(404, f"Verification job {job['id']} has no result page (yet): it is {job['status']}.")
    return HTMLResponse(page.read_text())


ROUTES = [
    Route("/verify", verify_page, methods=["GET"], name="verify"),
    Route("/verify", submit, methods=["POST"], name="verify_submit"),
    Route("/verify/jobs/{job_id}", job_page, methods=["GET"], name="verify_job"),
    Route("/verify/jobs/{job_id}/status", job_status, methods=["GET"], name="verify_job_status"),
    Route("/verify/jobs/{job_id}/result", job_result, methods=["GET"], name="verify_job_result"),
]
