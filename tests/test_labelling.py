"""Pure labelling logic: the `labelling:` options, which author text and which manuscript passages a labeller sees,
and the agreement math against hand-computed tables."""

from __future__ import annotations

import pytest

from peerify_dagster.domain import labelling as lab
from peerify_dagster.domain.labels import NOT_DETERMINED, NOT_SUPPORTED, PARTIALLY_SUPPORTED, SUPPORTED
from peerify_dagster.domain.venues import RegistryError, _venue_from_entry

S, P, N, D = SUPPORTED, PARTIALLY_SUPPORTED, NOT_SUPPORTED, NOT_DETERMINED


@pytest.mark.parametrize(("options", "message"), [
    ({"thread_evidence": "everything"}, "labelling: thread_evidence must be one of"),
    ({"manuscript_evidence": "some"}, "labelling: manuscript_evidence must be one of"),
    ({"retriever": "bm25+rerank"}, "labelling: retriever must be one of"),
    ({"top_k": 0}, "labelling: top_k must be a positive integer, got 0"),
    ({"top_k": True}, "labelling: top_k must be a positive integer"),
    ({"topk": 3}, r"labelling: unknown option\(s\) \['topk'\]"),
    ("retrieved", "labelling: expected a mapping of options"),
])
def test_a_bad_labelling_option_names_the_venue_and_the_key(options, message):
    with pytest.raises(RegistryError, match=f"venue 'ICLR': {message}"):
        _venue_from_entry("ICLR", {"seed": 1, "labelling": options})


def test_labelling_defaults_are_the_papers_settings():
    config = lab.LabellingConfig.from_mapping(None)
    assert (config.thread_evidence, config.manuscript_evidence, config.top_k) == ("longest_author_reply", "auto", 10)
    assert _venue_from_entry("v", {"seed": 1, "labelling": {"top_k": 5}}).labelling == {"top_k": 5}


REVIEW = "rev1"
RESPONSES = [
    {"id": "r-late-long", "replyto": "fu1", "text": "word " * 80, "cdate": 30},  # longest, but not a direct reply
    {"id": "r-direct-short", "replyto": REVIEW, "text": "We added the ablation in Table 3.", "cdate": 10},
    {"id": "r-direct-long", "replyto": REVIEW, "text": "We disagree: the baseline is tuned, see Appendix B.",
     "cdate": 12},
]
FOLLOWUPS = [{"id": "fu1", "text": "Thanks, but the tuning is still unclear.", "cdate": 20, "own_review": True},
             {"id": "fu2", "text": "I share this concern.", "cdate": 25, "own_review": False}]


def test_longest_author_reply_is_the_longest_direct_reply_to_the_review():
    evidence = lab.thread_evidence(REVIEW, RESPONSES, FOLLOWUPS, lab.THREAD_LONGEST_REPLY)
    assert (evidence.mode, evidence.note_ids) == ("longest_author_reply", ["r-direct-long"])
    assert evidence.text == "We disagree: the baseline is tuned, see Appendix B."
    # no direct reply at all: the thread's longest author response
    indirect = lab.thread_evidence(REVIEW, RESPONSES[:1], [], lab.THREAD_LONGEST_REPLY)
    assert indirect.note_ids == ["r-late-long"]


def test_thread_with_followups_interleaves_in_time_order_and_marks_who_wrote_what():
    evidence = lab.thread_evidence(REVIEW, RESPONSES, FOLLOWUPS, lab.THREAD_WITH_FOLLOWUPS)
    assert evidence.note_ids == ["r-direct-short", "r-direct-long", "fu1", "fu2", "r-late-long"]
    blocks = evidence.text.split("\n\n")
    assert [block.split("\n")[0] for block in blocks] == [
        "[Authors]", "[Authors]", "[Reviewer]", "[Another reviewer]", "[Authors]"]
    assert blocks[2].endswith("Thanks, but the tuning is still unclear.")


@pytest.mark.parametrize("mode", lab.THREAD_CHOICES)
def test_a_review_without_author_response_gets_no_evidence_in_either_mode(mode):
    blank = [{"id": "x", "replyto": REVIEW, "text": "  ", "cdate": 1}]
    evidence = lab.thread_evidence(REVIEW, blank, FOLLOWUPS, mode)
    assert (evidence.mode, evidence.text, evidence.note_ids) == ("no_author_response", None, [])


CHUNKS = [(f"p:{i}:h", f"Section {i}. " + "The model uses eight layers and dropout. " * 20) for i in range(6)]
RANKED = ["p:4:h", "p:1:h", "p:5:h", "p:0:h"]


def budget(window: int, output: int = 256) -> lab.ContextBudget:
    return lab.ContextBudget("tiny-model", window, output)


