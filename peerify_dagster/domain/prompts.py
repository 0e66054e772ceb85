"""Versioned prompt templates: loading, rendering, hashing, and their output schemas.

Each template is a file peerify_dagster/prompts/<id>.md with a small YAML front matter
(`id`, `version`, `output_schema`) and a body split into `[system]` and `[user]` parts that
use str.format fields (`{claim}`; literal braces are doubled). The sha256 of the file is the
template's identity: it enters every call id and the code version of every asset whose code names
the template (domain/code_versions.py), so editing a prompt marks exactly its dependants stale.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from peerify_dagster.domain.citations.vocabulary import CITATION_LABELS, CLAIM_TYPES, HEDGE_LEVELS
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.llm_calls import Message, render_messages

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"

_LABEL_FIELD = {"type": "string", "enum": list(LABELS)}
_SHORT_TEXT = {"type": "string"}
_QUOTED_LABEL = {
    "type": "object",
    "properties": {
        "label": _LABEL_FIELD,
        # maxItems bounds a small model that would copy whole passages until max_tokens
        "evidence_quotes": {"type": "array", "maxItems": 3, "items": {"type": "string"}},
        "justification": _SHORT_TEXT,
    },
    "required": ["label", "evidence_quotes", "justification"],
}

OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    # The two labellers quote the spans they rely on (verbatim, checked against what they saw; see claim_labels).
    "rebuttal_label": _QUOTED_LABEL,
    "manuscript_label": _QUOTED_LABEL,
    "claim_list": {
        "type": "object",
        # maxItems bounds a small model that repeats one claim until max_tokens (a review section rarely holds 12)
        "properties": {"claims": {"type": "array", "maxItems": 12, "items": {"type": "string"}}},
        "required": ["claims"],
    },
    "single_claim": {
        "type": "object",
        "properties": {"claim": _SHORT_TEXT},
        "required": ["claim"],
    },
    "fact_tag": {
        "type": "object",
        "properties": {
            "claim_kind": {"type": "string", "enum": ["factual", "subjective"]},
            "reason": _SHORT_TEXT,
        },
        "required": ["claim_kind", "reason"],
    },
    "verdict": {
        "type": "object",
        "properties": {"label": _LABEL_FIELD, "justification": _SHORT_TEXT},
        "required": ["label", "justification"],
    },
    # `verdict`, not `label`: a `label` key is read as one of Peerify's LABELS (parse_answer), and the citation
    # verdicts' fourth label is Not Enough Information.
    "citation_verdict": {
        "type": "object",
        "properties": {"verdict": {"type": "string", "enum": list(CITATION_LABELS)}, "explanation": _SHORT_TEXT},
        "required": ["verdict", "explanation"],
    },
    "citance_tag": {
        "type": "object",
        "properties": {
            "claim_type": {"type": "string", "enum": list(CLAIM_TYPES)},
            "hedge_level": {"type": "string", "enum": list(HEDGE_LEVELS)},
            "supported_text": _SHORT_TEXT,
        },
        "required": ["claim_type", "hedge_level", "supported_text"],
    },
}


class PromptError(ValueError):
    """A template file is malformed, unknown, or rendered with missing variables."""


@dataclass(frozen=True)
class PromptTemplate:
    """One parsed template file."""

    prompt_id: str
    version: str
    output_schema_name: str | None
    system: str
    user: str
    content_hash: str

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return OUTPUT_SCHEMAS[self.output_schema_name] if self.output_schema_name else None

    @property
    def fields(self) -> frozenset[str]:
        """The variables the template needs."""
        return frozenset(
            name.split(".")[0].split("[")[0]
            for part in (self.system, self.user)
            for _, name, _, _ in string.Formatter().parse(part)
            if name
        )

    def render(self, variables: Mapping[str, Any]) -> list[Message]:
        """Chat messages with the variables filled in; names every missing variable."""
        missing = sorted(self.fields - set(variables))
        if missing:
            raise PromptError(f"prompt {self.prompt_id!r} needs variables {missing}")
        return render_messages(self.system.format(**variables), self.user.format(**variables))


def parse_template(text: str, source: str) -> PromptTemplate:
    """Parse a template file's text; `source` names it in errors."""
    parts = text.split("---\n", 2)
    if len(parts) != 3 or parts[0].strip():
        raise PromptError(f"{source}: must start with a '---' front matter block")
    meta = yaml.safe_load(parts[1]) or {}
    for key in ("id", "version"):
        if key not in meta:
            raise PromptError(f"{source}: front matter lacks {key!r}")
    schema_name = meta.get("output_schema")
    if schema_name is not None and schema_name not in OUTPUT_SCHEMAS:
        raise PromptError(f"{source}: unknown output_schema {schema_name!r}")
    body = parts[2]
    if "[user]" not in body:
        raise PromptError(f"{source}: body lacks a '[user]' section")
    before_user, user = body.split("[user]", 1)
    system = before_user.split("[system]", 1)[1] if "[system]" in before_user else ""
    return PromptTemplate(
        prompt_id=str(meta["id"]),
        version=str(meta["version"]),
        output_schema_name=schema_name,
        system=system.strip(),
        user=user.strip(),
        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )


@lru_cache(maxsize=256)
def _parse_file(path: Path, _mtime_ns: int, _size: int) -> PromptTemplate:
    # The stat fields are part of the cache key so an edited file is read again.
    template = parse_template(path.read_text(encoding="utf-8"), path.name)
    if template.prompt_id != path.stem:
        raise PromptError(f"{path.name}: front matter id {template.prompt_id!r} differs from the file name")
    return template


def load_prompt(prompt_id: str, prompts_dir: Path | None = None) -> PromptTemplate:
    """The template with this id (re-read only when the file changes)."""
    directory = (prompts_dir or PROMPTS_DIR).resolve()
    path = directory / f"{prompt_id}.md"
    if not path.is_file():
        raise PromptError(f"unknown prompt {prompt_id!r}; known prompts: {available_prompts(directory)}")
    stat = path.stat()
    return _parse_file(path, stat.st_mtime_ns, stat.st_size)


def available_prompts(prompts_dir: Path | None = None) -> list[str]:
    """Ids of every template file in the directory."""
    return sorted(path.stem for path in (prompts_dir or PROMPTS_DIR).glob("*.md"))


def template_hash(prompt_id: str, prompts_dir: Path | None = None) -> str:
    """sha256 of the template file's content."""
    return load_prompt(prompt_id, prompts_dir).content_hash


def format_passages(passages: Sequence[tuple[str, str]]) -> str:
    """Evidence passages as the `{evidence}` variable: one `[id] text` block each."""
    return "\n\n".join(f"[{passage_id}] {text.strip()}" for passage_id, text in passages)
