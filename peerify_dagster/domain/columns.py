"""What every column of every lake table means, for `dagster/column_schema` in the UI and for readers of the lake.

A column name means the same in every table unless `TABLE_COLUMNS` says otherwise for one table. Review-form fields
(`reviews`) are open-ended (every content field of the venue's form becomes a column), so they get a generic
description naming the field; `<field>_score` columns name the field they were read from.
"""

from __future__ import annotations

COLUMNS: dict[str, str] = {
    # identifiers
    "venue": "Venue key (the partition): the venue's id in the registry, e.g. ICLR.cc/2024/Conference.",
    "paper_id": "OpenReview forum id of the paper (the submission note's id).",
    "forum_id": "OpenReview forum id (the submission note's id) the row belongs to.",
    "note_id": "OpenReview note id; null for an entry that is not a readable note.",
    "review_id": "Note id of the official review the row belongs to (for replies: the review whose thread holds it).",
    "response_id": "Note id of the author response.",
    "comment_id": "Note id of the comment.",
    "decision_id": "Note id of the Decision note.",
    "meta_review_id": "Note id of the meta-review.",
    "chunk_id": "Stable chunk id: paper id + order + hash of the chunk text.",
    "claim_id": "Stable id of a reviewer claim (a retrieval query).",
    "call_id": "sha256 of backend, model, prompt hash, rendered messages and decoding parameters of one LLM call.",
    "edit_id": "Id of the submission edit whose PDF was stored; null when the latest PDF was taken.",
    "thread_id": "Note id of the first note of the reply thread the comment is in.",
    "replyto": "Id of the note this note replies to (null for a submission).",
    "number": "Submission number within the venue.",
    # people and signatures
    "signatures": "OpenReview groups that signed the note.",
    "reviewer_id": "Anonymous reviewer group of the signer, e.g. Submission7/Reviewer_abc1.",
    "area_chair_id": "Anonymous area-chair group that signed the meta-review.",
    "signer_id": "Group that signed the comment.",
    # times (OpenReview milliseconds since the epoch)
    "cdate": "Creation time of the note, milliseconds since the Unix epoch (OpenReview cdate).",
    "mdate": "Last modification time of the note, milliseconds since the Unix epoch (OpenReview mdate).",
    "tcdate": "True creation time of the note version, milliseconds since the Unix epoch (OpenReview tcdate).",
    "tmdate": "True modification time of the note version, milliseconds since the Unix epoch; the latest wins.",
    "fetched_at": "When the forum was fetched from OpenReview, milliseconds since the Unix epoch.",
    "created_at": "When the row was written (UTC timestamp).",
    # note content
    "title": "Title of the note.",
    "abstract": "Abstract of the submission.",
    "keywords": "Keywords of the submission.",
    "primary_area": "Primary area the authors chose.",
    "tldr": "The submission's TL;DR.",
    "text": "Text of the note (its comment / rebuttal field).",
    "comment": "Comment field of the decision.",
    "metareview": "Text of the meta-review.",
    "recommendation": "Recommendation of the meta-review.",
    "confidence": "Confidence as the form gives it (text).",
    "invitation": "OpenReview invitation the note was posted to.",
    "invitations": "OpenReview invitations of the note.",
    "content_json": "The note's content as JSON.",
    "extra_fields_json": "Review-form fields without a column of their own, as JSON.",
    "review_text": "The review assembled into one text (summary, strengths, weaknesses, questions, ...).",
    "note_json": "The note exactly as the API returned it, as JSON.",
    "api_version": "OpenReview API version the notes were read as (1 or 2).",
    # submissions
    "venue_label": "The submission's `venue` content field (e.g. 'ICLR 2024 poster').",
    "venueid": "The submission's current `venueid` content field (where it stands now).",
    "decision": "Normalised outcome: oral, spotlight, poster, accept, reject, withdrawn or desk_rejected.",
    "decision_text": "The decision as written (Decision note, else venueid / venue).",
    "decision_source": "Where the decision came from: decision_note, venueid or venue.",
    "withdrawn": "True when the current venueid (or, without one, a withdrawal note) says withdrawn.",
    "desk_rejected": "True when the current venueid (or, without one, a desk-rejection note) says desk rejected.",
    "pdf_url": "Path of the submission's PDF on OpenReview.",
    "outcome": "The decision text normalised to an outcome (see submissions.decision).",
    # replies and threads
    "kind": "Kind of the row (see the table's description for its values).",
    "is_global": "True when the author response replies to the paper, not to a review.",
    "own_review": "True when the reviewer comments under their own review.",
    "author_response_ids": "Author responses in the review's reply tree, in time order.",
    "n_author_responses": "Number of author responses in the review's reply tree.",
    "thread_author_response": "The author responses of the review's thread joined in time order.",
    "followup_ids": "Reviewer follow-up comments in the review's reply tree.",
    "combined_author_response": "The paper's combined author response (every response of the forum).",
    "combined_response_words": "Word count of combined_author_response.",
    # errors and logs
    "stage": "Stage the problem arose in: crawl, pdf, note or sample.",
    "severity": "error (the item is missing from the tables) or warning (kept, with a caveat).",
    "reason": "Machine-readable reason code, e.g. http_500, malformed_note, missing_pdf.",
    "message": "Human-readable explanation naming the item and the reason.",
    "problem": "Why the raw entry cannot be read as a note; null when it can.",
    "superseded": "True for an older version of a note (same id, earlier tmdate); the latest version is used.",
    "status": "Outcome for the row's item (see the table's description for its values).",
    "item": "What was fetched: forum or pdf.",
    "seconds": "Wall-clock seconds the fetch took.",
    "error": "Error message; null when the row succeeded.",
    # sampling
    "draw_order": "Position of the paper in the seeded draw (0 = first drawn).",
    "seed": "Sampling seed of the venue.",
    "sample_size": "Number of papers the venue asks for (null: every paper).",
    "population": "Number of submissions the venue listed.",
    "rank_key": "Seeded hash of the forum id that orders the draw.",
    "sampling": "The venue's sampling options, as JSON.",
    "review_scope": "Which reviews of the paper enter the benchmark.",
    "replied_review_ids": "Reviews of the paper with a substantive direct author reply.",
    "paired_review_id": "The review chosen for the paper's review / response pair.",
    # PDFs and parsing
    "version": "Which PDF was stored: under_review (last edit before the first review) or latest.",
    "source_url": "API path the PDF was fetched from.",
    "lake_path": "Where the PDF is stored in the lake.",
    "sha256": "sha256 of the stored PDF bytes.",
    "pdf_sha256": "sha256 of the PDF that was parsed.",
    "size_bytes": "Size of the PDF in bytes.",
    "pages": "Number of pages.",
    "encrypted": "True when the PDF is encrypted.",
    "parser": "Which parser produced the blocks (Docling pipeline or a text-manuscript reader).",
    "parser_version": "Version of the parser and the project's layout recovery.",
    "options_json": "Parser options, as JSON.",
    "blocks": "The parsed layout blocks (text, kind, section path, page, order, regions: one box {page, x0, y0, x1, "
              "y1} in PDF points from the page's top-left per page and column the block runs through, empty for "
              "HTML / Markdown / text; line_regions: the same per line, with `start`, the non-whitespace characters "
              "of the block's text before the line).",
    "n_blocks": "Number of parsed blocks.",
    "page_sizes": "Each page's size {page, width, height} in PDF points as displayed (the frame of the regions); "
                  "empty for HTML / Markdown / text manuscripts.",
    # the citation half (citances, bibliography, reference checks, cited papers, evidence, verdicts)
    "entry_id": "Stable id of a reference entry of the citing manuscript: `<paper_id>:r<position in its reference "
                "list>` (`<paper_id>:none` for a manuscript without a references section).",
    "entry_index": "1-based position of the entry in the manuscript's reference list.",
    "citance_id": "Stable id of a citing sentence: `<paper_id>:c<n>`, n in reading order.",
    "cited_key": "The cited paper's full text: `sha256:<hex>` of its stored PDF (<lake>/cited_pdfs/), or "
                 "`forum:<paper_id>` for a manuscript of the same venue; null when it could not be had.",
    "passage_id": "Id of a passage of the cited paper: `<cited_key>:w<block order>.<first>-<last sentence>` for a "
                  "sentence window, `<cited_key>:b<block order>` for a whole block (merged mode).",
    "passage_ids": "The passages of the cited paper shown to the verifier, in the order shown.",
    "entry_ids": "The bibliography entries (entry_id) the row's citation markers resolve to.",
    "mode": "Evidence mode: windows (the ranked sentence windows) or merged (the cited paper whole in one call).",
    # chunks
    "section_path": "Heading path of the chunk's section, outermost first.",
    "section": "Heading of the chunk's innermost section.",
    "page": "Page the chunk starts on (1-based).",
    "regions": "Where the chunk's text lies: boxes {page, x0, y0, x1, y1} in PDF points from the page's top-left "
               "(parsed_manuscripts.page_sizes gives the page), the union of its blocks' boxes, one per page and "
               "column run; a part of a block split into several chunks has the boxes of the lines its text came "
               "from (PDFs parsed without the layout model), else the whole block's. Empty for HTML / Markdown / "
               "text manuscripts; null for passages imported from a release.",
    "order": "Position of the chunk within its paper.",
    "word_count": "Number of words in the chunk.",
    "text_sha256": "sha256 of the text (the embedding cache key).",
    "n_chunks": "Number of chunks.",
    "n_papers": "Number of papers.",
    "n_empty": "Chunks without words.",
    "n_runaway": "Chunks longer than 1.5 x the token limit.",
    "mean_words": "Mean words per chunk.",
    "median_words": "Median words per chunk.",
    "p90_words": "90th percentile of words per chunk.",
    "papers_without_chunks": "Parsed papers that yielded no chunk.",
    "embedding": "L2-normalised float32 embedding of the chunk text.",
    "model_id": "Model name plus package version or content hash.",
    # retrieval
    "claim_text": "The reviewer claim, as retrieval query.",
    "evidence_section": "Section of the manuscript holding the gold evidence.",
    "evidence_sentence": "The gold evidence sentence of the answer key.",
    "manuscript_label": "Gold label of the claim against the manuscript.",
    "rebuttal_label": "Gold label of the claim against the author rebuttal.",
    "retriever": "Retrieval configuration: bm25, dense, hybrid, or one of them + rerank.",
    "rank": "Rank of the chunk for the claim (1 = best).",
    "score": "Retriever score of the chunk for the claim.",
    "n_claims": "Number of claims.",
    "n_claims_scored": "Claims with gold evidence and a manuscript, which the metrics average over.",
    "n_claims_without_gold": "Claims without gold evidence.",
    "n_claims_without_manuscript": "Claims whose paper has no chunks.",
    "recall@1": "Share of claims with a gold chunk at rank 1.",
    "recall@5": "Share of claims with a gold chunk in the top 5.",
    "recall@10": "Share of claims with a gold chunk in the top 10.",
    "mrr@10": "Mean reciprocal rank of the first gold chunk within the top 10.",
    "ndcg@10": "Normalised discounted cumulative gain at 10.",
    "relevance": "Which chunks count as relevant: strict (the chunks holding the gold evidence) or section (also "
                 "every chunk of the gold evidence's section, as the Peerify reference code scores).",
    "n_claims_gold_unlocatable": "Claims with gold evidence that no chunk of their manuscript holds (after Unicode, "
                                 "ligature, whitespace and hyphenation normalisation); not averaged.",
    # verifier metrics (per configuration, verifier and slice) and token costs
    "n_predicted": "Claims of the slice with a parsed label (a call was made and its answer parsed).",
    "n_parse_failures": "Claims of the slice whose call was made but gave no parsed label (counted as errors).",
    "n_not_called": "Claims of the slice with a prediction row but no call (no_manuscript, no_evidence, too_long, ...; "
                    "counted as errors).",
    "n_missing": "Claims of the slice without a prediction row for the configuration (counted as errors).",
    "accuracy": "Share of the slice's claims predicted exactly right; parse failures, uncalled and missing claims "
                "count as errors.",
    "macro_f1": "Mean F1 over the four labels (a label never predicted scores 0), every claim of the slice counted.",
    "majority_label": "The slice's most frequent gold label (ties: first in label order): the majority-class baseline "
                      "answers it for every claim.",
    "majority_accuracy": "Accuracy of the majority-class baseline on the slice: the share of its claims whose gold "
                         "label is majority_label. Compare accuracy with it.",
    "majority_macro_f1": "Macro-F1 of the majority-class baseline on the slice (over the four labels).",
    "parse_failure_rate": "Parse failures / calls made; null when no call was made.",
    "per_class": "Per label: precision, recall, F1 and support (gold claims of that label), over the whole slice.",
    "predicted_distribution": "Claims per predicted label, with `unparsed` for parse failures, uncalled and missing.",
    "tokens_in_per_claim": "Prompt tokens per claim the verifier was called for.",
    "tokens_out_per_claim": "Completion tokens per claim the verifier was called for.",
    "tokens_per_claim": "Prompt + completion tokens per claim the verifier was called for.",
    "claims_called": "Claims the verifier was called for (status ok).",
    "full_context_configuration": "The same verifier's full-context configuration compared against (the one that "
                                  "called most of the same claims); null when there is none.",
    "full_context_tokens_per_claim": "Tokens per claim of the full-context configuration, over the claims both "
                                     "configurations called.",
    "ratio_to_full_context": "Full-context tokens per claim / this configuration's, over the claims both called.",
    # verification and LLM calls
    "evidence_chunk_ids": "Chunks given to the verifier as evidence, in rank order.",
    "label": "Normalised label (Supported, Partially Supported, Not Supported, Not Determined); null when unparsed.",
    "parse_ok": "True when the model's answer parsed into the expected structure.",
    "prompt_id": "Name of the versioned prompt file.",
    "prompt_hash": "sha256 of the prompt file.",
    "verifier": "Model that verified the claim.",
    "role": "Role the LLM call served (extractor, labeller_a, labeller_b, fact_tagger, verifiers).",
    "backend": "LLM backend: openai, anthropic, vllm or llama.cpp.",
    "model": "Model name in models.yaml.",
    "request": "The request sent, as JSON (no keys).",
    "raw_response": "The model's answer as received.",
    "parsed": "The parsed answer, as JSON.",
    "tokens_in": "Prompt tokens.",
    "tokens_out": "Completion tokens.",
    "latency_s": "Seconds the call took.",
    "cost_usd": "Cost in US dollars at the prices of models.yaml.",
    "attempts": "Attempts made, retries included.",
    "run_id": "Dagster run (or gateway session) that made the call.",
    "calls": "Number of LLM calls.",
    "errors": "Calls that ended in an error.",
    "parse_failures": "Calls whose answer did not parse.",
    "mean_latency_s": "Mean seconds per call.",
    # claims (stage 4a)
    "source": "Where the claim came from: a review section or a reviewer follow-up.",
    "source_id": "Note id of the review or follow-up the claim was extracted from.",
    "claim_order": "Position of the claim within its review.",
    "raw_text": "The claim as the extractor wrote it, before normalisation.",
    "span_start": "Character offset where the claim's supporting span starts in its section.",
    "span_end": "Character offset where the claim's supporting span ends in its section.",
    "span_kind": "How the claim's span was located in the section text.",
    "span_reason": "Why the span is approximate or missing; null when located exactly.",
    "absorbed_claim_ids": "Exact or near-duplicate claims of the same review merged into this one.",
    "extractor_model": "Model that served the `extractor` role.",
    "level": "What was dropped: a whole review / follow-up, a section, or one claim.",
    "rule": "The cleaning rule that dropped it (e.g. question, request, fragment, too long).",
    "detail": "Details of the drop (the rule's evidence or the error).",
    "claim_type": "factual (checkable against the manuscript) or subjective; null when the answer was unusable.",
    "rationale": "The fact tagger's reason for the claim type.",
    "original_claim": "The claim the extractor wrote from the paragraph, before rephrasing.",
    "paragraph": "The manuscript paragraph the claim is written from (fully supports it).",
    "gold_chunk_ids": "Chunks holding the paragraph: the gold evidence of the claim.",
    "paragraph_order": "Position of the paragraph within its paper.",
    "claim_call_id": "Ledger call id of the claim-writing call.",
    "rephrase_call_id": "Ledger call id of the rephrasing call.",
    # claim labels (two LLM labellers x two sources) and their agreement
    "labeller": "Which labeller: a (role labeller_a) or b (role labeller_b).",
    "raw_label": "The label exactly as the model wrote it; null when no call was made or the answer held no label.",
    "justification": "The labeller's reason in its own words (for a rule label: the rule).",
    "evidence_quotes": "Passages the labeller quoted from its evidence as the basis of its label (meant verbatim).",
    "evidence_mode": "What the labeller saw: longest_author_reply, thread_with_followups, whole_manuscript or "
                     "retrieved; no_author_response / no_manuscript when there was nothing to show (no call).",
    "evidence_text": "Exactly the evidence text put in the labeller's prompt; null when no call was made.",
    "evidence_tokens": "Estimated tokens of evidence_text (about four characters a token); null without evidence.",
    "n_items": "Number of (claim, source) items in the group.",
    "n_without_call": "Items where either labeller made no call (rule label, no manuscript, evidence too long).",
    "n_parse_failed": "Items where both labellers were called and either gave no usable label.",
    "n_pairs": "Items with a usable label from both labellers: what agreement and kappa are computed over.",
    "agreed": "Pairs where both labellers gave the same label.",
    "raw_agreement": "agreed / n_pairs; null without pairs.",
    "kappa": "Cohen's kappa of labeller A vs B; null when undefined (see kappa_status).",
    "kappa_status": "ok, no_pairs, or undefined_single_class (both labellers gave every pair one and the same label, "
                    "so chance agreement is 1 and kappa is 0/0).",
    "confusion": "4x4 table: confusion[i][j] = pairs labeller A labelled LABELS[i] and B labelled LABELS[j], in the "
                 "order Supported, Partially Supported, Not Supported, Not Determined.",
    # reports
    "figure": "File name of the figure.",
    "path": "Where the file is stored.",
    "description": "What the figure shows.",
    # human audit
    "audit_sample_version": "Version of the audit sample the row belongs to (sha256[:16] of venue, seed and item ids).",
    "stratum": "The item's canonical label when the audit sample was drawn (its sampling stratum).",
    "annotator_1": "First audit annotator (the first to record an audit decision for the sample).",
    "annotator_2": "Second audit annotator.",
    "label_1": "The first annotator's current label; null until they label the item.",
    "label_2": "The second annotator's current label; null until they label the item.",
    "consensus_label": "Human consensus: the annotators' shared label, else the consensus decision; null when pending.",
    "consensus_source": "agreement, consensus_decision or pending (not both labelled, or disagreeing and unsettled).",
    "automated_label": "The item's automated canonical label (canonical_labels.label).",
    "automated_provenance": "Provenance of the canonical label (agreed, a_upheld, b_upheld, third_label, pending).",
    "exact": "Consensus equals the automated label; null when either is missing.",
    "within_one": "Consensus and automated label at most one ordinal step apart (Not Determined: only itself).",
    "polarity_flip": "Supported against Not Supported between consensus and automated label.",
    # arbitration (human tie-breaking of the two labellers)
    "item_id": "The labelled item: claim id and source (thread or manuscript), as claim_id:source.",
    "source_material": "What the labellers saw as evidence (author responses or manuscript text); the fuller one when "
                       "they saw different amounts.",
    "passage_chunks": "What the passage tags annotators read stand for: P<n> is the n-th entry (a chunk id, or a "
                      "labeller's garbled mention of one as written); tags replace chunk ids, which name the forum.",
    "candidate_1_label": "The label of the answer shown first (which labeller gave it is in arbitration_key only).",
    "candidate_1_justification": "The justification of the answer shown first.",
    "candidate_1_evidence": "The evidence quotes of the answer shown first.",
    "candidate_2_label": "The label of the answer shown second.",
    "candidate_2_justification": "The justification of the answer shown second.",
    "candidate_2_evidence": "The evidence quotes of the answer shown second.",
    "candidate_1_raw_answer": "When the answer shown first gave no usable label: the model's raw answer as the "
                              "llm_calls ledger holds it (or, the call gone from the ledger, the label as written); "
                              "null when it parsed or no call was made.",
    "candidate_2_raw_answer": "When the answer shown second gave no usable label: its raw answer, as for "
                              "candidate_1_raw_answer.",
    "queue_version": "sha256[:16] of the queue's items and candidate labels; a decision records the version it "
                     "answered.",
    "candidate_1_labeller": "Labeller (a or b) whose answer is candidate_1.",
    "candidate_2_labeller": "Labeller (a or b) whose answer is candidate_2.",
    "provenance": "Where the canonical label comes from: agreed, a_upheld, b_upheld, third_label, pending (no human "
                  "decision yet, label null) or unlabelled (neither labeller had source material).",
    "annotator": "The human whose decision gave the label; null when no decision applies.",
    "label_a": "Labeller a's normalised label; null when its answer did not parse.",
    "label_b": "Labeller b's normalised label; null when its answer did not parse.",
    "call_id_a": "Ledger call id of labeller a's call; null when no call was made.",
    "call_id_b": "Ledger call id of labeller b's call; null when no call was made.",
    # benchmark slices
    "slice": "Benchmark slice: PaperSourced, RebuttalSourced, LLMJudged, HighAgreement, VerifiableOnly or "
             "HumanVerified.",
    "gold_label": "The claim's gold label in this slice (one of the four labels).",
    "gold_source": "What the gold label was judged against: paper (PaperSourced construction), thread, manuscript, "
                   "thread+manuscript (HighAgreement) or human_audit.",
    "gold_provenance": "How the gold label was settled: paper_construction; the canonical provenance (agreed, "
                       "a_upheld, b_upheld, third_label; HighAgreement: thread=...;manuscript=...); or the audit's "
                       "consensus_source (agreement, consensus_decision).",
    "gold_call_ids": "Ledger call ids of the LLM calls behind the gold label (labellers a and b per source; "
                     "PaperSourced: the claim-writing and rephrasing calls); empty for HumanVerified.",
    "gold_decision_ids": "Decisions-ledger ids of the human arbitration decisions behind the gold label; empty when "
                         "the labellers agreed (and for HumanVerified, whose consensus is in human_audit).",
}

