"""The scoring of benchmarks/eval_real_manuscripts.py on hand-made blocks and ground truth: reference entries
judged apart from the spaces a text layer drops, merged and split entries not single, the TEI header's own
entry left out, and a ground-truth erratum applied only to the file it was written for."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from tests.benchmark_scripts import load_benchmark


@dataclass
class _Block:
    kind: str
    text: str


@pytest.fixture(scope="module")
def script():
    return load_benchmark("eval_real_manuscripts")


def test_an_entry_whose_words_the_text_layer_glued_is_found_single(script) -> None:
    blocks = [_Block("reference", "Sepp Hochreiter and Jurgen Schmidhuber. 1997. Long short-termmemory. Neural comp."),
              _Block("reference", "Marco Valenzuela and Vu Ha. 2015. Identifying meaningful citations. In AAAI."),
              _Block("paragraph", "Deep learning changed everything.")]
    counts, not_single = script._reference_scores(["Long short-term memory", "Identifying Meaningful Citations",
                                                   "Deep learning changed everything"], blocks)
    # The paragraph's text is not a reference block: that entry is not found.
    assert counts == (2, 2, 3) and not_single == ["Deep learning changed everything"]


def test_two_entries_in_one_block_and_one_entry_over_two_blocks_are_not_single(script) -> None:
    blocks = [_Block("reference", "A. Author. 2019. Graph networks for citation intent. ACL. "
                                  "B. Writer. 2020. Retrieval augmented claim checking. EMNLP."),
              _Block("reference", "C. Person. 2021. Long documents need long"),
              _Block("reference", "context windows for verification. NAACL.")]
    entries = ["Graph networks for citation intent", "Retrieval augmented claim checking",
               "Long documents need long context windows for verification"]
    counts, not_single = script._reference_scores(entries, blocks)
    assert counts == (3, 0, 3) and not_single == entries


def test_a_short_title_inside_a_longer_one_does_not_unmake_the_longer(script) -> None:
    blocks = [_Block("reference", "D. Doe. 2016. Functional electrical stimulation for hand opening. JNER."),
              _Block("reference", "E. Roe. 2010. Functional electrical stimulation. Review.")]
    counts, _ = script._reference_scores(["Functional electrical stimulation for hand opening",
                                          "Functional electrical stimulation"], blocks)
    # The short title lies in both blocks; the longer entry's block holds no other entry but a phrase of it.
    assert counts == (2, 2, 2)


def test_tei_references_come_from_the_back_matter_only(script, tmp_path) -> None:
    tei = tmp_path / "paper.tei.xml"
    tei.write_text(
        '<TEI xmlns="http://www.tei-c.org/ns/1.0"><teiHeader><fileDesc><titleStmt>'
        '<title level="a" type="main">The paper itself</title></titleStmt><sourceDesc><biblStruct><analytic>'
        '<title level="a" type="main">The paper itself</title></analytic></biblStruct></sourceDesc></fileDesc>'
        '</teiHeader><text><body><div><head>Introduction</head><p>Text.</p></div></body><back><div>'
        '<listBibl><biblStruct><analytic><title level="a" type="main">A cited work</title></analytic></biblStruct>'
        '</listBibl></div></back></text></TEI>')
    truth = script._tei_truth(tei)
    assert truth.references == ["A cited work"] and truth.title == "The paper itself"


def _jats(path, titles: list[str]) -> None:
    sections = "".join(f"<sec><title>{title}</title><p>Text of {title}.</p></sec>" for title in titles)
    path.write_text(f"<article><front><article-meta><title-group><article-title>T</article-title></title-group>"
                    f"</article-meta></front><body>{sections}</body><back><ref-list/></back></article>")


def test_an_erratum_corrects_the_headings_of_its_file_and_keeps_them_as_given(script, tmp_path, monkeypatch) -> None:
    errata = tmp_path / "errata.json"
    errata.write_text(json.dumps({"paper.jats.xml": {"why": "a quote read as a section title", "section_titles": 3,
                                                      "not_headings": [2], "missing_headings": ["3. Discussion"]}}))
    monkeypatch.setattr(script, "ERRATA", errata)
    jats = tmp_path / "paper.jats.xml"
    _jats(jats, ["1. Introduction", "I felt much better after the programme", "2. Methods"])
    truth = script._with_erratum(script._jats_truth(jats), jats)
    assert truth.sections == ["1. Introduction", "2. Methods", "3. Discussion"]
    assert truth.sections_as_given == ["1. Introduction", "I felt much better after the programme", "2. Methods"]
    assert truth.erratum == "a quote read as a section title"
    other = tmp_path / "other.jats.xml"
    _jats(other, ["1. Introduction", "I felt much better after the programme", "2. Methods"])
    assert script._with_erratum(script._jats_truth(other), other).sections_as_given is None


def test_an_erratum_for_a_changed_file_is_refused_with_a_warning(script, tmp_path, monkeypatch, capsys) -> None:
    errata = tmp_path / "errata.json"
    errata.write_text(json.dumps({"paper.jats.xml": {"why": "w", "section_titles": 5, "not_headings": [2],
                                                      "missing_headings": []}}))
    monkeypatch.setattr(script, "ERRATA", errata)
    jats = tmp_path / "paper.jats.xml"
    _jats(jats, ["1. Introduction", "Quote", "2. Methods"])
    truth = script._with_erratum(script._jats_truth(jats), jats)
    assert truth.sections == ["1. Introduction", "Quote", "2. Methods"] and truth.sections_as_given is None
    assert "paper.jats.xml: erratum not applied: the file has 3 section titles" in capsys.readouterr().err


def test_the_shipped_errata_name_positions_inside_their_files(script) -> None:
    for name, erratum in json.loads(script.ERRATA.read_text()).items():
        if name == "about":
            continue
        assert erratum["why"] and all(1 <= position <= erratum["section_titles"]
                                      for position in erratum["not_headings"]), name
