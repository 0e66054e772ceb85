"""Prediction configurations (verifier x retriever x mode x claims) and what each claim of a venue is shown.

A configuration file (`configurations.yaml`) names every configuration once; each becomes a partition (with the
venue) of the `predictions` asset, so adding one computes only that one. The file also says which configurations
a venue builds by default (`venues:`), so the `sample` venue runs a small subset. Every claim a configuration
covers keeps one row per verifier model: sent to the model (`ok`), or the status saying why not
(`no_manuscript`, `no_evidence`, `too_long` for a manuscript that does not fit the model's window: it is never
truncated; `no_thread` in mode `thread` for a claim whose review has no author text).

Mode `thread` shows the verifier the claim's thread text (claim_threads) with the thread labeller's prompt
(`label_rebuttal`), so verifier and labeller are given the same task.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from peerify_dagster.domain.labelling import THREAD_PROMPT
from peerify_dagster.domain.prompts import format_passages
from peerify_dagster.domain.records import RecordError, decoded
from peerify_dagster.domain.retrieval import RETRIEVER_CONFIGS
from peerify_dagster.domain.venues import UPLOAD_KEY_PREFIX

MODE_RAG = "rag"  # the top-k passages of a retriever
MODE_FULL_CONTEXT = "full_context"  # every chunk of the manuscript, when it fits the model's context window
MODE_ORACLE = "oracle"  # the gold chunks (PaperSourced claims)
MODE_THREAD = "thread"  # the claim's review thread (claim_threads), no manuscript
MODES = (MODE_RAG, MODE_FULL_CONTEXT, MODE_ORACLE, MODE_THREAD)
VERIFY_PROMPT = "verify"  # the prompt of every mode but thread, which uses the thread labeller's THREAD_PROMPT
# The venue tables a configuration's predictions read, and the one only mode thread reads.
INPUT_TABLES = ("retrieval_queries", "retrieval_runs", "chunks")
THREAD_TABLE = "claim_threads"
DEFAULT_K = 10  # as in the paper

STATUS_OK = "ok"
STATUS_NO_MANUSCRIPT = "no_manuscript"
STATUS_NO_EVIDENCE = "no_evidence"
STATUS_TOO_LONG = "too_long"
STATUS_NO_THREAD = "no_thread"
STATUSES = (STATUS_OK, STATUS_NO_MANUSCRIPT, STATUS_NO_EVIDENCE, STATUS_TOO_LONG, STATUS_NO_THREAD)

# retrieval_queries' `source` values, and the claim populations a configuration may ask for. The review slices are
# all subsets of the venue's review claims, so a configuration predicts every review claim once and the metrics
# join the slices to the predictions.
SOURCE_PAPER = "paper_sourced"
SOURCE_ANSWER_KEY = "answer_key"
SOURCE_REVIEW = "review"
CLAIM_SETS: dict[str, str] = {
    "PaperSourced": SOURCE_PAPER, "RebuttalSourced": SOURCE_REVIEW, "LLMJudged": SOURCE_REVIEW,
    "HighAgreement": SOURCE_REVIEW, "VerifiableOnly": SOURCE_REVIEW, "HumanVerified": SOURCE_REVIEW,
    "AnswerKey": SOURCE_ANSWER_KEY,
}
VERIFIERS_ROLE = "verifiers"
# The paper's non-LLM baseline: `verifier: nli:<folder>`, a local sequence-classification (NLI) model over the top-k
# chunks, its classes named by the model's own config (id2label).
NLI_PREFIX = "nli:"
NLI_LABELS = {"entailment": "Supported", "contradiction": "Not Supported", "neutral": "Not Determined"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a partition key that is also a file name and a URL part
# Tokens per character used to decide whether a manuscript fits a window without the model's tokenizer: one token
# per 3 characters over-counts English text for the tokenizers in models.yaml, so a manuscript that "fits" fits.
CHARS_PER_TOKEN = 3


CONFIGURATION_HASH = "configuration_hash"  # predictions metadata key: the definition a partition was built from
PAIR_SEPARATOR = "|"  # a predictions partition key is `<configuration>|<venue>`; never in a configuration name (_NAME)


def prediction_key(venue: str, configuration: str) -> str:
    return f"{configuration}{PAIR_SEPARATOR}{venue}"


def venue_and_configuration(key: str) -> tuple[str, str]:
    """The (venue, configuration) of a predictions partition key."""
    configuration, _, venue = key.partition(PAIR_SEPARATOR)
    return venue, configuration


class ConfigurationError(ValueError):
    """A configuration file that cannot be used; the message names the file, the configuration and the reason."""


@dataclass(frozen=True)
class Configuration:
    name: str
    verifier: str  # a model of models.yaml, or the role `verifiers` (each of its models)
    mode: str
    retriever: str | None = None  # rag only
    k: int = DEFAULT_K  # rag only: passages shown
    claims: tuple[str, ...] = tuple(CLAIM_SETS)  # names of CLAIM_SETS

    @property
    def nli_model(self) -> Path | None:
        """The local NLI model folder of an NLI baseline, None for an LLM verifier."""
        return Path(self.verifier.removeprefix(NLI_PREFIX)) if self.verifier.startswith(NLI_PREFIX) else None

    @property
    def sources(self) -> frozenset[str]:
        """The retrieval_queries sources this configuration predicts (oracle: PaperSourced only)."""
        wanted = {CLAIM_SETS[name] for name in self.claims}
        return frozenset(wanted & {SOURCE_PAPER} if self.mode == MODE_ORACLE else wanted)

    @property
    def prompt_id(self) -> str:
        return THREAD_PROMPT if self.mode == MODE_THREAD else VERIFY_PROMPT

    def content_hash(self) -> str:
        """Changes when the definition does: a partition built from another definition is stale."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Configurations:
    path: Path
    configurations: dict[str, Configuration]
    venue_defaults: dict[str, tuple[str, ...]] = field(default_factory=dict)  # venue -> the configurations it builds
    release_defaults: tuple[str, ...] | None = None  # what a venue imported from a release builds unless listed
    other_defaults: tuple[str, ...] | None = None  # what any other venue not listed builds (the paper's grid)
    upload_defaults: tuple[str, ...] | None = None  # what a `peerify verify` upload venue builds by default

    def for_venue(self, venue: str, release: bool = False) -> list[Configuration]:
        """The configurations `peerify build <venue>` runs: the venue's list, else (a venue imported from a release,
        or an upload venue of `peerify verify`, whose names the file cannot know in advance) `release_venues:` or
        `upload_venues:`, else `default_venues:` (the paper's grid: never another venue's small demo list), else, in
        a file without it, all of them."""
        fallback = self.other_defaults or tuple(self.configurations)
        if release and self.release_defaults:
            fallback = self.release_defaults
        if venue.startswith(UPLOAD_KEY_PREFIX) and self.upload_defaults:
            fallback = self.upload_defaults
        names = self.venue_defaults.get(venue, fallback)
        return [self.configurations[name] for name in names]

    def get(self, name: str) -> Configuration:
        if name not in self.configurations:
            raise ConfigurationError(f"{self.path}: no configuration {name!r}; known: {sorted(self.configurations)}")
        return self.configurations[name]


