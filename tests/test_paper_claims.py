"""PaperSourced claims: which paragraphs may be drawn (never introduction, related work, conclusion, references,
checklists or appendices, however long those are), the seeded draw, gold chunks, and the checks on written
claims and rephrasings."""

from __future__ import annotations

import pytest

from peerify_dagster.domain import paper_claims as p
from peerify_dagster.domain.layout.blocks import Block

FILLER = ("The approach is evaluated with care on several benchmarks and the numbers are reported with their "
          "standard deviations over five seeds so that the differences can be judged.")


def paragraph(order: int, *path: str, in_appendix: bool = False, kind: str = "paragraph", text: str = "") -> Block:
    return Block(kind, text or f"Paragraph {order} of {path[-1]}. {FILLER}", 1, list(path), in_appendix, order)


def long_manuscript() -> list[Block]:
    """Long introduction, related work, conclusion, references, checklist and appendix; a short method section."""
    blocks = [Block("abstract", f"Abstract. {FILLER}", 1, [], False, 0)]
    order = 1
    for path, count, appendix, kind in [
        (("1 Introduction",), 12, False, "paragraph"), (("2 Related Work",), 15, False, "paragraph"),
        (("2 Related Work", "2.1 Sparse retrieval"), 6, False, "paragraph"), (("3 Method",), 2, False, "paragraph"),
        (("3 Method", "3.1 Anchor selection"), 1, False, "paragraph"), (("6 Conclusion",), 8, False, "paragraph"),
        (("Acknowledgments",), 2, False, "paragraph"), (("References",), 30, False, "reference"),
        (("NeurIPS Paper Checklist",), 10, False, "paragraph"), (("A Additional experiments",), 20, True, "paragraph"),
        (("B Proofs", "B.1 Lemma 2"), 5, True, "paragraph"),
    ]:
        for _ in range(count):
            blocks.append(paragraph(order, *path, in_appendix=appendix, kind=kind))
            order += 1
    return blocks


@pytest.mark.parametrize(("heading", "name"), [
    ("1 Introduction", "Introduction"), ("2.1 Setup", "Setup"), ("B. Proofs", "Proofs"),
    ("IV. RELATED WORK", "RELATED WORK"),
    ("Appendix A: Extra results", "Extra results"), ("Method", "Method"),
])
def test_heading_name_drops_numbering(heading, name):
    assert p.heading_name(heading) == name


@pytest.mark.parametrize(("path", "excluded"), [
    (["1 Introduction"], True), (["2 Related Works"], True), (["2 Background and Related Work"], True),
    (["7 Conclusions and Future Work"], True), (["References"], True), (["NeurIPS Paper Checklist"], True),
    (["Acknowledgements"], True), (["Appendix"], True), (["5 Experiments", "5.4 Related work"], True),
    (["3 Method"], False), (["4 Experiments", "4.2 Main results"], False), (["2 Background"], False),
    (["5 Discussion"], False),
])
def test_excluded_sections(path, excluded):
    assert (p.excluded_section(path) is not None) == excluded


@pytest.mark.parametrize("seed", range(25))
def test_the_draw_never_leaves_the_body_however_long_the_other_sections_are(seed):
    body = p.body_paragraphs(long_manuscript())
    assert {tuple(b.section_path) for b in body} == {("3 Method",), ("3 Method", "3.1 Anchor selection")}
    drawn = p.draw_paragraphs("paper", body, 5, seed)
    assert len(drawn) == 3 and all(b.section_path[0] == "3 Method" for b in drawn)


def test_appendix_paragraphs_only_when_configured():
    body = p.body_paragraphs(long_manuscript(), include_appendix=True)
    sections = {b.section_path[0] for b in body}
    assert sections == {"3 Method", "A Additional experiments", "B Proofs"}


