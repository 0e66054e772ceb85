"""What changed between two label releases, per slice: claims added, claims removed, and gold labels changed (old ->
new, with the decision ids and call ids the new row names that the old one did not: what caused the change), with
counts, and beside them the code versions and dependencies that changed (release_lineage.py), as a Markdown or an
HTML report. Pure logic on two releases (label_release.ReleaseContents)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from peerify_dagster.domain.release_lineage import LineageChanges, lineage_changes
from peerify_dagster.domain.slices import SLICES

_KEY = ("venue", "claim_id")


@dataclass(frozen=True)
class LabelChange:
    venue: str
    claim_id: str
    old_label: str | None
    new_label: str | None
    decision_ids: tuple[str, ...]  # decisions the new row names and the old one did not
    call_ids: tuple[str, ...]  # calls the new row names and the old one did not

    @property
    def cause(self) -> str:
        named = [f"decision {d}" for d in self.decision_ids] + [f"call {c}" for c in self.call_ids]
        return ", ".join(named) or "no new decision or call (the same provenance read again)"


@dataclass
class SliceDiff:
    name: str
    old_rows: int
    new_rows: int
    added: list[tuple[str, str]] = field(default_factory=list)  # (venue, claim id), sorted
    removed: list[tuple[str, str]] = field(default_factory=list)
    changed: list[LabelChange] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed)


@dataclass
class ReleaseDiff:
    old_version: str
    new_version: str
    slices: list[SliceDiff]
    lineage: LineageChanges = field(default_factory=LineageChanges)

    @property
    def changes(self) -> int:
        return sum(len(s.added) + len(s.removed) + len(s.changed) for s in self.slices)


def _keyed(frame: pl.DataFrame) -> dict[tuple[str, str], dict]:
    return {(row["venue"], row["claim_id"]): row for row in frame.iter_rows(named=True)}


def _new_ids(old: list[str] | None, new: list[str] | None) -> tuple[str, ...]:
    return tuple(i for i in new or [] if i not in set(old or []))


def slice_diff(name: str, old: pl.DataFrame, new: pl.DataFrame) -> SliceDiff:
    """One slice's rows compared by (venue, claim id)."""
    before, after = _keyed(old), _keyed(new)
    diff = SliceDiff(name, old.height, new.height, added=sorted(set(after) - set(before)),
                     removed=sorted(set(before) - set(after)))
    for key in sorted(set(before) & set(after)):
        was, now = before[key], after[key]
        if was["gold_label"] != now["gold_label"]:
            diff.changed.append(LabelChange(*key, was["gold_label"], now["gold_label"],
                                            _new_ids(was["gold_decision_ids"], now["gold_decision_ids"]),
                                            _new_ids(was["gold_call_ids"], now["gold_call_ids"])))
    return diff


def release_diff(old_version: str, old: Mapping[str, pl.DataFrame], new_version: str,
                 new: Mapping[str, pl.DataFrame], old_manifest: Mapping | None = None,
                 new_manifest: Mapping | None = None) -> ReleaseDiff:
    """Every slice of two releases compared (`old` / `new`: slice -> rows; a slice one of them lacks counts as
    empty), and their manifests' code versions and dependencies."""
    def rows(slices: Mapping[str, pl.DataFrame], name: str) -> pl.DataFrame:
        frame = slices.get(name)
        return frame if frame is not None else pl.DataFrame(schema={"venue": pl.String, "claim_id": pl.String,
                                                                    "gold_label": pl.String})
    return ReleaseDiff(old_version, new_version, [slice_diff(name, rows(old, name), rows(new, name))
                                                  for name in SLICES],
                       lineage_changes(old_manifest or {}, new_manifest or {}))


# -- reports ----------------------------------------------------------------------------------------------------------
def _summary_rows(diff: ReleaseDiff) -> list[list[str]]:
    return [[s.name, str(s.old_rows), str(s.new_rows), str(len(s.added)), str(len(s.removed)), str(len(s.changed))]
            for s in diff.slices]


_SUMMARY_HEAD = ["slice", "rows before", "rows after", "added", "removed", "label changed"]


def _claims(keys: list[tuple[str, str]]) -> list[str]:
    return [f"{claim} ({venue})" for venue, claim in keys]


def _change_line(change: LabelChange) -> str:
    return f"{change.claim_id} ({change.venue}): {change.old_label} -> {change.new_label}, by {change.cause}"


def _lineage_sections(diff: ReleaseDiff) -> list[tuple[str, list[str]]]:
    """The code and dependency changes, as (heading, lines); a line saying so when there are none."""
    code = [f"{asset}: {old} -> {new}" for asset, old, new in diff.lineage.code]
    return [("Code versions changed", code or ["none: every released table was computed by the same code"]),
            ("Dependencies changed", diff.lineage.dependencies or ["none"])]


def _title(diff: ReleaseDiff) -> str:
    return f"Release {diff.old_version} -> {diff.new_version}: {diff.changes} change(s)"


def markdown_report(diff: ReleaseDiff) -> str:
    lines = [f"# {_title(diff)}", "", "| " + " | ".join(_SUMMARY_HEAD) + " |", "|---" * len(_SUMMARY_HEAD) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in _summary_rows(diff)]
    for s in diff.slices:
        if s.unchanged:
            continue
        lines += ["", f"## {s.name}"]
        for heading, items in (("Added", _claims(s.added)), ("Removed", _claims(s.removed)),
                               ("Label changed", [_change_line(c) for c in s.changed])):
            if items:
                lines += ["", f"{heading}:", ""] + [f"- {item}" for item in items]
    for heading, items in _lineage_sections(diff):
        lines += ["", f"## {heading}", ""] + [f"- {item}" for item in items]
    return "\n".join(lines) + "\n"


def html_report(diff: ReleaseDiff) -> str:
    def cells(row: list[str], tag: str) -> str:
        return "<tr>" + "".join(f"<{tag}>{html.escape(cell)}</{tag}>" for cell in row) + "</tr>"

    body = [f"<h1>{html.escape(_title(diff))}</h1>", "<table>", cells(_SUMMARY_HEAD, "th")]
    body += [cells(row, "td") for row in _summary_rows(diff)] + ["</table>"]
    for s in diff.slices:
        if s.unchanged:
            continue
        body.append(f"<h2>{html.escape(s.name)}</h2>")
        for heading, items in (("Added", _claims(s.added)), ("Removed", _claims(s.removed)),
                               ("Label changed", [_change_line(c) for c in s.changed])):
            if items:
                body += [f"<h3>{heading}</h3>", "<ul>"] + [f"<li>{html.escape(i)}</li>" for i in items] + ["</ul>"]
    for heading, items in _lineage_sections(diff):
        body += [f"<h2>{heading}</h2>", "<ul>"] + [f"<li>{html.escape(i)}</li>" for i in items] + ["</ul>"]
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>"
            f"{html.escape(_title(diff))}</title></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


REPORTS = {"markdown": markdown_report, "html": html_report}
