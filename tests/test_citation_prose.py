"""Citance detection on what is not prose and on a paper's own marker style: code, table rows, captions, running
heads and a list's labels cite nothing; a footer's "(NIPS 2017)" and a corpus's "(OpenSubtitles2012, en-it)" are no
markers; the paper's style, told by its reference list, is preferred and a marker of the other style counts only
where it resolves. The real PDFs (../shared/real-data/pdfs) are read when present and skipped cleanly when not."""

from __future__ import annotations

from pathlib import Path

import pytest

from peerify_dagster.domain.citations.bibliography import read_bibliography
from peerify_dagster.domain.citations.detection import (
    AUTHOR_YEAR,
    NUMERIC,
    detect_citances,
    detect_paper_citances,
    find_markers,
    paper_style,
)
from peerify_dagster.domain.citations.entries import PARSED, ParsedEntry
from peerify_dagster.domain.citations.sentences import is_prose

REAL_PDFS = Path(__file__).resolve().parents[2] / "shared" / "real-data" / "pdfs"


def cited_sentences(text: str) -> list[str]:
    return [text[citance.start:citance.end] for citance in detect_citances(text)]


@pytest.mark.parametrize("sentence", [
    ">>> doc.sentences[2]",
    ">>> len(items) [2]",
    "$ pip install papermage [1]",
    "C >>> doc.sentences[2].tokens[9:13]",
    "scores = np.mean(results[1])",
    "if x == [1]: return",
    "BERT [12] 85.3 86.1 87.2",
    "RoBERTa [5] 88.0 (0.4) 91.2 (0.3) 90.1",
    "Table 2: Accuracy of the baselines [3] on the test set.",
    "Figure 4. The pipeline of [7].",
    "31st Conference on Neural Information Processing Systems (NIPS 2017), Long Beach, CA, USA.",
    "Published as a conference paper at ICLR 2020 [1]",
])
def test_code_table_rows_captions_and_running_heads_are_not_prose(sentence):
    assert not is_prose(sentence)


@pytest.mark.parametrize("sentence", [
    "It holds [3].",
    "Prior work [1] [2] [3] [4] did so.",
    "Scores were 85.3, 86.1 and 87.2 on the three sets [12].",
    "Visit www.semanticscholar.org (Etzioni, 2011).",
    "Following Smith et al.(2020), we use the U.S.[3] data.",
    "Figure 1 shows what Smith (2020) found.",
    "The conference on learning (Smith, 2020) was held twice.",
    "Translation quality on En->De improves [5].",
])
def test_prose_stays_prose(sentence):
    assert is_prose(sentence)


def test_non_prose_sentences_in_a_paragraph_are_skipped_and_their_prose_neighbours_kept():
    text = ("We build on earlier work [3].\n\n>>> doc.sentences[2]\n\nBERT [12] 85.3 86.1 87.2\n\n"
            "Table 2: Results of [4].\n\nThe method of Smith (2020) is used.")
    assert cited_sentences(text) == ["We build on earlier work [3].", "The method of Smith (2020) is used."]


@pytest.mark.parametrize("text", [
    "31st Conference on Neural Information Processing Systems (NIPS 2017), Long Beach.",
    "We train on (OpenSubtitles2012, en-it) pairs.",
    "Results on CoNLL2003 (SemEval2017) data.",
    "Presented at (ICLR 2020) and (EMNLP 2019).",
])
def test_venue_and_corpus_names_are_no_author_year_markers(text):
    assert find_markers(text) == []


@pytest.mark.parametrize("text, expected", [
    ("Shown by (Smith 2012) and (Smith, 2012).", ["(Smith 2012)", "(Smith, 2012)"]),
    ("Open Subtitles (Lison and Tiedemann, 2016) is used.", ["(Lison and Tiedemann, 2016)"]),
])
def test_author_year_markers_with_a_separated_year_still_count(text, expected):
    assert [marker.text for marker in find_markers(text)] == expected


@pytest.mark.parametrize("text", [
    "The prompt reads as follows: [1] Read the claim. [2] Check the evidence. [3] Answer yes or no.",
    "[1] Summarize the paper in one sentence.",
    '[2] "Is the claim supported?"',
])
def test_a_lists_labels_cite_nothing(text):
    assert detect_citances(text) == []


