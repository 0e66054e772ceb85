"""Checking manuscript PDF bytes before they enter the lake."""

from __future__ import annotations

import hashlib
import io
import logging
from dataclasses import dataclass

from pypdf import PdfReader
from pypdf.errors import PdfReadError

# pypdf warns on every recoverable oddity; the checks below decide what is fatal.
logging.getLogger("pypdf").setLevel(logging.ERROR)


class PdfProblem(ValueError):
    """Bytes that are not a usable PDF; `reason` is a short code for the errors table."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class PdfInfo:
    sha256: str
    size_bytes: int
    pages: int | None  # None when encryption hides the page tree
    encrypted: bool


def inspect_pdf(data: bytes, label: str) -> PdfInfo:
    """Check that bytes are a whole PDF and count its pages; `label` names the paper in error messages.

    Only transport-level damage is rejected here (empty, not a PDF, truncated, unreadable): those are
    worth fetching again. Encrypted, zero-page or image-only PDFs are what the venue serves; they are
    stored, and the parsing stage records why they yield no text.
    """
    if not data:
        raise PdfProblem("empty_pdf", f"{label}: PDF is empty (0 bytes)")
    if not data.lstrip()[:5] == b"%PDF-":
        raise PdfProblem("not_a_pdf", f"{label}: bytes are not a PDF (start {data[:16]!r})")
    if b"%%EOF" not in data[-2048:]:
        raise PdfProblem("truncated_pdf", f"{label}: PDF is truncated (no %%EOF marker at the end, {len(data)} bytes)")
    digest = hashlib.sha256(data).hexdigest()
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            return PdfInfo(sha256=digest, size_bytes=len(data), pages=None, encrypted=True)
        pages = len(reader.pages)
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise PdfProblem("corrupt_pdf", f"{label}: PDF cannot be read ({exc})") from exc
    return PdfInfo(sha256=digest, size_bytes=len(data), pages=pages, encrypted=reader.is_encrypted)
