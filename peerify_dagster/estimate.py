"""`peerify build <venue> --estimate`: the LLM calls a build of the venue would make, for every LLM stage of the graph
(domain/llm_stages.py; each prediction configuration is one stage), per role and model, with input/output tokens and
cost (prices from models.yaml) as a range, without calling any model; calls the ledger already answers are free.
`peerify verify --estimate` counts the stages a verification runs the same way, from the upload laid out as a snapshot.

Each stage is counted from the best source there is, named in the `counted from` column:
- `lake`: the stage's tables are built: the calls they reference (ledger hits unless the ledger lost them), and the
  predictions of a configuration planned exactly from the venue's retrieval tables;
- `snapshot` / `crawl` / `upload`: nothing built yet, but the venue's forums (an upload's: the files given) are on
  disk: its reviews and their sections counted, claims expected at the release's per-review averages;
- `size x release averages`: nothing crawled yet: the venue's `sample_size` papers times the release's averages.
A venue imported from a release (`peerify import-release`) builds the predictions alone, planned from its imported
claims and passages; before its retrieval has run, a RAG configuration's calls are counted as one per claim whose
paper has passages (`lake, before retrieval: at most`), with its paper's first k passages as the prompt's.
Input tokens are counted at CHARS_PER_TOKEN characters per token (an over-count); output tokens are the mean of the
ledger's answers of that model and prompt, else the model's max_tokens.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from peerify_dagster.domain import predictions as pred
from peerify_dagster.domain.citations.options import CitationOptions
from peerify_dagster.domain.claims import review_sections
from peerify_dagster.domain.forum_tables import REVIEW_TEXT_FIELDS
from peerify_dagster.domain.llm_stages import (
    CITANCE_TAGGING,
    CITATION_VERDICTS,
    LLM_STAGES,
    PAPER_CLAIMS,
    PREDICTIONS,
    REVIEW_CITATION_VERDICTS,
    STAGES_BY_NAME,
    LLMStage,
)
from peerify_dagster.domain.notes import MalformedNote, classify, note_api_version, read_note, text_value
from peerify_dagster.domain.prompts import load_prompt
from peerify_dagster.domain.venues import SOURCE_RELEASE, SOURCE_SNAPSHOT, SOURCE_UPLOAD, Venue
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway.batches import BATCH_PRICE_FACTOR
from peerify_dagster.resources.store import readable

DEFAULT_ANSWER_TOKENS = 1024  # a model whose decoding sets no max_tokens (the backends' default)
# The published release's per-review averages (BENCHMARKS.md, claim extraction): 3.1 sections a review; 4.3 claims a
# review kept by the extractor up to 9.7 reference claims a review. Reviews a paper: 3 to 5 (ICLR / NeurIPS).
SECTIONS_PER_REVIEW = 3.1
CLAIMS_PER_REVIEW = (4.3, 9.7)
REVIEWS_PER_PAPER = (3, 5)
PARAGRAPHS_PER_PAPER = 5  # PaperClaimsConfig's default: one claim each, then its rephrasing
# Citing sentences a paper, an assumption: RefVerifier's 8 manuscripts held 118 checked claims (about 15 each); a full
# ML paper cites in up to about 60 sentences. Each cites about 1.5 entries; none or all of them may be found.
CITANCES_PER_PAPER = (15, 60)
ENTRIES_PER_CITANCE = 1.5
REVIEW_CITED_WORKS_PER_SECTION = 1  # at most, before anything is built: most review sections cite nothing
BASIS_LAKE, BASIS_SIZE = "lake", "size x release averages"
RUNS_STAND_IN = "lake, before retrieval: at most"
RUNS_TABLE = "retrieval_runs"
# A release venue's build computes only what follows from its imported tables (freshness.computed_from): of the LLM
# stages, the predictions alone (tests/test_cost_control.py holds this to the graph).
RELEASE_STAGES = (PREDICTIONS,)


@dataclass
class EstimateRow:
    stage: str
    role: str
    model: str
    calls: tuple[int, int] = (0, 0)  # (low, high) calls to make (the ledger does not answer them)
    ledger_hits: int = 0  # calls the ledger answers: free, not counted in tokens or cost
    tokens_in: tuple[int, int] = (0, 0)
    tokens_out: tuple[int, int] = (0, 0)
    cost_usd: tuple[float, float] = (0.0, 0.0)
    basis: str = BASIS_LAKE  # where the calls are counted from
    output_basis: str = ""  # where tokens_out comes from


@dataclass
class Estimate:
    rows: list[EstimateRow] = field(default_factory=list)
    not_known: list[tuple[str, str]] = field(default_factory=list)  # (stage, why its calls are not estimated)


@dataclass(frozen=True)
class VenueSize:
    """What the stages' call counts multiply: (low, high) each, and where they come from."""

    papers: int
    reviews: tuple[int, int]
    sections: tuple[int, int]
    section_chars: int | None  # mean characters of a review section, when counted
    basis: str

    @property
    def claims(self) -> tuple[int, int]:
        return round(self.reviews[0] * CLAIMS_PER_REVIEW[0]), round(self.reviews[1] * CLAIMS_PER_REVIEW[1])