def load_configurations(path: Path, models: Collection[str], roles: Collection[str] = (VERIFIERS_ROLE,),
                        retrievers: Collection[str] = tuple(RETRIEVER_CONFIGS)) -> Configurations:
    """Read and check the configuration file against the known models (models.yaml), roles and retrievers; the first
    problem raises ConfigurationError naming the file and the configuration."""
    try:
        raw = yaml.safe_load(decoded(Path(path).read_bytes(), str(path)))
    except OSError as error:
        raise ConfigurationError(f"configuration file {path} cannot be read ({error.strerror or error})") from None
    except RecordError as error:  # not UTF-8: `file:line: reason`
        raise ConfigurationError(f"configuration file {error}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as error:  # also a number past int()'s digits, deep nesting
        raise ConfigurationError(f"configuration file {path}: not valid YAML ({' '.join(str(error).split())})") \
            from None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("configurations"), Mapping) \
            or not raw["configurations"]:
        raise ConfigurationError(f"configuration file {path}: expected a mapping `configurations:` of one or more "
                                 "named configurations")
    configurations = {str(name): _configuration(path, str(name), entry, models, roles, retrievers)
                      for name, entry in raw["configurations"].items()}
    if not isinstance(raw.get("venues") or {}, Mapping):
        raise ConfigurationError(f"{path}: venues: expected a mapping of venue -> configuration names")
    venue_defaults = {str(venue): _names(path, f"venues.{venue}", names, configurations)
                      for venue, names in (raw.get("venues") or {}).items()}
    release, other, upload = (_names(path, key, raw[key], configurations) if key in raw else None
                              for key in ("release_venues", "default_venues", "upload_venues"))
    return Configurations(Path(path), configurations, venue_defaults, release, other, upload)


