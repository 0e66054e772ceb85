"""A synthetic venue of any size, cloned from the sample venue's forums and PDFs under new ids."""

from __future__ import annotations

import json
from pathlib import Path

from peerify_dagster.paths import REPO_ROOT

SAMPLE = REPO_ROOT / "peerify_dagster" / "sample_venue" / "snapshot"


def _rename(obj, mapping: dict[str, str]):
    text = json.dumps(obj)
    for old, new in mapping.items():
        text = text.replace(old, new)
    return json.loads(text)


def synthetic_venue(target: Path, n_forums: int) -> int:
    """Clone sample forums (ids rewritten) into `target`; returns the number of notes."""
    forums = sorted((SAMPLE / "forums").glob("*.json"))
    (target / "forums").mkdir(parents=True)
    (target / "pdfs").mkdir()
    (target / "venue.json").write_text((SAMPLE / "venue.json").read_text())
    submissions, notes = [], 0
    for i in range(n_forums):
        source = forums[i % len(forums)]
        record = json.loads(source.read_text())
        ids = {note["id"] for note in record["notes"]} | {e["id"] for e in record.get("edits", [])}
        mapping = {old: f"{old[:4]}{i:06d}" for old in ids}
        clone = _rename(record, mapping)
        new_forum = mapping[source.stem]
        clone["forum_id"] = new_forum
        (target / "forums" / f"{new_forum}.json").write_text(json.dumps(clone))
        submissions.append(next(n for n in clone["notes"] if n["id"] == new_forum))
        notes += len(clone["notes"])
        pdf = SAMPLE / "pdfs" / f"{source.stem}.pdf"
        if pdf.exists():
            (target / "pdfs" / f"{new_forum}.pdf").write_bytes(pdf.read_bytes())
            meta = _rename(json.loads(pdf.with_suffix(".json").read_text()), mapping)
            (target / "pdfs" / f"{new_forum}.json").write_text(json.dumps(meta))
    (target / "submissions.json").write_text(json.dumps({"fetched_at": 0, "notes": submissions}))
    return notes