@pytest.mark.parametrize("text, expected", [
    ("This is an effect. [5] Another one.[6] A third.", ["This is an effect. [5]", "Another one.[6]"]),
    ("[12] showed the effect first.", ["[12] showed the effect first."]),
    ("As noted: [4] Later work agrees.", ["As noted: [4] Later work agrees."]),
])
def test_markers_after_a_stop_or_opening_a_sentence_as_its_subject_still_cite(text, expected):
    assert cited_sentences(text) == expected


def entry(index: int, surname: str, year: int, label: str | None = None) -> ParsedEntry:
    return ParsedEntry(index=index, raw_text=f"{surname}, A. A paper. {year}.", label=label, authors=(surname,),
                       surnames=(surname,), title="A paper", year=year, status=PARSED)


NUMBERED = [entry(1, "Smith", 2020, "1"), entry(2, "Lee", 2019, "2")]
AUTHOR_YEAR_LIST = [entry(1, "Smith", 2020), entry(2, "Lee", 2019)]


@pytest.mark.parametrize("entries, text, expected", [
    # More markers of the other style, but only the paper's own resolve.
    (NUMBERED, "As in [1] and [2], (NAACL 2019) (Wu 2018) (Kim, 2017).", NUMERIC),
    (AUTHOR_YEAR_LIST, "Items [1] [2] [3] as (Smith, 2020) and Lee (2019) say.", AUTHOR_YEAR),
    # Nothing resolves (no list, or a list whose labels were lost): most markers decide.
    ([], "One [1], two [2] and³ as (Wu 2018) says.", NUMERIC),
    (AUTHOR_YEAR_LIST, "One [1], two [2] and³ as (Wu 2018) says.", NUMERIC),
    ([], "As (Wu 2018) and Kim (2017) say [4].", AUTHOR_YEAR),
    ([], "As (Wu 2018) says [4].", None),
    ([], "No marker here.", None),
])
def test_paper_style_is_what_resolves_then_what_most_markers_are(entries, text, expected):
    assert paper_style(entries, find_markers(text)) == expected


def test_an_author_year_paper_drops_numeric_markers_that_resolve_to_nothing():
    texts = ["The sentences of a paragraph are doc.paragraphs [2] in order.", "This is known (Smith, 2020)."]
    found = detect_paper_citances(texts, AUTHOR_YEAR_LIST)
    assert [[m.text for c in citances for m in c.markers] for citances in found] == [[], ["(Smith, 2020)"]]


def test_a_numbered_paper_keeps_author_year_markers_only_where_they_resolve():
    text = "The task (NAACL-HLT 2019) was set by Smith et al. (2020) and solved later [2]."
    citances, _ = detect_paper_citances([text, "It is known [1]."], NUMBERED)
    assert [m.text for m in citances[0].markers] == ["Smith et al. (2020)", "[2]"]
    assert [m.text for m in detect_citances(text)[0].markers] == ["(NAACL-HLT 2019)", "Smith et al. (2020)", "[2]"]


def test_without_a_reference_list_the_majority_style_wins():
    texts = ["One [1].", "Two [2].", "Three (Smith, 2020)."]
    assert [len(citances) for citances in detect_paper_citances(texts, [])] == [1, 1, 0]


@pytest.fixture(scope="module")
def real_citances():
    if not REAL_PDFS.is_dir():
        pytest.skip(f"real data not found at {REAL_PDFS} (../shared/real-data)")
    from peerify_dagster.resources.document_parser import DocumentParser

    parser = DocumentParser()
    found = {}
    for name in ("papermage.pdf", "2020.acl-main.447.pdf"):
        blocks = parser.parse(REAL_PDFS / name).blocks
        entries = [placed.entry for placed in read_bibliography(blocks)]
        prose = [block for block in blocks if block.kind in ("paragraph", "abstract")]
        found[name] = [(block.text[c.start:c.end], c.markers)
                       for block, citances in zip(prose, detect_paper_citances([b.text for b in prose], entries))
                       for c in citances]
    return found


def test_real_papers_code_and_other_style_mentions_are_not_citances(real_citances):
    papermage = real_citances["papermage.pdf"]
    assert not [sentence for sentence, _ in papermage if ">>>" in sentence]
    assert any("(Shen et al., 2021)" in sentence for sentence, _ in papermage)
    # S2ORC is author-year: its "[1]" and "[3]-[5]" are examples of a style it describes, never citations.
    s2orc = real_citances["2020.acl-main.447.pdf"]
    assert not [m.text for _, markers in s2orc for m in markers if m.style == NUMERIC]
    assert sum(1 for _, markers in s2orc for m in markers if m.style == AUTHOR_YEAR) >= 20