def _names(path: Path, where: str, names: Any, configurations: Mapping[str, Configuration]) -> tuple[str, ...]:
    """A list of configuration names of the file (`venues.<venue>`, `release_venues`, `default_venues`,
    `upload_venues`), checked."""
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise ConfigurationError(f"{path}: {where}: expected a list of configuration names")
    unknown = [n for n in names if n not in configurations]
    if unknown:
        raise ConfigurationError(f"{path}: {where} names unknown configurations {unknown}; "
                                 f"known: {sorted(configurations)}")
    return tuple(names)


def _configuration(path: Path, name: str, entry: Any, models: Collection[str], roles: Collection[str],
                   retrievers: Collection[str]) -> Configuration:
    where = f"{path}: configuration {name!r}"
    if not _NAME.match(name):
        raise ConfigurationError(f"{where}: a name is letters, digits, '.', '_' and '-' (it is a partition key)")
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"{where}: expected a mapping with verifier, mode, ...")
    unknown = sorted(set(entry) - {"verifier", "mode", "retriever", "k", "claims"})
    if unknown:
        raise ConfigurationError(f"{where}: unknown settings {unknown}")
    verifier, mode = entry.get("verifier"), entry.get("mode", MODE_RAG)
    if isinstance(verifier, str) and verifier.startswith(NLI_PREFIX):
        folder = Path(path).parent / verifier.removeprefix(NLI_PREFIX)  # relative to the file; absolute stays
        if not folder.is_dir():
            raise ConfigurationError(f"{where}: NLI model folder {folder} does not exist (only local models load)")
        if mode != MODE_RAG:
            raise ConfigurationError(f"{where}: an NLI verifier reads the top-k chunks of a retriever (mode rag)")
        verifier = f"{NLI_PREFIX}{folder.resolve()}"
    elif verifier not in models and verifier not in roles:
        raise ConfigurationError(f"{where}: unknown verifier {verifier!r}; a model of models.yaml "
                                 f"({', '.join(sorted(models))}), a role ({', '.join(sorted(roles))}) or "
                                 f"{NLI_PREFIX}<local model folder>")
    if mode not in MODES:
        raise ConfigurationError(f"{where}: unknown mode {mode!r}; known: {', '.join(MODES)}")
    retriever = entry.get("retriever")
    if mode == MODE_RAG and retriever not in retrievers:
        raise ConfigurationError(f"{where}: unknown retriever {retriever!r}; known: {', '.join(retrievers)}")
    if mode != MODE_RAG and retriever is not None:
        raise ConfigurationError(f"{where}: mode {mode} uses no retriever (got {retriever!r})")
    k = entry.get("k", DEFAULT_K)
    if mode == MODE_RAG and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ConfigurationError(f"{where}: k must be a positive integer, got {k!r}")
    claims = entry.get("claims", list(CLAIM_SETS))
    if not isinstance(claims, list) or not claims or any(c not in CLAIM_SETS for c in claims):
        raise ConfigurationError(f"{where}: claims must be a list of {', '.join(CLAIM_SETS)}; got {claims!r}")
    return Configuration(name=name, verifier=verifier, mode=mode, retriever=retriever if mode == MODE_RAG else None,
                         k=k if mode == MODE_RAG else 0, claims=tuple(claims))