def venue_size(lake: Lake, venue: Venue, snapshot: Path) -> VenueSize | None:
    """The venue's reviews from the lake, else from its snapshot or crawl on disk, else its `sample_size` times the
    release's averages; None when none of these is known (a live venue of every submission, not crawled yet)."""
    if lake.table_path("reviews", venue.key).exists():
        reviews = lake.read_table("reviews", venue.key).to_dicts()
        sections = [section for row in reviews for section in review_sections(row, REVIEW_TEXT_FIELDS)]
        papers = len({row["paper_id"] for row in reviews})
        return _counted(papers, len(reviews), [len(s.text) for s in sections], BASIS_LAKE)
    if (snapshot / "forums").is_dir() and any((snapshot / "forums").glob("*.json")):
        return _from_snapshot(venue, snapshot)
    if venue.sample_size:
        reviews = (venue.sample_size * REVIEWS_PER_PAPER[0], venue.sample_size * REVIEWS_PER_PAPER[1])
        return VenueSize(venue.sample_size, reviews, (round(reviews[0] * SECTIONS_PER_REVIEW),
                                                      round(reviews[1] * SECTIONS_PER_REVIEW)), None, BASIS_SIZE)
    return None


def _counted(papers: int, reviews: int, section_lengths: list[int], basis: str) -> VenueSize:
    mean = round(sum(section_lengths) / len(section_lengths)) if section_lengths else None
    return VenueSize(papers, (reviews, reviews), (len(section_lengths),) * 2, mean, basis)


def _from_snapshot(venue: Venue, snapshot: Path) -> VenueSize:
    """Reviews and their prose sections in the forums on disk (the sampled papers' share when `sample_size` draws
    fewer); unreadable notes are skipped: the build reports them."""
    forums = sorted((snapshot / "forums").glob("*.json"))
    lengths, reviews = [], 0
    for path in forums:
        try:
            notes = json.loads(path.read_text()).get("notes", [])
        except (OSError, ValueError, AttributeError):
            continue
        for raw in notes:
            try:
                note = read_note(raw, venue.api_version or note_api_version(raw) or 2)
            except MalformedNote:
                continue
            if classify(note) == "review":
                reviews += 1
                lengths += [len(text) for name in REVIEW_TEXT_FIELDS if (text := (text_value(note,
                                                                                             name) or "").strip())]
    share = min(1.0, venue.sample_size / len(forums)) if venue.sample_size else 1.0
    basis = {SOURCE_SNAPSHOT: "snapshot", SOURCE_UPLOAD: "upload"}.get(venue.source, "crawl")
    size = _counted(round(len(forums) * share), round(reviews * share), lengths, basis)
    return VenueSize(size.papers, size.reviews, (round(len(lengths) * share),) * 2, size.section_chars, basis)