def test_auto_shows_the_whole_manuscript_in_order_when_it_fits_else_the_retrieved_top_k():
    config = lab.LabellingConfig(manuscript_evidence="auto", top_k=2)
    whole = lab.manuscript_evidence(config, "claim", CHUNKS, RANKED, budget(8192))
    assert whole.mode == "whole_manuscript" and whole.error is None
    assert whole.chunk_ids == [c for c, _ in CHUNKS] and whole.text.index("[p:0:h]") < whole.text.index("[p:5:h]")
    small = lab.manuscript_evidence(config, "claim", CHUNKS, RANKED, budget(1500))
    assert (small.mode, small.chunk_ids) == ("retrieved", ["p:4:h", "p:1:h"])
    assert small.text.startswith("[p:4:h] Section 4.") and "[p:0:h]" not in small.text


def test_whole_never_truncates_a_manuscript_that_does_not_fit():
    config = lab.LabellingConfig(manuscript_evidence="whole")
    result = lab.manuscript_evidence(config, "claim", CHUNKS, RANKED, budget(1500))
    assert (result.mode, result.text) == ("whole_manuscript", None)
    assert "does not fit" in result.error and "'tiny-model'" in result.error and "1500" in result.error
    # the estimate's margin and the answer budget count: a window just above the prompt alone is not enough
    tokens = lab.prompt_tokens(lab.MANUSCRIPT_PROMPT, {"claim": "claim", "evidence": "\n\n".join(
        f"[{c}] {t.strip()}" for c, t in CHUNKS)})
    assert lab.manuscript_evidence(config, "claim", CHUNKS, RANKED, budget(tokens + 10, output=0)).text is None
    assert lab.manuscript_evidence(config, "claim", CHUNKS, RANKED, budget(int(tokens * 1.2) + 256)).text


def test_retrieved_uses_the_ranking_and_reports_what_it_cannot_show():
    config = lab.LabellingConfig(manuscript_evidence="retrieved", top_k=3)
    result = lab.manuscript_evidence(config, "claim", CHUNKS, RANKED, budget(100_000))
    assert (result.mode, result.chunk_ids) == ("retrieved", ["p:4:h", "p:1:h", "p:5:h"])
    assert lab.manuscript_evidence(config, "claim", CHUNKS, [], budget(100_000)).error.startswith("no_evidence")
    too_small = lab.manuscript_evidence(config, "claim", CHUNKS, RANKED, budget(300))
    assert too_small.text is None and "the top 3 chunks does not fit" in too_small.error
    missing = lab.manuscript_evidence(config, "claim", [], RANKED, budget(100_000))
    assert (missing.mode, missing.text, missing.error) == ("no_manuscript", None, "no_manuscript")


def test_raw_labels_and_verbatim_quotes():
    assert lab.raw_label('Sure! {"label": "Mostly true", "justification": "x"}') == "Mostly true"
    assert lab.raw_label("no json") is None and lab.raw_label(None) is None
    assert lab.answer_quotes({"evidence_quotes": ["a", " ", 3, "b"]}) == ["a", "b"]
    assert lab.verbatim_quotes(["the  Baseline is tuned", "not there"], "We say: the baseline\nis tuned.") == 1


# -- agreement ---------------------------------------------------------------------------------------------------

def test_kappa_and_table_match_a_hand_computed_example():
    # A: S S S P N D, B: S S P P N S -> agreed 4/6; marginals A (3,1,1,1), B (3,2,1,0): p_e = 12/36; kappa 0.5
    result = lab.agreement([(S, S), (S, S), (S, P), (P, P), (N, N), (D, S)])
    assert (result.n_pairs, result.agreed) == (6, 4)
    assert result.raw_agreement == pytest.approx(4 / 6) and result.kappa == pytest.approx(0.5)
    assert result.table == [[2, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0]]
    assert result.kappa_status == "ok"


def test_kappa_is_zero_for_chance_level_and_one_for_perfect_agreement():
    # A always S, B split: p_o = p_e = 1/2 -> kappa 0
    assert lab.agreement([(S, S), (S, N), (S, S), (S, N)]).kappa == pytest.approx(0.0)
    assert lab.agreement([(S, S), (N, N), (D, D)]).kappa == pytest.approx(1.0)
    # complete disagreement over two classes: p_o 0, p_e 1/2 -> kappa -1
    assert lab.agreement([(S, N), (N, S)]).kappa == pytest.approx(-1.0)


def test_a_one_class_table_reports_kappa_as_undefined_not_as_a_number():
    result = lab.agreement([(D, D)] * 5)
    assert (result.raw_agreement, result.kappa, result.kappa_status) == (1.0, None, "undefined_single_class")
    empty = lab.agreement([])
    assert (empty.n_pairs, empty.raw_agreement, empty.kappa, empty.kappa_status) == (0, None, None, "no_pairs")
    with pytest.raises(ValueError, match="'Maybe'"):
        lab.agreement([(S, "Maybe")])


def agreement_row(source: str, pairs: list[tuple[str, str]], claim_type: str = "all") -> dict:
    """A labeller_agreement row (the columns agreement_warnings reads) of these (A, B) pairs."""
    result = lab.agreement(pairs)
    return {"source": source, "claim_type": claim_type, "kappa_status": result.kappa_status,
            "confusion": result.table}