@dataclass(frozen=True)
class PlannedPrediction:
    claim: Mapping[str, Any]  # a retrieval_queries row: claim_id, paper_id, claim_text, source, gold_chunk_ids, ...
    status: str
    evidence_chunk_ids: list[str]  # in the order the verifier sees them; empty without a call, and in mode thread
    reason: str | None = None  # why no call is made
    thread_text: str | None = None  # mode thread: the author text the verifier sees


def estimated_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def prompt_window(context_window: int, max_tokens: int | None, template_text: str) -> int:
    """Tokens left for the claim and its evidence: the model's window less the answer and the prompt template."""
    return context_window - int(max_tokens or 0) - estimated_tokens(template_text)


def verifier_item(claim_text: str, passages: Iterable[tuple[str, str]], thread_text: str | None) -> dict[str, str]:
    """The prompt's variables of one call: the thread prompt's author text (mode thread), else `verify`'s passages
    ((chunk id, text) in the order shown)."""
    if thread_text is not None:
        return {"claim": claim_text, "author_response": thread_text}
    return {"claim": claim_text, "evidence": format_passages(list(passages))}


def verifier_items(planned: Iterable[PlannedPrediction], text_of: Mapping[str, str]) -> list[dict[str, str]]:
    """The prompt's variables for each planned prediction that makes a call, in plan order."""
    return [verifier_item(p.claim["claim_text"], [(chunk_id, text_of[chunk_id]) for chunk_id in p.evidence_chunk_ids],
                          p.thread_text)
            for p in planned if p.status == STATUS_OK]


def chunks_by_paper(chunks: pl.DataFrame) -> tuple[dict[str, list[tuple[str, str]]], dict[str, str]]:
    """paper id -> its (chunk id, text) in manuscript order; chunk id -> text."""
    paper_chunks: dict[str, list[tuple[str, str]]] = {}
    for paper_id, chunk_id, text in chunks.sort("paper_id", "order").select("paper_id", "chunk_id", "text").iter_rows():
        paper_chunks.setdefault(paper_id, []).append((chunk_id, text))
    return paper_chunks, dict(zip(chunks["chunk_id"], chunks["text"]))


def plan_predictions(
    configuration: Configuration,
    claims: Iterable[Mapping[str, Any]],
    run_rows: Iterable[Mapping[str, Any]],
    paper_chunks: Mapping[str, Sequence[tuple[str, str]]],
    context_window: int | None = None,
    threads: Mapping[str, str | None] | None = None,
) -> list[PlannedPrediction]:
    """One entry per claim the configuration covers, in claim order: the chunk ids (or, mode thread, the thread text)
    the verifier is shown, or the status and reason for which it gets no call. `paper_chunks`: paper id -> (chunk id,
    text) in manuscript order; `context_window`: tokens the verifier may be sent (prompt and answer), needed for
    full_context and thread; `threads`: claim id -> its thread text (claim_threads), needed for thread."""
    covered = [c for c in claims if c["source"] in configuration.sources]
    if configuration.mode == MODE_RAG:
        ranked, problems = _ranked(run_rows, configuration.retriever, configuration.k)
    planned = []
    for claim in covered:
        claim_id, paper_id = claim["claim_id"], claim["paper_id"]
        chunks = paper_chunks.get(paper_id)
        if configuration.mode == MODE_THREAD:  # the thread alone: no manuscript needed
            planned.append(_plan_thread(claim, (threads or {}).get(claim_id), context_window))
        elif not chunks:
            planned.append(PlannedPrediction(claim, STATUS_NO_MANUSCRIPT, [],
                                             f"paper {paper_id} has no usable manuscript (no chunks)"))
        elif configuration.mode == MODE_RAG:
            if ranked.get(claim_id):
                planned.append(PlannedPrediction(claim, STATUS_OK, ranked[claim_id]))
            else:
                why = problems.get(claim_id) or problems.get(None) or "no rows for this claim"
                planned.append(PlannedPrediction(claim, STATUS_NO_EVIDENCE, [],
                                                 f"retriever {configuration.retriever} gave no passages ({why})"))
        elif configuration.mode == MODE_ORACLE:
            known = {chunk_id for chunk_id, _ in chunks}
            gold = [chunk_id for chunk_id in claim.get("gold_chunk_ids") or [] if chunk_id in known]
            planned.append(PlannedPrediction(claim, STATUS_OK, gold) if gold else PlannedPrediction(
                claim, STATUS_NO_EVIDENCE, [], "no gold chunk of this claim is among its manuscript's chunks"))
        else:
            needed = estimated_tokens(claim["claim_text"] + "".join(text for _, text in chunks))
            if context_window is None or needed > context_window:
                planned.append(PlannedPrediction(claim, STATUS_TOO_LONG, [],
                                                 f"the manuscript (about {needed} tokens with the claim) does not fit "
                                                 f"the verifier's window of {context_window} tokens"))
            else:
                planned.append(PlannedPrediction(claim, STATUS_OK, [chunk_id for chunk_id, _ in chunks]))
    return planned