def estimate_build(lake: Lake, venue: Venue, snapshot: Path, configurations: Sequence[pred.Configuration],
                   gateway, stages: Collection[str] | None = None) -> Estimate:  # noqa: ANN001 - an LLMGateway
    """The calls the venue's build would make under `configurations`, every LLM stage (or those named in `stages`:
    a stage left out makes no call and no claim); `gateway` is an LLMGateway that is never asked to call a model."""
    estimate = Estimate()
    runs = {stage.name for stage in LLM_STAGES} if stages is None else set(stages)
    if venue.source == SOURCE_RELEASE:
        runs &= set(RELEASE_STAGES)
    size = venue_size(lake, venue, snapshot)
    means = _mean_tokens(lake)
    options = CitationOptions.from_mapping(venue.citations)
    expected: dict[str, tuple[int, int]] = {}  # stage -> its calls (low, high) when nothing of it is built
    if size is not None:
        claims, papers = _built_rows(lake, venue.key, "review_claims") or size.claims, size.papers
        expected = {"review_claims": size.sections, "claim_types": claims,
                    "paper_claims": (papers * PARAGRAPHS_PER_PAPER, 2 * papers * PARAGRAPHS_PER_PAPER),
                    "claim_labels": (claims[0], 2 * claims[1]),  # per labeller: manuscript; + thread when answered
                    **_citation_calls(lake, venue, options, papers, size.sections)}
    opted_out = {CITANCE_TAGGING: not options.enrichment, REVIEW_CITATION_VERDICTS: not options.review_citations}
    for stage in LLM_STAGES:
        if stage.per_configuration or stage.name not in runs or opted_out.get(stage.name, False):
            continue  # the citance tagger and the reviews' citations run only where the venue turns them on
        for role in stage.roles:
            for model in gateway.models_for_role(role):
                if all(lake.table_path(table, venue.key).exists() for table in stage.call_id_columns):
                    estimate.rows.append(_from_tables(lake, venue.key, stage, role, model, gateway, means))
                elif size is not None:
                    chars = size.section_chars if stage.name == "review_claims" and size.section_chars else None
                    estimate.rows.append(_expected_row(stage.name, stage, role, model, expected[stage.name],
                                                       size.basis, gateway, means, chars))
                else:
                    estimate.not_known.append((stage.name, _unknown_size(venue)))
    llm_configurations = [c for c in configurations if c.nli_model is None] if PREDICTIONS in runs else []
    threaded = any(c.mode == pred.MODE_THREAD for c in llm_configurations)
    # Without retrieval runs yet (a release venue just imported), the retrieval's claims and passages still plan
    # every call; the runs only pick which passages a RAG call shows.
    missing = [table for table in pred.INPUT_TABLES + (pred.THREAD_TABLE,) * threaded
               if table != RUNS_TABLE and not lake.table_path(table, venue.key).exists()]
    if not missing and llm_configurations:
        estimate.rows += _exact_predictions(lake, venue.key, llm_configurations, gateway, means, threaded)
    elif llm_configurations and size is None:
        estimate.not_known.append((PREDICTIONS, _unknown_size(venue)))
    elif llm_configurations:
        drawn = size.papers * PARAGRAPHS_PER_PAPER if PAPER_CLAIMS in runs else 0  # paper claims, at most
        review, paper = _built_rows(lake, venue.key, "review_claims") or size.claims, \
            _built_rows(lake, venue.key, "paper_claims") or (0, drawn)
        stage = STAGES_BY_NAME[PREDICTIONS]
        for configuration in llm_configurations:
            sources = {pred.CLAIM_SETS[name] for name in configuration.claims}
            covered = tuple((review[i] if pred.SOURCE_REVIEW in sources else 0)
                            + (paper[i] if pred.SOURCE_PAPER in sources else 0) for i in (0, 1))
            for model in _verifier_models(configuration, gateway):
                estimate.rows.append(_expected_row(f"predictions:{configuration.name}", stage, pred.VERIFIERS_ROLE,
                                                   model, covered, size.basis, gateway, means,
                                                   prompts=(configuration.prompt_id,)))
    return estimate