def test_an_undefined_kappa_comes_with_a_sentence_saying_why():
    one_label = lab.summarise([lab.LabelledItem(f"c{i}", "thread", None, S, S, True, True) for i in range(5)])
    sentence = ("Cohen's kappa is undefined: both labellers gave Supported to all 5 items, so chance agreement is 1 "
                "and agreement beyond chance cannot be measured; the raw agreement of 1.000 only says they never "
                "differed.")
    assert lab.describe(one_label).endswith(sentence)
    assert lab.agreement_warnings([agreement_row("thread", [(S, S)] * 5, "factual")]) == [
        f"thread, claim type factual: {sentence}"]
    # a single claim type repeats its source's row word for word: said once
    assert lab.agreement_warnings([agreement_row("thread", [(S, S)] * 5), agreement_row("thread", [(S, S)] * 5,
                                                                                        "factual")]) == [
        f"thread, claim type all: {sentence}"]
    assert lab.agreement_warnings([agreement_row("thread", [])]) == [
        "thread, claim type all: Cohen's kappa is undefined: no item has a usable label from both labellers."]
    defined = lab.summarise([lab.LabelledItem("c1", "thread", None, S, S, True, True),
                             lab.LabelledItem("c2", "thread", None, N, N, True, True)])
    assert "undefined" not in lab.describe(defined)


def test_a_labeller_giving_one_label_to_ninety_percent_of_the_pairs_is_named_and_eighty_nine_is_not():
    ninety = [(S, S)] * 5 + [(S, N)] * 4 + [(N, N)]  # A: Supported 9 of 10; B: 5 of 10
    eighty_nine = [(S, S)] * 50 + [(S, N)] * 39 + [(N, N)] * 11  # A: Supported 89 of 100
    assert lab.agreement_warnings([agreement_row("manuscript", ninety), agreement_row("thread", eighty_nine)]) == [
        "Labeller a answered Supported to 9 of the 10 manuscript items both labellers labelled (90%): raw agreement "
        "mostly reflects how common Supported is; read kappa and the table, not raw agreement."]
    # a claim type's row and the pooled source repeat what the source's `all` row says: no warning of their own
    assert lab.agreement_warnings([agreement_row("manuscript", ninety, "factual"), agreement_row("all", ninety)]) == []
    # B's answers are the table's columns
    assert lab.agreement_warnings([agreement_row("thread", [(N, D)] * 9 + [(S, D)])])[0].startswith(
        "Labeller a answered Not Supported to 9 of the 10")
    assert "Labeller b answered Not Determined to 10 of the 10 thread items" in \
        lab.agreement_warnings([agreement_row("thread", [(N, D)] * 9 + [(S, D)])])[1]


def test_items_without_a_call_and_parse_failures_are_counted_apart():
    rows = [
        {"claim_id": "c1", "source": "thread", "labeller": "a", "label": S, "call_id": "x1"},
        {"claim_id": "c1", "source": "thread", "labeller": "b", "label": N, "call_id": "x2"},
        {"claim_id": "c2", "source": "thread", "labeller": "a", "label": D, "call_id": None},  # rule label
        {"claim_id": "c2", "source": "thread", "labeller": "b", "label": D, "call_id": None},
        {"claim_id": "c1", "source": "manuscript", "labeller": "a", "label": None, "call_id": "x3"},  # bad label
        {"claim_id": "c1", "source": "manuscript", "labeller": "b", "label": S, "call_id": "x4"},
        {"claim_id": "c2", "source": "manuscript", "labeller": "a", "label": S, "call_id": "x5"},
        {"claim_id": "c2", "source": "manuscript", "labeller": "b", "label": S, "call_id": "x6"},
    ]
    items = lab.paired_items(rows, {"c1": "factual", "c2": "subjective"})
    grouped = lab.groups(items)
    overall = lab.summarise(grouped[("all", "all")])
    assert (overall.n_items, overall.n_without_call, overall.n_parse_failed) == (4, 1, 1)
    assert (overall.agreement.n_pairs, overall.agreement.agreed) == (2, 1)
    assert lab.summarise(grouped[("thread", "subjective")]).agreement.kappa_status == "no_pairs"
    assert lab.summarise(grouped[("manuscript", "subjective")]).agreement.kappa_status == "undefined_single_class"
    assert "1 without a call, 1 parse failures" in lab.describe(overall)
    assert lab.markdown_table(overall.agreement.table).splitlines()[2] == "| Supported | 1 | 0 | 1 | 0 |"


def test_the_four_rows_check_names_claims_with_missing_duplicate_or_unknown_rows():
    full = [(claim, source, labeller, S) for claim in ("c1", "c2", "c3", "c4")
            for source in ("thread", "manuscript") for labeller in "ab"]
    assert lab.incomplete_claims(["c1", "c2", "c3", "c4"], full) == []
    broken = [row for row in full if row[:3] != ("c1", "thread", "b")]  # c1 lacks a row
    broken += [("c2", "thread", "a", S)]  # c2 has one twice
    broken = [(c, s, who, "Maybe" if (c, s, who) == ("c3", "manuscript", "a") else x) for c, s, who, x in broken]
    assert lab.incomplete_claims(["c1", "c2", "c3", "c4", "c5"], broken) == ["c1", "c2", "c3", "c5"]
