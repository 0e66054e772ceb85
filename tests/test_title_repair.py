"""Reference titles repaired at line-break hyphens (issue 34): the text layer keeps a line-end hyphen before a capital
("SciB-ERT") and closes one before a lower-case letter ("Vmeasure"); the paper's own spellings, the dictionary of its
words and the candidate paper's spellings say which word it was."""

from __future__ import annotations

import hashlib

import pytest

from peerify_dagster.domain.citations.bibliography import entries_from_blocks
from peerify_dagster.domain.citations.metadata import title_agreement
from peerify_dagster.domain.citations.titles import Spellings, repair_title
from peerify_dagster.resources.document_parser import DocumentParser
from tests import fixtures_pdf
from tests.real_data import REAL_DATA, needs

PDFS = REAL_DATA / "pdfs"


def document(body: str, title: str) -> Spellings:
    """A document's spellings: its body and the reference entry holding the title (discounted by `repair_title`)."""
    return Spellings.of([body, f"A. Author. 2020. {title}. In Proceedings."])


@pytest.mark.parametrize(("title", "body", "repaired"), [
    # a line-end hyphen kept before a capital, the word written whole elsewhere
    ("SciB-ERT: A pretrained language model for scientific text", "We fine-tune SciBERT on the task.",
     "SciBERT: A pretrained language model for scientific text"),
    ("STO-RIUM: A dataset and evaluation platform for story generation", "Stories come from STORIUM.",
     "STORIUM: A dataset and evaluation platform for story generation"),
    # a real hyphen lost at a line end, the word written with it elsewhere
    ("Vmeasure: A conditional entropy-based external cluster evaluation measure",
     "Clusters are scored by V-measure and purity.",
     "V-measure: A conditional entropy-based external cluster evaluation measure"),
    ("Towards stateof-the-art parsing", "It is state-of-the-art on two benchmarks.",
     "Towards state-of-the-art parsing"),
    # written nowhere else, but both halves are words of the paper
    ("Contextenhanced citation sentiment detection", "The context of a citation is enhanced by its neighbours.",
     "Context-enhanced citation sentiment detection"),
], ids=["SciB-ERT", "STO-RIUM", "Vmeasure", "stateof-the-art", "dictionary"])
def test_a_title_broken_at_a_line_end_is_repaired_with_the_papers_own_spellings(title, body, repaired):
    spellings = document(body, title)
    assert repair_title(title, spellings) == repaired
    assert repair_title(repaired, spellings) == repaired  # a repaired title stays so (the entry as printed is there)


@pytest.mark.parametrize(("title", "body"), [
    # a real compound: written so elsewhere, or written nowhere else at all
    ("Multi-News: A large-scale multi-document summarization dataset", "We also train on Multi-News."),
    ("Multi-News: A large-scale multi-document summarization dataset", "We train on news."),
    # a hyphen before a lower-case letter survives the layout only where the paper writes it so: never dropped
    ("BERT: Pre-training of deep bidirectional transformers", "Pretraining takes four days."),
    # halves shorter than five letters are affixes and little words that make ordinary words ("Read-ability")
    ("Bertscore: Evaluating text generation with bert", "The score of bert on text."),
    # the title's own words are no evidence for themselves
    ("Citationenhanced graphs: when a citation is enhanced", "We study graphs."),
], ids=["compound-written-so", "compound-unknown", "lower-case-hyphen", "short-halves", "own-occurrence"])
def test_a_title_without_evidence_of_a_break_is_left_as_printed(title, body):
    assert repair_title(title, document(body, title)) == title


def test_the_candidate_papers_spelling_wins_when_comparing():
    title = "Sentence-bert: Sentence embeddings using siamese bertnetworks"
    candidate = Spellings.of(["Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks"])
    assert repair_title(title, candidate=candidate) == "Sentence-bert: Sentence embeddings using siamese bert-networks"
    assert repair_title("SciB-ERT: A model", Spellings.of(["SciB-ERT again"]), Spellings.of(["SciBERT"])) == \
        "SciBERT: A model"
    assert repair_title(None) is None


def test_a_record_of_the_cited_work_agrees_with_a_broken_title():
    assert title_agreement("SciB-ERT: A pretrained language model for scientific text",
                           "SciBERT: A Pretrained Language Model for Scientific Text") == 1.0
    assert title_agreement("Contextenhanced citation sentiment detection",
                           "Context-Enhanced Citation Sentiment Detection") == 1.0


@pytest.fixture(scope="module")
def parser() -> DocumentParser:
    return DocumentParser()


def test_the_bibliography_gives_repaired_titles_from_a_rendered_pdf(parser):
    paper = fixtures_pdf.citing_paper("Citation Checks in Practice", (
        "We fine-tune SciBERT (Beltagy et al., 2019) and score clusters by V-measure (Rosenberg and Hirschberg, "
        "2007).",), references=(
        "Iz Beltagy, Kyle Lo, and Arman Cohan. 2019. SciB-\nERT: A pretrained language model for scientific text. "
        "In Proceedings of EMNLP.",
        "Andrew Rosenberg and Julia Hirschberg. 2007. V-\nmeasure: A conditional entropy-based external cluster "
        "evaluation measure. In Proceedings of EMNLP.",
    ))
    blocks = parser.parse(paper, source_name="citing.pdf", paper_id="citing").blocks

    entries = entries_from_blocks(blocks)

    assert [entry.title for entry in entries] == [
        "SciBERT: A pretrained language model for scientific text",
        "V-measure: A conditional entropy-based external cluster evaluation measure"]
    assert "SciB-ERT" in entries[0].raw_text  # the entry as printed is kept


@needs(PDFS)
def test_papermage_cites_scibert_by_its_name(parser):
    """papermage.pdf breaks "SciB-ERT" at a line end of its reference list and writes SciBERT in its body."""
    data = (PDFS / "papermage.pdf").read_bytes()
    blocks = parser.parse(data, source_name="papermage.pdf", paper_id=hashlib.sha256(data).hexdigest()).blocks

    titles = [entry.title for entry in entries_from_blocks(blocks)]

    assert "SciBERT: A pretrained language model for scientific text" in titles
    assert not any(title and "SciB-ERT" in title for title in titles)