def _citation_calls(lake: Lake, venue: Venue, options: CitationOptions, papers: int,
                    review_sections: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """The citation stages' calls (per model of their role): the tagger's one per citance (estimated only where the
    venue turns it on); the verifiers' one per citance x cited entry x evidence mode, from none (no cited paper
    found) to all; the reviews' cited works, from none to REVIEW_CITED_WORKS_PER_SECTION a review section (built:
    one per row of review_citations)."""
    citances = _built_rows(lake, venue.key, "citances") or (papers * CITANCES_PER_PAPER[0],
                                                            papers * CITANCES_PER_PAPER[1])
    pairs = round(citances[1] * ENTRIES_PER_CITANCE * len(options.modes))
    cited = _built_rows(lake, venue.key, "review_citations") or (0, review_sections[1] * REVIEW_CITED_WORKS_PER_SECTION)
    return {CITANCE_TAGGING: citances, CITATION_VERDICTS: (0, pairs), REVIEW_CITATION_VERDICTS: (0, cited[1])}


def _unknown_size(venue: Venue) -> str:
    return (f"nothing of {venue.key} is crawled and its size is unknown (sample_size null: every submission); "
            "crawl it first, or set sample_size")


def _built_rows(lake: Lake, venue: str, table: str) -> tuple[int, int] | None:
    if not lake.table_path(table, venue).exists():
        return None
    rows = lake.read_table(table, venue).height
    return rows, rows


def _verifier_models(configuration: pred.Configuration, gateway) -> list[str]:  # noqa: ANN001
    return ([configuration.verifier] if configuration.verifier in gateway.registry.models
            else gateway.models_for_role(configuration.verifier))


def _per_call(model: str, prompts: Sequence[str], gateway, means: dict,  # noqa: ANN001
              input_chars: int) -> tuple[float, float, str]:
    """Mean input and output tokens of one call of the model over the stage's prompts, and where the output comes
    from."""
    spec = gateway.registry.model(model)
    tokens_in, tokens_out, from_ledger = [], [], True
    for prompt_id in prompts:
        known = means.get((model, prompt_id))
        template = load_prompt(prompt_id)
        tokens_in.append(known[0] if known
                         else pred.estimated_tokens(template.system + template.user + "x" * input_chars))
        if known is None:
            from_ledger = False
        tokens_out.append(known[1] if known else int(spec.decoding.get("max_tokens") or DEFAULT_ANSWER_TOKENS))
    basis = ("mean of the ledger's answers" if from_ledger
             else "max_tokens (no answer of this model and prompt in the ledger)")
    return sum(tokens_in) / len(prompts), sum(tokens_out) / len(prompts), basis


def _priced(row: EstimateRow, gateway) -> EstimateRow:  # noqa: ANN001
    spec = gateway.registry.model(row.model)
    factor = BATCH_PRICE_FACTOR if spec.batch else 1.0  # a batch model's calls are billed at the batch price
    row.cost_usd = tuple(factor * (row.tokens_in[i] * spec.price_in_per_million
                                   + row.tokens_out[i] * spec.price_out_per_million) / 1e6 for i in (0, 1))
    return row


def _expected_row(name: str, stage: LLMStage, role: str, model: str, calls: tuple[int, int], basis: str,
                  gateway, means: dict, input_chars: int | None = None,  # noqa: ANN001
                  prompts: Sequence[str] | None = None) -> EstimateRow:
    tokens_in, tokens_out, output_basis = _per_call(model, prompts or stage.prompts, gateway, means,
                                                    input_chars or stage.typical_input_chars)
    return _priced(EstimateRow(name, role, model, calls, 0, tuple(round(c * tokens_in) for c in calls),
                               tuple(round(c * tokens_out) for c in calls), basis=basis, output_basis=output_basis),
                   gateway)


def _from_tables(lake: Lake, venue: str, stage: LLMStage, role: str, model: str, gateway,  # noqa: ANN001
                 means: dict) -> EstimateRow:
    """A built stage: the calls its tables reference for this role's model are ledger hits; those the ledger lost
    are made again."""
    ids: set[str] = set()
    for table, columns in stage.call_id_columns.items():
        frame = lake.read_table(table, venue)
        model_column = next((c for c in ("model", "extractor_model") if c in frame.columns), None)
        if model_column is not None:
            frame = frame.filter(pl.col(model_column) == model)
        if "role" in frame.columns:
            frame = frame.filter(pl.col("role") == role)
        ids |= {value for column in columns for value in frame[column].drop_nulls()}
    lost = sum(1 for call_id in ids if gateway.ledger.lookup(call_id) is None)
    row = _expected_row(stage.name, stage, role, model, (lost, lost), BASIS_LAKE, gateway, means)
    row.ledger_hits = len(ids) - lost
    return row


def _exact_predictions(lake: Lake, venue: str, configurations: Sequence[pred.Configuration], gateway,  # noqa: ANN001
                       means: dict, threaded: bool) -> list[EstimateRow]:
    """Each configuration's requests planned from the venue's retrieval tables, as its step will make them. Before
    the retrieval has run, a RAG call is planned with its paper's first k passages standing in for the top k: one
    call per claim whose paper has passages, an upper bound (RUNS_STAND_IN), as a retriever may find none for a
    claim (BM25 without a shared term) and two retrievers that rank alike make one call."""
    queries = lake.read_table("retrieval_queries", venue).to_dicts()
    paper_chunks, text_of = pred.chunks_by_paper(lake.read_table("chunks", venue))
    retrieved = lake.table_path(RUNS_TABLE, venue).exists()
    runs = lake.read_table(RUNS_TABLE, venue).to_dicts() if retrieved else _stand_in_runs(
        queries, paper_chunks, configurations)
    threads = dict(lake.read_table(pred.THREAD_TABLE, venue).select("claim_id", "thread_text").iter_rows()) \
        if threaded else None
    rows: dict[tuple[str, str], EstimateRow] = {}  # (stage, model) -> its row; one stage per configuration
    # A call made once is served from the ledger the next time (another configuration): (scope, call id) seen. The
    # stand-in passages are the same for every retriever while their real calls are not: scoped by retriever.
    seen: set[tuple[str | None, str]] = set()
    for configuration in configurations:
        prompt_id = configuration.prompt_id
        template = load_prompt(prompt_id)
        for name in _verifier_models(configuration, gateway):
            spec = gateway.registry.model(name)
            window = pred.prompt_window(spec.context_window, spec.decoding.get("max_tokens"),
                                        template.system + template.user)
            planned = pred.plan_predictions(configuration, queries, runs, paper_chunks, window, threads)
            calls = gateway.plan_calls(name, prompt_id, pred.verifier_items(planned, text_of),
                                       role=pred.VERIFIERS_ROLE)
            stage = f"predictions:{configuration.name}"
            basis = BASIS_LAKE if retrieved or configuration.mode != pred.MODE_RAG else RUNS_STAND_IN
            row = rows.setdefault((stage, name), EstimateRow(stage, pred.VERIFIERS_ROLE, name, basis=basis))
            known = means.get((name, prompt_id))
            row.output_basis = ("mean of the ledger's answers" if known is not None
                                else "max_tokens (no answer of this model and prompt in the ledger)")
            made, tokens_in, tokens_out = row.calls[0], row.tokens_in[0], row.tokens_out[0]
            for call in calls:
                key = (configuration.retriever if basis == RUNS_STAND_IN else None, call.call_id)
                if call.in_ledger or key in seen:
                    row.ledger_hits += 1
                    continue
                seen.add(key)
                made += 1
                tokens_in += pred.estimated_tokens(call.prompt_text)
                tokens_out += round(known[1]) if known is not None else int(call.max_tokens or 0)
            row.calls, row.tokens_in, row.tokens_out = (made, made), (tokens_in, tokens_in), (tokens_out, tokens_out)
            _priced(row, gateway)
    return list(rows.values())


def _stand_in_runs(queries: Sequence[dict], paper_chunks: Mapping[str, Sequence[tuple[str, str]]],
                   configurations: Sequence[pred.Configuration]) -> list[dict]:
    """retrieval_runs rows as each RAG configuration's retriever would rank, if it ranked a paper's passages in their
    order: one call per claim whose paper has passages, as a retrieval over the paper's own passages gives."""
    depth: dict[str, int] = {}  # retriever -> the most passages a configuration shows of it
    for configuration in configurations:
        if configuration.mode == pred.MODE_RAG:
            depth[configuration.retriever] = max(configuration.k, depth.get(configuration.retriever, 0))
    return [{"retriever": retriever, "claim_id": query["claim_id"], "status": "ok", "rank": rank, "chunk_id": chunk_id}
            for retriever, k in depth.items() for query in queries
            for rank, (chunk_id, _) in enumerate(paper_chunks.get(query["paper_id"], [])[:k], start=1)]


def _mean_tokens(lake: Lake) -> dict[tuple[str, str], tuple[float, float]]:
    """(model, prompt id) -> mean input and output tokens of its successful calls in the ledger."""
    files = sorted((lake.root / "llm_calls").glob("*.parquet"))
    if not files:
        return {}
    columns = ["model", "prompt_id", "tokens_in", "tokens_out", "error"]
    ledger = pl.concat([pl.read_parquet(readable(path), columns=columns) for path in files])  # a folder's or S3's
    means = ledger.filter(pl.col("error").is_null()).group_by("model", "prompt_id").agg(
        pl.col("tokens_in").mean(), pl.col("tokens_out").mean())
    return {(m, p): (float(i), float(o)) for m, p, i, o in means.iter_rows()}


def _span(values: tuple, money: bool = False) -> str:
    low, high = (f"{v:.4f}" if money else str(v) for v in values)
    return low if low == high else f"{low}-{high}"


def format_estimate(estimate: Estimate, venue: str) -> str:
    lines = [f"Estimate for {venue}: no model was called; calls the ledger answers are free and left out; "
             "a-b is a range (low-high).", ""]
    header = ("stage", "role", "model", "calls", "ledger_hits", "tokens_in", "tokens_out", "cost_usd", "counted from",
              "output tokens")
    cells = [header] + [(r.stage, r.role, r.model, _span(r.calls), str(r.ledger_hits), _span(r.tokens_in),
                         _span(r.tokens_out), _span(r.cost_usd, money=True), r.basis, r.output_basis)
                        for r in estimate.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines += ["  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip() for row in cells]
    calls = tuple(sum(r.calls[i] for r in estimate.rows) for i in (0, 1))
    cost = tuple(sum(r.cost_usd[i] for r in estimate.rows) for i in (0, 1))
    lines += ["", f"total: {_span(calls)} calls, ${_span(cost, money=True)} (input tokens estimated at "
                  f"{pred.CHARS_PER_TOKEN} characters per token, an over-count)"]
    if any(r.basis == BASIS_SIZE for r in estimate.rows):
        lines.append(f"counted from the venue's size: nothing is crawled yet; {REVIEWS_PER_PAPER[0]}-"
                     f"{REVIEWS_PER_PAPER[1]} reviews a paper, {SECTIONS_PER_REVIEW} sections and "
                     f"{CLAIMS_PER_REVIEW[0]}-{CLAIMS_PER_REVIEW[1]} claims a review (the release's averages)")
    lines += [f"not yet known: {stage}: {why}" for stage, why in dict.fromkeys(estimate.not_known)]
    return "\n".join(lines)
