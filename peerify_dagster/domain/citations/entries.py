"""A parsed reference entry, the type every citation stage shares (bibliography writes it, detection resolves
markers against it, metadata checks and resolution look it up)."""

from __future__ import annotations

from dataclasses import dataclass, field

PARSED, PARTIAL, UNPARSED = "parsed", "partial", "unparsed"


@dataclass(frozen=True)
class ParsedEntry:
    """One entry of a reference list. `index` is its 1-based position in the list; `label` the number or key it is
    cited by when the list is labelled ("5" for "[5]" or "5."), else None; `surnames` the authors' family names in
    order (what author-year markers name); `field_sources` says, per field found, how it was found (e.g.
    {"doi": "doi_pattern", "title": "quoted", "year": "after_authors"}); `status` parsed (title and at least
    authors or year), partial (some fields) or unparsed, with `reason` for the last two."""

    index: int
    raw_text: str
    label: str | None = None
    authors: tuple[str, ...] = ()
    surnames: tuple[str, ...] = ()
    title: str | None = None
    year: int | None = None
    year_suffix: str | None = None  # "a" in "2019a"
    venue: str | None = None
    doi: str | None = None  # lower-cased, without a resolver prefix ("10.18653/v1/n18-3011")
    arxiv_id: str | None = None  # without version or prefix ("2203.00130")
    url: str | None = None
    field_sources: dict[str, str] = field(default_factory=dict)
    status: str = UNPARSED
    reason: str | None = None
