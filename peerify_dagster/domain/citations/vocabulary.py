"""The citation verdicts' and the citance tagger's fixed vocabularies, kept apart from the modules that use them so
that `domain/prompts.py` can build its output schemas from them (verdicts.py renders prompts, so prompts.py cannot
import it)."""

from __future__ import annotations

SUPPORTED = "Supported"
PARTIALLY_SUPPORTED = "Partially Supported"
NOT_SUPPORTED = "Not Supported"
NOT_ENOUGH_INFORMATION = "Not Enough Information"
# RefVerifier's four verdicts. Not Peerify's LABELS: its fourth label (Not Determined) also covers claims that are a
# matter of opinion, whereas a citation's fourth verdict says only that the cited paper's text does not address it.
CITATION_LABELS: tuple[str, ...] = (SUPPORTED, PARTIALLY_SUPPORTED, NOT_SUPPORTED, NOT_ENOUGH_INFORMATION)

# What a citing sentence claims of the cited work (the rule-based detector's and the citance tagger's types), and how
# hedged it is, as the citance tagger says (the rule-based detector says only whether it is).
CLAIM_TYPES: tuple[str, ...] = ("causal", "predictive", "comparative", "quantitative", "descriptive")
HEDGE_LEVELS: tuple[str, ...] = ("none", "weak", "strong")

# A reference entry's check against the metadata sources (domain/citations/metadata.py), worst first: what a reviewer
# should look at before the rest.
VALIDATED, UNVALIDATABLE, SUSPICIOUS, NOT_FOUND = "validated", "unvalidatable", "suspicious", "not_found"
REFERENCE_STATUSES = (NOT_FOUND, SUSPICIOUS, UNVALIDATABLE, VALIDATED)