# Where one table gives a column another meaning than COLUMNS.
TABLE_COLUMNS: dict[tuple[str, str], str] = {
    ("raw_openreview_notes", "kind"): "What the entry was classified as (submission, review, comment, decision, ...).",
    ("raw_openreview_notes", "number"): "Submission number (submissions only).",
    ("author_responses", "kind"): "rebuttal (a -/Rebuttal note) or comment (an author Official_Comment).",
    ("status_notes", "kind"): "withdrawal, desk_rejection or a reversal of one.",
    ("retrieval_queries", "kind"): "Kind of the claim (e.g. factual or subjective).",
    ("chunks", "kind"): "Kind of the chunk's blocks: paragraph, caption, table, appendix, ...",
    ("forum_crawl_log", "status"): "fetched, stored (already in the snapshot) or failed.",
    ("manuscript_pdfs", "status"): "ok or failed.",
    ("retrieval_runs", "status"): "ok, or why the claim has no ranking (e.g. no_chunks).",
    ("retrieval_metrics", "status"): "ok, or why the retriever has no metrics (e.g. unavailable).",
    ("llm_usage", "role"): "Role the calls served.",
    ("chair_comments", "role"): "Chair role of the signer: area_chair, senior_area_chair or program_chair.",
    ("llm_calls", "label"): "Normalised label parsed from the answer; null when unparsed or not a labelling call.",
    ("meta_reviews", "confidence"): "Confidence of the meta-review as the form gives it (text).",
    ("decisions", "decision"): "The decision as written on the Decision note.",
    ("paper_claims", "label"): "Gold label of the PaperSourced claim (Supported by construction).",
    ("reviews", "confidence"): "The review form's `confidence` field as the reviewer wrote it.",
    ("claim_labels", "source"): "What the claim is judged against: thread (author responses) or manuscript.",
    ("claim_labels", "evidence_chunk_ids"): "Manuscript chunks shown to the labeller, in the order shown "
                                            "(thread: empty).",
    ("claim_labels", "model"): "Model that served the labeller's role (null for a rule label without a call).",
    ("claim_labels", "error"): "Why the row has no usable label: the call's error, parse_failed with the reason, "
                               "no_manuscript, no_evidence, or evidence that does not fit the context window.",
    ("labeller_agreement", "source"): "thread, manuscript, or all (both sources pooled).",
    ("labeller_agreement", "claim_type"): "factual, subjective, untyped (no usable type), or all.",
    ("arbitration_queue", "source"): "What the claim is judged against: thread (author responses) or manuscript.",
    ("arbitration_queue", "source_material"): "What the labellers saw as evidence (author responses or manuscript "
                                               "text; the fuller one when they saw different amounts), its passages "
                                               "tagged P1, P2, ... (see passage_chunks).",
    ("arbitration_queue", "reason"): "Why a human is needed: disagree (two different labels) or parse_failed.",
    ("arbitration_key", "queue_version"): "The arbitration_queue version this key belongs to.",
    ("canonical_labels", "source"): "What the claim is judged against: thread (author responses) or manuscript.",
    ("canonical_labels", "label"): "The canonical label; null while pending (never guessed).",
    ("canonical_labels", "decision_id"): "The decisions-ledger id of the human decision applied; null otherwise.",
    ("canonical_labels", "queue_version"): "The queue version the applied decision answered; null otherwise.",
    ("orphaned_decisions", "decision_id"): "The decisions-ledger id of the human decision that no longer applies.",
    ("orphaned_decisions", "kind"): "The decision's kind: arbitration, audit or consensus (its ledger file).",
    ("orphaned_decisions", "claim_id"): "The claim id the decision was made on; no review claim of the venue has it.",
    ("orphaned_decisions", "source"): "What the claim was judged against: thread (author responses) or manuscript.",
    ("orphaned_decisions", "label"): "The label the human decided.",
    ("orphaned_decisions", "annotator"): "The human who made the decision.",
    ("orphaned_decisions", "decided_at"): "When the decision was recorded (UTC, ISO 8601).",
    ("orphaned_decisions", "note"): "The annotator's note on the decision; null when none was written.",
    ("orphaned_decisions", "reason"): "Why the decision no longer applies (its claim changed on re-extraction).",
    ("benchmark_slices", "claim_id"): "The claim's id: a review claim (review_claims) or a PaperSourced claim.",
    ("benchmark_slices", "claim_text"): "The claim as a verifier is given it: the review claim, or the PaperSourced "
                                        "claim's rephrasing.",
    ("benchmark_slices", "review_id"): "Review the claim comes from; null for PaperSourced.",
    ("benchmark_slices", "claim_type"): "factual or subjective (claim_types); null for PaperSourced (not tagged) and "
                                        "for claims whose type answer was unusable.",
    ("benchmark_slices", "gold_chunk_ids"): "PaperSourced: the chunks holding the claim's paragraph; empty otherwise.",
    ("predictions", "configuration"): "The prediction configuration (configurations.yaml): the partition with venue.",
    ("predictions", "mode"): "rag (top-k passages of a retriever), full_context (every chunk), oracle (gold chunks) or "
                             "thread (the claim's thread text, claim_threads).",
    ("predictions", "retriever"): "Retriever whose ranking supplied the passages (rag); null otherwise.",
    ("predictions", "k"): "Passages shown (rag); null otherwise.",
    ("predictions", "claim_source"): "Which claims the row belongs to: review (the review slices), paper_sourced or "
                                     "answer_key (the venue's hand-written key).",
    ("predictions", "status"): "ok (a call was made), or why not: no_manuscript, no_evidence, too_long (the "
                               "manuscript or thread does not fit the verifier's window; never truncated), no_thread "
                               "(mode thread: the claim's review has no author text).",
    ("predictions", "evidence_chunk_ids"): "Chunks shown to the verifier, in the order shown; empty when no call.",
    ("predictions", "gold_label"): "The label retrieval_queries gives the claim (answer key; PaperSourced: Supported); "
                                   "null for review claims, whose gold labels are in benchmark_slices.",
    ("predictions", "error"): "Why the row has no label: the call's error, parse_failed, or why no call was made.",
    ("claim_threads", "thread_mode"): "How the thread text was assembled: longest_author_reply, thread_with_followups "
                                      "(the venue's labelling.thread_evidence), no_author_response (no text), or "
                                      "release (the author response a release gives the claim).",
    ("claim_threads", "thread_text"): "The author text the `thread` prediction mode shows the verifier (as the thread "
                                      "labeller sees it); null without author response.",
    ("claim_threads", "thread_tokens"): "Estimated tokens of thread_text (about four characters a token); null "
                                        "without text.",
    ("release_rows", "row_id"): "The release row: file key and line, e.g. B3:12 (gold_provenance release:B3:12).",
    ("release_rows", "release_file"): "The release's JSONL file the row was read from.",
    ("release_rows", "line"): "1-based line of the row in its file.",
    ("release_rows", "claim_id"): "The claim id the row became: one id per (paper, review, normalised claim text) in "
                                  "every file of the release.",
    ("release_rows", "claim_type_raw"): "The release's claim type as written (methodology, experimental, ..., "
                                        "subjective); the slices keep factual or subjective.",
    ("release_rows", "labels"): "Each label field of the row (label; B4: b2_label, b3_label): raw as written, mapped "
                                "to the four labels (Contradicted -> Not Supported, Undetermined -> Not Determined).",
    ("release_rows", "evidence"): "The row's evidence quotes (evidence; B4: b2_evidence then b3_evidence) as a list.",
    ("release_rows", "row_json"): "The row's JSONL line exactly as the release wrote it.",
    ("metrics", "configuration"): "The prediction configuration (configurations.yaml) scored.",
    ("metrics", "mode"): "The configuration's mode: rag, full_context or oracle.",
    ("metrics", "retriever"): "Retriever whose ranking supplied the passages (rag); null otherwise.",
    ("metrics", "k"): "Passages shown (rag); null otherwise.",
    ("metrics", "status"): "ok, or empty: the slice has no claims (the configuration predicts its claim population).",
    ("metrics", "n_claims"): "Claims of the slice (benchmark_slices): the denominator of accuracy and macro-F1.",
    ("metrics", "confusion"): "Gold label x predicted label (the four labels and `unparsed`: parse failures, uncalled "
                              "and missing claims) -> claims, every cell present.",
    ("token_costs", "configuration"): "The prediction configuration (configurations.yaml).",
    ("token_costs", "mode"): "The configuration's mode: rag, full_context or oracle.",
    ("token_costs", "retriever"): "Retriever whose ranking supplied the passages (rag); null otherwise.",
    ("token_costs", "k"): "Passages shown (rag); null otherwise.",
    # the citation half
    ("bibliography", "label"): "The label the entry is cited by in a numbered list ('5' for '[5]' or '5.'); null "
                               "for an unlabelled (author-year) list.",
    ("bibliography", "raw_text"): "The entry as the manuscript prints it (lines joined; a split or merged entry "
                                  "repaired).",
    ("bibliography", "authors"): "The entry's authors as written, in order.",
    ("bibliography", "surnames"): "The authors' family names in order (what author-year markers name).",
    ("bibliography", "title"): "The cited work's title as the entry gives it; null when not found.",
    ("bibliography", "year"): "Publication year the entry gives; null when not found.",
    ("bibliography", "year_suffix"): "The letter after the year ('a' in 2019a) telling one author's works apart.",
    ("bibliography", "published_in"): "Journal, proceedings or series the entry names.",
    ("bibliography", "doi"): "DOI the entry gives, lower-cased, without a resolver prefix.",
    ("bibliography", "arxiv_id"): "arXiv identifier the entry gives, without version.",
    ("bibliography", "url"): "URL the entry gives.",
    ("bibliography", "field_sources"): "How each field was found: {field, method} (e.g. doi: doi_pattern, title: "
                                       "quoted).",
    ("bibliography", "parse_status"): "parsed (a title and authors or year), partial (some fields), unparsed, or "
                                      "no_references (the manuscript has no references section).",
    ("bibliography", "parse_reason"): "Why the entry is partial or unparsed (what could not be told apart).",
    ("bibliography", "page"): "Page the entry starts on.",
    ("bibliography", "regions"): "Where the entry lies: boxes {page, x0, y0, x1, y1} in PDF points from the page's "
                                 "top-left.",
    ("citances", "text"): "The citing sentence, with its citation markers.",
    ("citances", "block_order"): "Order of the manuscript block (parsed_manuscripts.blocks) holding the sentence.",
    ("citances", "char_start"): "Where the sentence starts in its block's text (characters).",
    ("citances", "char_end"): "Where the sentence ends in its block's text (characters, exclusive).",
    ("citances", "page"): "Page the sentence starts on.",
    ("citances", "regions"): "Where the sentence lies: boxes of its lines {page, x0, y0, x1, y1} in PDF points.",
    ("citances", "section_path"): "Heading path of the sentence's section, outermost first.",
    ("citances", "markers"): "Its citation markers: {text as written, style, start, end (in the block's text), "
                             "entry_ids they resolve to, unresolved_keys (keys no entry matches)}.",
    ("citances", "style"): "Marker style: numeric, author_year, narrative, superscript, or mixed.",
    ("citances", "claim_type"): "Rule-based claim type: causal, predictive, comparative, quantitative or "
                                "descriptive (picks the evidence window length).",
    ("citances", "hedged"): "Whether the sentence hedges its claim (may, suggest, likely, ...).",
    ("citances", "resolution"): "How many of its markers' keys resolve to entries: all, some or none.",
    ("citance_enrichment", "status"): "ok (the tagger answered), off (the venue did not turn enrichment on), "
                                      "parse_failed or error.",
    ("citance_enrichment", "claim_type"): "The tagger's claim type (causal, predictive, comparative, quantitative, "
                                          "descriptive); null unless ok.",
    ("citance_enrichment", "hedge_level"): "The tagger's hedge level: none, weak or strong; null unless ok.",
    ("citance_enrichment", "supported_text"): "The part of the sentence the citation supports, per the tagger.",
    ("citance_enrichment", "reason"): "Why there is no tag (the parse problem or the call's error).",
    ("reference_checks", "status"): "validated (a metadata record agrees on title, first author and year), suspicious "
                                    "(a record found by the entry's DOI or arXiv id contradicts it, the year is off, "
                                    "the work is retracted), not_found (every source asked answered and none "
                                    "holds a record close enough: possibly fabricated) or unvalidatable (nothing "
                                    "could be asked, or a source failed and the rest found nothing).",
    ("reference_checks", "reasons"): "The evidence for the status, in sentences naming the service and the values.",
    ("reference_checks", "services"): "The metadata services asked (citations.metadata of the venue).",
    ("reference_checks", "matched_service"): "The service whose record the status rests on.",
    ("reference_checks", "matched_title"): "That record's title.",
    ("reference_checks", "matched_authors"): "That record's authors' family names.",
    ("reference_checks", "matched_year"): "That record's publication year.",
    ("reference_checks", "matched_doi"): "That record's DOI.",
    ("reference_checks", "matched_arxiv_id"): "That record's arXiv id.",
    ("reference_checks", "title_similarity"): "0-1 similarity of the entry's title and the record's (normalised).",
    ("reference_checks", "author_overlap"): "Share of the entry's surnames found among the record's authors.",
    ("reference_checks", "year_delta"): "How many years the record's year and the entry's lie apart.",
    ("reference_checks", "retracted"): "Whether the record marks the work retracted.",
    ("reference_checks", "open_access_urls"): "PDF locations the records name (tried by the cited-paper resolution "
                                              "when the venue lists open_access).",
    ("reference_checks", "errors"): "Each service that failed: 'service: reason' (HTTP 429 after N tries, malformed "
                                    "JSON, timed out, ...).",
    ("reference_checks", "evidence_json"): "The records compared and their figures, as JSON.",
    ("cited_papers", "status"): "resolved (a full text passed the right-paper check), rejected (one was found and "
                                "refused: wrong paper, encrypted, image-only) or unresolved.",
    ("cited_papers", "source"): "Where the full text came from: library, venue, arxiv or open_access.",
    ("cited_papers", "locator"): "The file name, forum id or URL of the full text taken (or last refused).",
    ("cited_papers", "pdf_sha256"): "sha256 of the PDF taken (or last refused); null for a venue manuscript.",
    ("cited_papers", "right_paper_score"): "A downloaded or library PDF: the share of the entry's title words found in "
                                           "order on its first page (taken at 0.8 or more; a title of five words or "
                                           "fewer must be there whole). A venue manuscript: the similarity of the "
                                           "entry's title to its parsed title (taken at 0.9 or more).",
    ("cited_papers", "reason"): "Why the entry is not resolved: every source tried with its outcome.",
    ("cited_papers", "attempts"): "Each source tried in order: {source, outcome (code), locator, detail}.",
    ("cited_manuscripts", "pdf_sha256"): "sha256 of the stored cited PDF.",
    ("cited_manuscripts", "lake_path"): "Where the cited PDF is stored in the lake (cited_pdfs/<sha256>.pdf).",
    ("citation_evidence", "status"): "ok (a ranked passage), no_cited_paper (the entry's full text could not be "
                                     "had), no_passages (it has no prose) or no_relevant_passage (no window clears "
                                     "the retriever's relevance floor).",
    ("citation_evidence", "rank"): "Rank of the passage for the citance (1 = best).",
    ("citation_evidence", "score"): "Retriever score of the passage for the citance (hybrid: reciprocal-rank "
                                    "fusion, which ranks but does not measure relevance).",
    ("citation_evidence", "text"): "The passage: consecutive sentences of one paragraph of the cited paper.",
    ("citation_evidence", "page"): "Page of the cited paper the passage starts on.",
    ("citation_evidence", "regions"): "Where the passage lies in the cited paper: boxes {page, x0, y0, x1, y1} in "
                                      "PDF points.",
    ("citation_evidence", "window_sentences"): "Sentences a window holds for this claim type (3; 5 for causal or "
                                               "predictive claims).",
    ("citation_evidence", "reason"): "Why the pair has no passage.",
    ("citation_verdicts", "verifier"): "Model that judged the citation (the citation_verifiers role).",
    ("citation_verdicts", "status"): "ok, no_cited_paper or no_relevant_passage (Not Enough Information without a "
                                     "call), too_long (merged mode: the paper does not fit the window), no_passages, "
                                     "parse_failed or error.",
    ("citation_verdicts", "label"): "Supported, Partially Supported, Not Supported or Not Enough Information; null "
                                    "when there is no verdict.",
    ("citation_verdicts", "explanation"): "The verifier's explanation (or why no model was asked).",
    ("citation_verdicts", "reason"): "Why there is no model verdict (parse problem, call error, too long).",
    ("citation_verdicts", "tokens_in"): "Prompt tokens of the call (0 without a call).",
    ("citation_verdicts", "tokens_out"): "Completion tokens of the call (0 without a call).",
    ("review_citations", "citation_id"): "Stable id of the work within its review: `<review_id>:w<n>` in order of "
                                         "position in the review's text.",
    ("review_citations", "kind"): "How the review cites the work: author_year (\"Smith et al. 2020\", \"(Smith and "
                                  "Lee, 2019)\"), arxiv (an arXiv id or URL), doi (a DOI, doi: or a doi.org URL) or "
                                  "title (a quoted title of four words or more).",
    ("review_citations", "key"): "The work's key: author_year '<first surname, folded>|<year><suffix>', the arXiv id "
                                 "without version, the DOI lower-cased, or the normalised title.",
    ("review_citations", "text"): "The marker, identifier or title as the review writes it.",
    ("review_citations", "char_start"): "Where the citation starts in reviews.review_text (characters).",
    ("review_citations", "char_end"): "Where the citation ends in reviews.review_text (characters, exclusive).",
    ("review_citations", "sentence"): "The review's sentence holding the citation (what the verdict judges).",
    ("review_citations", "sentence_start"): "Where that sentence starts in reviews.review_text (characters).",
    ("review_citations", "query"): "The sentence with the cited works it names cut out: what retrieves the cited "
                                   "paper's passages.",
    ("review_citations", "entry_id"): "The submission's own reference entry that is the cited work (the reviewer "
                                      "cites what the paper cites); null when none is.",
    ("review_citations", "entry_text"): "That entry as the manuscript prints it (bibliography.raw_text).",
    ("review_citations", "entry_reason"): "Why no entry of the submission is the work (none matches, or several do: "
                                          "never guessed).",
    ("review_citations", "check_status"): "The work's reference check (reference_checks.status: the matched entry's, "
                                          "else the work checked as the review gives it); null when the venue lists "
                                          "no metadata source.",
    ("review_citations", "check_reasons"): "The evidence for check_status, in sentences naming the source and the "
                                           "values.",
    ("review_citations", "resolution_status"): "resolved, rejected or unresolved (cited_papers.status: the matched "
                                               "entry's, else the work resolved as the review gives it).",
    ("review_citations", "source"): "Where the cited paper's full text came from: library, venue, arxiv or "
                                    "open_access.",
    ("review_citations", "locator"): "The file name, forum id or URL of the full text taken (or last refused).",
    ("review_citations", "pdf_sha256"): "sha256 of the cited PDF taken (or last refused); null for a venue "
                                        "manuscript.",
    ("review_citations", "resolution_reason"): "Why the work has no full text: every source tried with its outcome.",
    ("review_citation_verdicts", "citation_id"): "The work the review cites (review_citations.citation_id).",
    ("review_citation_verdicts", "cited_title"): "The cited paper's title as its parse gives it; null when it was not "
                                                 "had.",
    ("review_citation_verdicts", "verifier"): "Model that judged the reviewer's sentence (the citation_verifiers "
                                              "role; the role's name on rows without a call).",
    ("review_citation_verdicts", "status"): "ok, off (the venue does not turn citations.review_citations on), "
                                            "no_cited_paper or no_relevant_passage (Not Enough Information without a "
                                            "call), no_passages, parse_failed or error.",
    ("review_citation_verdicts", "label"): "Supported, Partially Supported, Not Supported or Not Enough Information; "
                                           "null when there is no verdict.",
    ("review_citation_verdicts", "explanation"): "The verifier's explanation (or why no model was asked).",
    ("review_citation_verdicts", "reason"): "Why there is no model verdict (off, no full text, no relevant passage, "
                                            "parse problem, call error).",
    ("review_citation_verdicts", "passages"): "The cited paper's windows shown to the verifier, best first: "
                                              "{passage_id, text, score, page}.",
    ("citation_metrics", "stage"): "Stage of the figure: detection, parsing, reference_checks, resolution, "
                                   "localisation or verdicts.",
    ("citation_metrics", "metric"): "What is measured (the scope, e.g. verifier and mode, in brackets).",
    ("citation_metrics", "value"): "The figure: a share or a 0-1 score, a count or a mean (the metric says which).",
    ("citation_metrics", "n"): "How many items the figure is over.",
    ("citation_metrics", "refverifier"): "RefVerifier's published figure for the same measurement; null where it "
                                         "published none.",
    ("citation_metrics", "note"): "What was counted, and for a null refverifier why none is comparable.",
    ("citation_integrity", "title"): "The submission's title (submissions.title); null when the forum has none.",
    ("citation_integrity", "entries"): "Reference entries of the submission's bibliography (0 without a references "
                                       "section).",
    ("citation_integrity", "not_found"): "Entries every metadata source asked answered for without a record close "
                                         "enough (possibly fabricated; reference_checks.status).",
    ("citation_integrity", "suspicious"): "Entries a record of the cited work contradicts (another title or authors, "
                                          "the year off, retracted).",
    ("citation_integrity", "unvalidatable"): "Entries nothing could be asked about, or a source failed and the rest "
                                             "found nothing: never evidence of fabrication.",
    ("citation_integrity", "validated"): "Entries a record agrees with on title, first author and year.",
    ("citation_integrity", "checked"): "Whether any metadata source (citations.metadata, the index) was asked about "
                                       "any entry of the submission; false: none was, so every entry is unvalidatable.",
    ("citation_integrity", "rank"): "Rank of the submission in the venue (1 = most not_found entries, then most "
                                    "suspicious, then paper id).",
    ("token_costs", "tokens_in"): "Prompt tokens of the calls made.",
    ("token_costs", "tokens_out"): "Completion tokens of the calls made.",
    ("retrieval_metrics", "reason"): "Why the retriever has no metrics (unavailable); null for ok rows.",
    ("retrieval_metrics", "n_claims_without_gold"): "Claims without gold evidence by design (review claims, answer-key "
                                                    "claims the manuscript cannot decide).",
    ("retrieval_metrics", "recall@1"): "Share of claims with a relevant chunk at rank 1 (hit@1).",
    ("retrieval_metrics", "recall@5"): "Share of claims with any relevant chunk in the top 5 (hit@5).",
    ("retrieval_metrics", "recall@10"): "Share of claims with any relevant chunk in the top 10 (hit@10).",
}


def column_description(table: str, column: str) -> str | None:
    """The description of `column` in `table`, or None when nothing describes it (a test keeps that from shipping).
    Any other column of `reviews` is a field of the venue's review form (open-ended by design)."""
    if (table, column) in TABLE_COLUMNS:
        return TABLE_COLUMNS[(table, column)]
    if column in COLUMNS:
        return COLUMNS[column]
    if table == "reviews":
        if column.endswith("_score"):
            return f"Integer read from the review form's `{column.removesuffix('_score')}` field ('6: ...' -> 6)."
        return f"The review form's `{column}` field as the reviewer wrote it."
    return None
