"""Prompt templates: files parse, render, hash by content, and version sets of prompts."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.prompts import (
    OUTPUT_SCHEMAS,
    PROMPTS_DIR,
    PromptError,
    available_prompts,
    format_passages,
    load_prompt,
    parse_template,
    template_hash,
)

REQUIRED_PROMPTS = {"label_rebuttal", "label_manuscript", "extract_claims", "tag_fact", "verify"}

TEMPLATE = """---
id: {prompt_id}
version: 1
output_schema: verdict
---
[system]
Judge the claim. Reply as JSON like {{{{"label": "..."}}}}.
[user]
Claim: {{claim}}
"""


def write_template(directory: Path, prompt_id: str, extra: str = "") -> Path:
    path = directory / f"{prompt_id}.md"
    path.write_text(TEMPLATE.format(prompt_id=prompt_id) + extra, encoding="utf-8")
    return path


def test_every_required_prompt_ships_with_a_known_schema_and_its_fields() -> None:
    assert REQUIRED_PROMPTS <= set(available_prompts())
    expected_fields = {
        "label_rebuttal": {"claim", "author_response"},
        "label_manuscript": {"claim", "evidence"},
        "extract_claims": {"review_text"},
        "tag_fact": {"claim"},
        "verify": {"claim", "evidence"},
    }
    for prompt_id, fields in expected_fields.items():
        template = load_prompt(prompt_id)
        assert template.prompt_id == prompt_id
        assert template.output_schema_name in OUTPUT_SCHEMAS
        assert template.fields == fields
        assert template.system and template.user


@pytest.mark.parametrize("prompt_id", ["label_rebuttal", "label_manuscript", "verify"])
def test_labelling_schemas_constrain_label_to_the_four_labels(prompt_id: str) -> None:
    schema = load_prompt(prompt_id).output_schema
    assert schema is not None
    assert schema["properties"]["label"]["enum"] == list(LABELS)
    assert "label" in schema["required"]


def test_render_fills_variables_and_keeps_literal_braces() -> None:
    messages = load_prompt("label_rebuttal").render(
        {"claim": "The paper lacks {ablations}.", "author_response": "See Table 3."}
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "The paper lacks {ablations}." in messages[1]["content"]
    assert "See Table 3." in messages[1]["content"]
    assert "{claim}" not in messages[1]["content"]


def test_render_names_the_prompt_and_every_missing_variable() -> None:
    with pytest.raises(PromptError, match=r"label_manuscript.*\['claim', 'evidence'\]"):
        load_prompt("label_manuscript").render({})


def test_template_hash_is_sha256_of_the_file_content() -> None:
    for prompt_id in REQUIRED_PROMPTS:
        file_bytes = (PROMPTS_DIR / f"{prompt_id}.md").read_bytes()
        assert template_hash(prompt_id) == hashlib.sha256(file_bytes).hexdigest()


def test_editing_a_template_changes_its_hash(tmp_path: Path) -> None:
    write_template(tmp_path, "alpha")
    write_template(tmp_path, "beta")
    before, unrelated = template_hash("alpha", tmp_path), template_hash("beta", tmp_path)

    write_template(tmp_path, "alpha", extra="Be brief.\n")

    assert template_hash("alpha", tmp_path) != before
    assert template_hash("beta", tmp_path) == unrelated


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no front matter\n[user]\nx", "front matter"),
        ("---\nversion: 1\n---\n[user]\nx", "lacks 'id'"),
        ("---\nid: a\nversion: 1\noutput_schema: nope\n---\n[user]\nx", "unknown output_schema"),
        ("---\nid: a\nversion: 1\n---\n[system]\nonly system", "lacks a '\\[user\\]'"),
    ],
)
def test_malformed_templates_are_rejected_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(PromptError, match=message):
        parse_template(text, "broken.md")


def test_unknown_prompt_and_mismatched_id_are_named(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="unknown prompt 'nope'"):
        load_prompt("nope")
    (tmp_path / "gamma.md").write_text(TEMPLATE.format(prompt_id="delta"), encoding="utf-8")
    with pytest.raises(PromptError, match="differs from the file name"):
        load_prompt("gamma", tmp_path)


def test_format_passages_tags_each_passage_with_its_id() -> None:
    text = format_passages([("c1", " First passage. "), ("c7", "Second.")])
    assert text == "[c1] First passage.\n\n[c7] Second."