def _plan_thread(claim: Mapping[str, Any], text: str | None, context_window: int | None) -> PlannedPrediction:
    if not text or not text.strip():
        return PlannedPrediction(claim, STATUS_NO_THREAD, [], "the claim's review has no author text in claim_threads")
    needed = estimated_tokens(claim["claim_text"] + text)
    if context_window is None or needed > context_window:
        return PlannedPrediction(claim, STATUS_TOO_LONG, [], f"the thread (about {needed} tokens with the claim) "
                                                             f"does not fit the verifier's window of {context_window} "
                                                             "tokens")
    return PlannedPrediction(claim, STATUS_OK, [], thread_text=text)


def _ranked(run_rows: Iterable[Mapping[str, Any]], retriever: str | None,
            k: int) -> tuple[dict[str, list[str]], dict[str | None, str]]:
    """claim id -> its top-k chunk ids in rank order; claim id (None: every claim) -> why it has none."""
    hits: dict[str, list[tuple[int, str]]] = defaultdict(list)
    problems: dict[str | None, str] = {}
    for row in run_rows:
        if row["retriever"] != retriever:
            continue
        if row["status"] == "ok":
            if row["rank"] <= k:
                hits[row["claim_id"]].append((row["rank"], row["chunk_id"]))
        else:
            claim_id = None if row["status"] == "unavailable" else row["claim_id"]
            problems[claim_id] = row["status"] + (f": {row['error']}" if row.get("error") else "")
    return {claim_id: [chunk for _, chunk in sorted(ranked)] for claim_id, ranked in hits.items()}, problems


def nli_classes(id2label: Mapping[int, str]) -> dict[int, str]:
    """Output index -> entailment / neutral / contradiction, read from the model config's class names (any case,
    abbreviations such as ENTAIL or CONTRADICT included); a model whose names do not say raises ValueError."""
    classes = {}
    for index, name in id2label.items():
        matches = [nli for nli in NLI_LABELS if nli.startswith(str(name).lower()[:6])]
        if len(matches) != 1:
            raise ValueError(f"NLI class {index} is named {name!r}: not entailment, neutral or contradiction")
        classes[int(index)] = matches[0]
    if sorted(classes.values()) != sorted(NLI_LABELS):
        raise ValueError(f"the model's classes {sorted(id2label.values())} are not entailment, neutral and "
                         "contradiction")
    return classes


def nli_verdict(chunk_classes: Sequence[str]) -> str:
    """The claim's label from the most likely NLI class of each chunk shown: Supported when a chunk entails it, else
    Not Supported when one contradicts it, else Not Determined (entailment first: the evidence needs one chunk)."""
    for nli in ("entailment", "contradiction"):
        if nli in chunk_classes:
            return NLI_LABELS[nli]
    return NLI_LABELS["neutral"]
