"""Pure logic of an LLM call: identity, messages, strict JSON parsing, cost.

Everything here is deterministic and free of I/O so the gateway (resources/llm_gateway/)
stays a thin shell around it. A call's identity is the sha256 of everything that can change
the answer (backend, model, template hash, rendered messages, decoding parameters including
the output schema): two calls with the same id are interchangeable, which is what lets the
ledger serve repeats without asking the model again.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from peerify_dagster.domain.labels import normalise_label

Message = dict[str, str]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal values hash equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def render_messages(system: str | None, user: str) -> list[Message]:
    """Chat messages for one system + user turn; an empty system prompt is left out."""
    messages: list[Message] = []
    if system and system.strip():
        messages.append({"role": "system", "content": system.strip()})
    messages.append({"role": "user", "content": user.strip()})
    return messages


def compute_call_id(
    backend: str,
    model: str,
    template_hash: str,
    messages: Sequence[Message],
    decoding: Mapping[str, Any],
) -> str:
    """sha256 over everything that determines a model's answer (see module docstring)."""
    identity = {
        "backend": backend,
        "model": model,
        "template_hash": template_hash,
        "messages": list(messages),
        "decoding": dict(decoding),
    }
    return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


class JsonExtractionError(ValueError):
    """The text holds no JSON object."""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in `text`, tolerating code fences and chatter around it.

    Small models often wrap the object in prose or Markdown fences; the object itself must
    still be valid JSON: nothing is repaired, so a broken answer stays a parse failure.
    """
    if not isinstance(text, str) or not text.strip():
        raise JsonExtractionError("empty answer")
    candidates = [match.group(1) for match in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in (index for index, char in enumerate(candidate) if char == "{"):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    raise JsonExtractionError(f"no JSON object found in answer starting {text.strip()[:80]!r}")


def validate_against_schema(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Problems with `value` under the JSON-schema subset we use (type, required, enum, items).

    Returns an empty list when the value conforms. Unknown keywords are ignored on purpose:
    the schemas are ours and stay within this subset.
    """
    problems: list[str] = []
    expected_type = schema.get("type")
    if isinstance(expected_type, str):
        allowed = _JSON_TYPES.get(expected_type, (object,))
        # bool is an int subclass in Python; JSON keeps them apart.
        is_bool_for_number = isinstance(value, bool) and expected_type in ("integer", "number")
        if not isinstance(value, allowed) or is_bool_for_number:
            return [f"{path}: expected {expected_type}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} is not one of {list(schema['enum'])}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                problems.append(f"{path}: missing required key {key!r}")
        for key, sub_schema in schema.get("properties", {}).items():
            if key in value:
                problems.extend(validate_against_schema(value[key], sub_schema, f"{path}.{key}"))
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            problems.extend(validate_against_schema(item, schema["items"], f"{path}[{index}]"))
    return problems


def schema_has_label(schema: Mapping[str, Any] | None) -> bool:
    """Whether answers under this schema carry a verification label."""
    return bool(schema) and "label" in schema.get("properties", {})


@dataclass(frozen=True)
class ParsedAnswer:
    """The outcome of strictly parsing one raw answer."""

    parsed: dict[str, Any] | None
    parse_ok: bool
    label: str | None
    problem: str | None


def parse_answer(raw: str, schema: Mapping[str, Any] | None) -> ParsedAnswer:
    """Strictly parse a raw answer against `schema`; never invent a label.

    Without a schema the answer is free text and counts as parsed. With one, the answer
    must contain a JSON object that conforms; a `label` field is normalised to the fixed
    vocabulary, and a label outside it makes the whole answer a parse failure.
    """
    if not schema:
        return ParsedAnswer(parsed=None, parse_ok=True, label=None, problem=None)
    try:
        obj = extract_json_object(raw)
    except JsonExtractionError as error:
        return ParsedAnswer(parsed=None, parse_ok=False, label=None, problem=str(error))
    label: str | None = None
    if schema_has_label(schema):
        label = normalise_label(obj.get("label"))
        if label is None:
            return ParsedAnswer(
                parsed=obj, parse_ok=False, label=None,
                problem=f"label {obj.get('label')!r} is not a verification label",
            )
        obj = {**obj, "label": label}
    problems = validate_against_schema(obj, schema)
    if problems:
        return ParsedAnswer(parsed=obj, parse_ok=False, label=None, problem="; ".join(problems))
    return ParsedAnswer(parsed=obj, parse_ok=True, label=label, problem=None)


def answer_justification(parsed: str | None) -> str | None:
    """The justification a model gave with its label (a ledger row's `parsed` JSON answer), when it gave one."""
    try:
        answer = json.loads(parsed) if parsed else None
    except json.JSONDecodeError:
        return None
    value = answer.get("justification") if isinstance(answer, dict) else None
    return value.strip() if isinstance(value, str) and value.strip() else None


def estimate_cost_usd(
    tokens_in: int, tokens_out: int, price_in_per_million: float, price_out_per_million: float
) -> float:
    """Estimated price of one call from list prices per million tokens."""
    return (tokens_in * price_in_per_million + tokens_out * price_out_per_million) / 1_000_000


def estimate_tokens(text: str) -> int:
    """Rough token count (about four characters a token) for budgets and context checks."""
    return max(1, len(text) // 4)


def strict_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy that OpenAI's strict structured-output mode accepts.

    Strict mode wants every object closed (`additionalProperties: false`) with all of its
    properties required; our schemas already require every property they declare.
    """
    result = dict(schema)
    if result.get("type") == "object":
        properties = {key: strict_json_schema(sub) for key, sub in result.get("properties", {}).items()}
        result.update(properties=properties, required=list(properties), additionalProperties=False)
    if isinstance(result.get("items"), Mapping):
        result["items"] = strict_json_schema(result["items"])
    return result


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait as the server asked (`retry-after-ms`, or `retry-after` in seconds or as a date)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def backoff_delay(
    attempt: int, base_s: float, cap_s: float, retry_after_s: float | None, rng: random.Random
) -> float:
    """Seconds to wait before retry number `attempt` (1-based).

    A server's Retry-After wins; otherwise exponential growth capped at `cap_s`, with "equal
    jitter" (half fixed, half random) so parallel workers do not retry in lockstep.
    """
    if retry_after_s is not None:
        return retry_after_s
    ceiling = min(cap_s, base_s * 2 ** (attempt - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)
