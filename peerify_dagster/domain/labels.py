"""The verification label vocabulary and the normalisation of the spellings tools write.

The paper's four labels are fixed; the published release and several LLMs write synonyms
(`Contradicted` for `Not Supported`, `Undetermined` for `Not Determined`). Normalising never
guesses: a value that maps to no label returns None so callers can flag it.
"""

from __future__ import annotations

import re

SUPPORTED = "Supported"
PARTIALLY_SUPPORTED = "Partially Supported"
NOT_SUPPORTED = "Not Supported"
NOT_DETERMINED = "Not Determined"

LABELS: tuple[str, ...] = (SUPPORTED, PARTIALLY_SUPPORTED, NOT_SUPPORTED, NOT_DETERMINED)

_SYNONYMS: dict[str, str] = {
    "supported": SUPPORTED,
    "fully supported": SUPPORTED,
    "partially supported": PARTIALLY_SUPPORTED,
    "partial": PARTIALLY_SUPPORTED,
    "partially": PARTIALLY_SUPPORTED,
    "not supported": NOT_SUPPORTED,
    "unsupported": NOT_SUPPORTED,
    "contradicted": NOT_SUPPORTED,
    "refuted": NOT_SUPPORTED,
    "not determined": NOT_DETERMINED,
    "undetermined": NOT_DETERMINED,
    "not determinable": NOT_DETERMINED,
    "cannot be determined": NOT_DETERMINED,
    "insufficient information": NOT_DETERMINED,
}


def _canonical_key(raw: str) -> str:
    # Case, underscores, hyphens and trailing punctuation vary between tools and models.
    text = re.sub(r"[_\-]+", " ", raw.strip().lower())
    text = re.sub(r"[^a-z ]+", "", text)
    return re.sub(r"\s+", " ", text).strip()


def normalise_label(raw: object) -> str | None:
    """Map a raw label string to one of LABELS, or None when it is not a label."""
    if not isinstance(raw, str):
        return None
    return _SYNONYMS.get(_canonical_key(raw))
