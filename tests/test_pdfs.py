"""Ingestion-time PDF checks: transport damage is rejected with a reason; what the venue serves is kept."""

from __future__ import annotations

import pytest

from peerify_dagster.domain.pdfs import PdfProblem, inspect_pdf
from tests.fixtures_pdf import encrypted_paper, image_only_paper, structured_paper, zero_page_pdf


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty_pdf"),
        (b"<html>Not found</html>", "not_a_pdf"),
        (structured_paper()[:1500], "truncated_pdf"),
        (b"%PDF-1.4\n1 0 obj garbage\n%%EOF\n", "corrupt_pdf"),
    ],
)
def test_damaged_bytes_are_rejected_naming_the_paper(data, reason):
    with pytest.raises(PdfProblem) as info:
        inspect_pdf(data, "paper Xy12")
    assert info.value.reason == reason and "paper Xy12" in str(info.value)


def test_served_pdfs_are_kept_with_what_can_be_read():
    good = inspect_pdf(structured_paper(), "p")
    assert good.pages >= 2 and not good.encrypted and len(good.sha256) == 64
    assert inspect_pdf(encrypted_paper(), "p").encrypted and inspect_pdf(encrypted_paper(), "p").pages is None
    assert inspect_pdf(zero_page_pdf(), "p").pages == 0
    assert inspect_pdf(image_only_paper(), "p").pages == 1
