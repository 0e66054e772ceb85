"""The reference-list page: one .bib, .bbl, .tex, PDF or LaTeX source archive checked as `peerify refs check` checks
it (resources/reference_checking.py), against the lake's metadata index when it has one and the network services the
user ticks (none by default: nothing leaves the machine unless a service is ticked).

- `/references`: the form, saying whether the lake has an index;
- POST `/references`: the upload read within the verify form's limits (PEERIFY_MAX_PDF_MB; 413 over it, 400 for a
  file of the wrong kind or one that cannot be read, each naming the file, with the ticked services kept), kept in
  the lake's uploads area under an id made from its content and the sources asked, then checked: inline for a
  .bib, .bbl or LaTeX source (fractions of a second), in a background thread for a PDF (its parse takes seconds),
  answered with a redirect to the result;
- `/references/{id}`: the counts per status and the entries worst first (the page reloads itself while a PDF is
  still being checked); `/references/{id}.json|.csv|.bib`: that same result as JSON, CSV and corrected BibTeX.

Like the verify page, these are the maintainer's pages (web/security.py: no annotator route).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from peerify_dagster.domain import uploads
from peerify_dagster.domain.citations.options import NETWORK_METADATA_SERVICES
from peerify_dagster.domain.citations.reference_report import WRITERS
from peerify_dagster.domain.citations.vocabulary import REFERENCE_STATUSES
from peerify_dagster.resources.files import atomic_path
from peerify_dagster.resources.reference_checking import answer_cache, check_reference_list, lake_index
from peerify_dagster.resources.reference_inputs import ReferenceInputError
from peerify_dagster.web.pages import render, settings
from peerify_dagster.web.routes.verify import UploadForm

NAV = (("References", "/references"),)
ACCEPTED_SUFFIXES = (".bib", ".bbl", ".tex", ".pdf", ".tar.gz", ".tgz", ".tar")
RESULTS_DIR = "references"  # under the lake's uploads area, beside the verify jobs
INPUT_DIR = "input"  # a result's upload, alone in its folder (a .tex is read with the folder it lies in)
FAILED_FILE = "failed.txt"  # why a background check failed
# What each download is written as, and served from: the result's files share the writers of `peerify refs check`.
DOWNLOADS = {"json": ("report.json", "json", "application/json"), "csv": ("report.csv", "csv", "text/csv"),
             "bib": ("report.bib", "bibtex", "application/x-bibtex")}
REPORT_FILE = DOWNLOADS["json"][0]  # written last: its presence says the result is complete
_RESULT_ID = re.compile(r"^[0-9a-f]{16}$")


@contextlib.asynccontextmanager
async def lifespan(app: ASGIApp) -> AsyncIterator[None]:
    """The ids of the PDFs being checked in the background (a result without a report and not listed here was cut
    short by a restart)."""
    app.state.reference_checks_running = set()
    yield


def _results(request: Request) -> Path:
    return settings(request).lake_root / "uploads" / RESULTS_DIR


def _form_page(request: Request, error: str | None = None, services: list[str] | None = None,
               status_code: int = 200):
    max_pdf = settings(request).max_pdf_bytes
    return render(request, "references/index.html", {
        "error": error, "chosen": services or [], "services": NETWORK_METADATA_SERVICES,
        "has_index": lake_index(settings(request).lake_root) is not None, "accepted": ", ".join(ACCEPTED_SUFFIXES),
        "max_pdf": uploads.size_text(max_pdf)}, status_code=status_code)


async def references_page(request: Request):
    return _form_page(request)


def _result_id(name: str, data: bytes, services: list[str], has_index: bool) -> str:
    """The same file checked against the same sources is the same result (whoever uploads it)."""
    digest = hashlib.sha256(json.dumps([name, services, has_index]).encode() + b"\0" + data)
    return digest.hexdigest()[:16]


def _readable_upload(form: UploadForm, max_bytes: int) -> tuple[str, bytes]:
    upload = form.file("reference_list")
    if upload is None:
        raise uploads.UploadError("choose a reference list to upload")
    name, data = upload
    if not name.lower().endswith(ACCEPTED_SUFFIXES):
        raise uploads.UploadError(f"{name}: not a reference list this page reads (one of "
                                  f"{', '.join(ACCEPTED_SUFFIXES)})")
    if len(data) > max_bytes:
        raise uploads.UploadTooLarge(uploads.over_upload_limit(f"{name}: {uploads.size_text(len(data))}", max_bytes))
    return name, data


def _check(folder: Path, name: str, services: list[str], lake_root: Path) -> None:
    """Check the upload saved in `folder` and write the report's downloads there; UploadError naming the file when
    it cannot be read or holds no entry (the folder is then removed: nothing is kept of a refused upload)."""
    saved = folder / INPUT_DIR / name
    index = lake_index(lake_root)
    try:
        report = check_reference_list(saved, services, index, cache_dir=answer_cache(lake_root))
    except (ReferenceInputError, OSError) as error:
        shutil.rmtree(folder, ignore_errors=True)
        # the reader names the file by its path in the lake; the user knows it by the name they uploaded
        raise uploads.UploadError(str(error).replace(str(saved), name).replace(str(saved.parent), name)) from None
    finally:
        if index is not None:
            index.close()
    if not report.rows:
        shutil.rmtree(folder, ignore_errors=True)
        raise uploads.UploadError(f"{name}: no reference entry found" + "".join(f"; {p}" for p in report.problems[:3]))
    for file_name, writer, _ in DOWNLOADS.values():
        with atomic_path(folder / file_name) as temporary:
            temporary.write_text(WRITERS[writer](report), encoding="utf-8")


def _check_in_background(running: set[str], result_id: str, folder: Path, name: str, services: list[str],
                         lake_root: Path) -> None:
    try:
        _check(folder, name, services, lake_root)
    except uploads.UploadError as refused:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / FAILED_FILE).write_text(str(refused), encoding="utf-8")
    finally:
        running.discard(result_id)


async def submit(request: Request):
    """Read the upload (the access gate has bounded the body and checked the CSRF token), keep it under its id and
    check it, inline or, for a PDF, in the background."""
    services: list[str] = []
    try:
        form = UploadForm(await request.body(), request.headers.get("content-type", ""))
        services = [service for service in NETWORK_METADATA_SERVICES if service in form.texts("service")]
        if unknown := [service for service in form.texts("service") if service not in NETWORK_METADATA_SERVICES]:
            raise uploads.UploadError(f"unknown service {unknown[0]!r}; known: {', '.join(NETWORK_METADATA_SERVICES)}")
        name, data = _readable_upload(form, settings(request).max_pdf_bytes)
        lake_root = settings(request).lake_root
        result_id = _result_id(name, data, services, lake_index(lake_root) is not None)
        folder = _results(request) / result_id
        if not (folder / REPORT_FILE).is_file() and result_id not in request.app.state.reference_checks_running:
            shutil.rmtree(folder, ignore_errors=True)  # a failed or cut-short check of the same upload: again
            (folder / INPUT_DIR).mkdir(parents=True)
            (folder / INPUT_DIR / name).write_bytes(data)
            if name.lower().endswith(".pdf"):
                running = request.app.state.reference_checks_running
                running.add(result_id)
                threading.Thread(target=_check_in_background, name=f"references-{result_id}", daemon=True,
                                 args=(running, result_id, folder, name, services, lake_root)).start()
            else:
                await run_in_threadpool(_check, folder, name, services, lake_root)
    except uploads.UploadError as refused:
        status = 413 if isinstance(refused, uploads.UploadTooLarge) else 400
        return _form_page(request, str(refused), services, status_code=status)
    return RedirectResponse(f"/references/{result_id}", status_code=303)


def _folder(request: Request) -> Path:
    result_id = request.path_params["result_id"]
    folder = _results(request) / result_id
    if not _RESULT_ID.match(result_id) or not folder.is_dir():
        raise HTTPException(404, f"There is no reference check {result_id!r} in this lake.")
    return folder


async def result_page(request: Request):
    folder = _folder(request)
    result_id = request.path_params["result_id"]
    context: dict = {"result_id": result_id, "report": None, "failed": None,
                     "running": result_id in request.app.state.reference_checks_running}
    if (folder / REPORT_FILE).is_file():
        report = json.loads((folder / REPORT_FILE).read_text(encoding="utf-8"))
        order = {status: position for position, status in enumerate(REFERENCE_STATUSES)}
        report["references"].sort(key=lambda row: order.get(row["status"], len(order)))  # stable: list order kept
        context["report"] = report
    elif (folder / FAILED_FILE).is_file():
        context["failed"] = (folder / FAILED_FILE).read_text(encoding="utf-8")
    return render(request, "references/result.html", context)


async def download(request: Request):
    kind = request.path_params["kind"]
    if kind not in DOWNLOADS:
        raise HTTPException(404, f"There is no .{kind} download of a reference check (.json, .csv or .bib).")
    file_name, _, media_type = DOWNLOADS[kind]
    path = _folder(request) / file_name
    if not path.is_file():
        raise HTTPException(404, f"Reference check {request.path_params['result_id']} has no result (yet).")
    return FileResponse(path, media_type=media_type,
                        filename=f"references-{request.path_params['result_id']}.{kind}")


ROUTES = [
    Route("/references", references_page, methods=["GET"], name="references"),
    Route("/references", submit, methods=["POST"], name="references_submit"),
    Route("/references/{result_id}.{kind}", download, methods=["GET"], name="references_download"),
    Route("/references/{result_id}", result_page, methods=["GET"], name="references_result"),
]
