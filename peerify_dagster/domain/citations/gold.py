"""A venue's citation answer key (`gold_citations:` in venues.yaml; the sample's is sample_venue/citation_key.yaml),
read into the gold the citation figures are scored against.

The key names citing sentences by their text, so each is matched to the detected citance of its paper with the
same letters and digits; a key sentence no citance matches is gold the detector missed (it counts against recall and
gets no verdict or evidence gold).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from peerify_dagster.domain.citations.metrics import CitationGold


class CitationKeyError(ValueError):
    """The key file cannot be read; the message names the file and the entry."""


def _letters(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).strip()


def load_citation_gold(path: Path, citances: Iterable[Mapping[str, Any]]) -> CitationGold:
    """The key at `path` against the venue's detected citances (rows with paper_id, citance_id, text). Papers the
    key marks `pdf: false` are left out: their sentences exist only in a source the pipeline never sees."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        papers = [paper for paper in raw["papers"] if paper.get("pdf", True)]
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as error:
        raise CitationKeyError(f"citation key {path}: cannot be read ({error})") from None
    detected = {(row["paper_id"], _letters(row["text"])): row["citance_id"] for row in citances}
    sentences: dict[str, list[str]] = {}
    evidence: dict[tuple[str, str], list[str]] = {}
    verdicts: dict[tuple[str, str], str] = {}
    for paper in papers:
        forum = paper["forum"]
        sentences[forum] = []
        for number, citance in enumerate(paper.get("citances") or [], start=1):
            if not isinstance(citance, Mapping) or not isinstance(citance.get("text"), str):
                raise CitationKeyError(f"citation key {path}: {forum} citance {number} has no text")
            sentences[forum].append(citance["text"])
            citance_id = detected.get((forum, _letters(citance["text"])))
            if citance_id is None:
                continue
            for cited in citance.get("cites") or []:
                pair = (citance_id, f"{forum}:r{cited['entry']}")
                verdicts[pair] = cited["verdict"]
                if cited.get("evidence"):
                    evidence[pair] = [item["text"] if isinstance(item, Mapping) else str(item)
                                      for item in cited["evidence"]]
    return CitationGold(citing_sentences=sentences, evidence=evidence, verdicts=verdicts)