def test_short_paragraphs_are_not_drawn():
    blocks = [paragraph(1, "3 Method", text="Too short to hold a claim."), paragraph(2, "3 Method")]
    assert [b.order for b in p.body_paragraphs(blocks)] == [2]


def test_the_draw_is_seeded_and_stable_when_paragraphs_are_added():
    body = [paragraph(i, "3 Method") for i in range(1, 21)]
    first = p.draw_paragraphs("paper", body, 4, seed=7)
    assert first == p.draw_paragraphs("paper", list(reversed(body)), 4, seed=7)
    assert first != p.draw_paragraphs("paper", body, 4, seed=8)
    more = p.draw_paragraphs("paper", body + [paragraph(i, "3 Method") for i in range(21, 41)], 4, seed=7)
    # Old paragraphs that are still drawn keep their relative order; newcomers only displace, never reshuffle.
    assert [b for b in more if b in body] == first[:len([b for b in more if b in body])]
    with pytest.raises(ValueError, match=">= 0"):
        p.draw_paragraphs("paper", body, -1, seed=7)


def test_gold_chunks_whole_paragraph_split_paragraph_and_not_found():
    text = ("First sentence about anchors is here. Second sentence reports 6.7 points of gain. "
            "Third sentence names the three benchmarks used.")
    chunks = [("c1", "3 Method\nUnrelated opening text. " + text), ("c2", "3 Method\nSomething else entirely.")]
    assert p.gold_chunk_ids(text, chunks) == ["c1"]
    split = [("c1", "3 Method\nFirst sentence about anchors is here. Second sentence reports 6.7 points of gain."),
             ("c2", "3 Method\nThird sentence names the three benchmarks used. Next paragraph."),
             ("c3", "4 Results\nNothing of it.")]
    assert p.gold_chunk_ids(text, split) == ["c1", "c2"]
    assert p.gold_chunk_ids(text, [("c3", "4 Results\nNothing of it.")]) == []


def test_paper_claim_ids_are_stable():
    identity = p.paper_claim_id("paper", "ASR adds 41 terms per passage.")
    assert identity == p.paper_claim_id("paper", " asr adds 41 terms  per passage ")
    assert identity.startswith("pc-") and identity != p.paper_claim_id("other", "ASR adds 41 terms per passage.")


PARAGRAPH = ("The expansion makes the index larger. The ASR index for LongSci-QA is 2.3 times the size of the BM25 "
             "index, because every passage gains on average 41 terms.")


@pytest.mark.parametrize(("original", "reason"), [
    ("The ASR index for LongSci-QA is 2.3 times the size of the BM25 index.", None),
    ("Paragraph 4", "claim_fragment"),
    ("Is the index larger than the BM25 index?", "claim_question"),
    ("The new policy will reduce carbon emissions by 10% next year.", p.CLAIM_NOT_GROUNDED),
])
def test_written_claim_problem(original, reason):
    problem = p.written_claim_problem(original, PARAGRAPH)
    assert (problem[0] if problem else None) == reason


ORIGINAL = "The ASR index for LongSci-QA is 2.3 times the size of the BM25 index."


@pytest.mark.parametrize(("rephrased", "reason"), [
    ("On LongSci-QA, the index built by ASR is 2.3 times as large as the BM25 one.", None),
    (None, p.REPHRASE_UNUSABLE),
    ("The  ASR index for LongSci-QA is 2.3 times the size of the BM25 INDEX", p.REPHRASE_IDENTICAL),
    ("Is the index larger?", "rephrasing_question"),
    ("Claim 1", "rephrasing_fragment"),
    # Longer than a one-sentence paragraph is fine for a rephrasing.
    ("Measured on LongSci-QA, the inverted index that ASR builds takes 2.3 times the space of the BM25 index, as "
     "every passage gains on average 41 terms from the expansion.", None),
])
def test_rephrasing_problem(rephrased, reason):
    problem = p.rephrasing_problem(ORIGINAL, rephrased)
    assert (problem[0] if problem else None) == reason
