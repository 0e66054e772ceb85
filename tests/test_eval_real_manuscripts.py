"""The scoring of benchmarks/eval_real_manuscripts.py on hand-made blocks and ground truth: reference entries
judged apart from the spaces a text layer drops, merged and split entries not single, the TEI header's own
entry left out, and a ground-truth erratum applied only to the file it was written for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

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


PUBLISHER_JATS = (
    '<article xmlns:xlink="http://www.w3.org/1999/xlink"><front><article-meta><title-group>'
    "<article-title>The paper itself</article-title></title-group><related-article><title-group><article-title>"
    "Another paper</article-title></title-group></related-article></article-meta></front><body>"
    "<sec><title>Introduction</title><p>Body text one.</p>"
    "<fig><caption><p>A caption is no body paragraph.</p></caption></fig>"
    "<sec><title>Nested part</title><p>Body text two.</p>"
    "<table-wrap><table><tr><td><p>A cell.</p></td></tr></table></table-wrap></sec></sec></body>"
    "<back><sec><title>Author contributions</title><p>All wrote it.</p></sec><ref-list><title>References</title>"
    "<ref><mixed-citation>Doe J. <article-title>A cited work</article-title>. J 2001.</mixed-citation></ref>"
    '<ref><mixed-citation>Roe R. A book without article title. Press; 1999. <pub-id pub-id-type="pmid">123</pub-id>'
    "</mixed-citation></ref></ref-list></back>"
    "<sub-article><body><sec><title>Decision letter</title><p>Not the article.</p></sec></body></sub-article>"
    "</article>")


def test_a_publishers_jats_gives_the_articles_own_body_and_references(script, tmp_path) -> None:
    nxml = tmp_path / "paper.nxml"
    nxml.write_text(PUBLISHER_JATS)
    truth = script._publisher_jats_truth(nxml)
    assert truth.title == "The paper itself"
    assert truth.sections == ["Introduction", "Nested part"]  # not the decision letter's, nor the back matter's
    assert truth.paragraphs == ["Body text one.", "Body text two."]  # no caption, no table cell
    assert truth.references == ["A cited work", "Roe R. A book without article title. Press; 1999."]
    # The back matter's titles, and the statements JATS keeps untitled in its front matter, are scored on neither side.
    assert truth.unscored_sections == ("Author contributions", *script.JATS_FRONT_STATEMENTS)
    assert "Funding" in truth.unscored_sections and "Introduction" not in truth.unscored_sections


def test_a_publishers_jats_without_a_body_is_named_unreadable(script, tmp_path) -> None:
    nxml = tmp_path / "abstract-only.nxml"
    nxml.write_text("<article><front><article-meta/></front><back/></article>")
    with pytest.raises(script.UnreadableGroundTruth, match="abstract-only.nxml: no <body>"):
        script._publisher_jats_truth(nxml)


def test_the_reference_count_error_sums_each_papers_difference(script) -> None:
    def paper(blocks: int, entries: int) -> dict:
        return {"pages": 10, "seconds": 0.5, "captions": [], "references": (entries, entries, entries),
                "reference_blocks": blocks}

    # 44 blocks for 40 entries and 56 for 60: 8 of 100 miscounted, though the totals agree.
    line, missed = script._layout_summary("journal", [paper(44, 40), paper(56, 60)])
    assert "| 8% |" in line and "reference entries counted within 5%" in missed
    line, missed = script._layout_summary("journal", [paper(41, 40), paper(60, 60)])
    assert "| 1% |" in line and missed == []


def test_body_prose_inside_an_abstract_block_is_counted_and_fails_the_layout(script, tmp_path) -> None:
    introduction = "District heating has risen as a crucial energy supply infrastructure over the last decades."
    methods = "We collected hourly heat load data from a cogeneration plant over eight heating seasons."
    abstract = "Heat networks play a vital role in the energy sector. " + introduction  # the introduction swallowed
    formula = "Age = ( 1n ( 1 - L t L ) - k ) + t o 1 2 3"  # mostly symbols: not prose, never counted
    misread = script._body_read_as_abstract([introduction, methods, formula], [abstract, formula])
    assert misread == [introduction]
    paper = {"pages": 10, "seconds": 0.5, "captions": [], "body_as_abstract": misread}
    line, missed = script._layout_summary("journal", [paper])
    assert "| 1 |" in line and "0 body paragraphs as abstract" in missed
    # Markdown gives the abstract as a paragraph of its own: there the measure is not taken.
    markdown = tmp_path / "paper.md"
    markdown.write_text(f"# The title\n\n## Abstract\n\n{abstract}\n\n## Introduction\n\n{introduction}\n")
    assert script._markdown_truth(markdown, "human Markdown", title_known=True).body_only is False


def test_a_folder_of_pdfs_is_measured_end_to_end_with_the_fastest_of_repeated_parses(script, tmp_path, capsys,
                                                                                       monkeypatch) -> None:
    folder = tmp_path / "journals"
    folder.mkdir()
    pdf = Path(script.REPO_ROOT, "peerify_dagster", "sample_venue", "snapshot", "pdfs", "Hp4sLx9TcV.pdf")
    (folder / pdf.name).write_bytes(pdf.read_bytes())
    parses = []
    original = script.DocumentParser.parse
    monkeypatch.setattr(script.DocumentParser, "parse", lambda self, path: parses.append(path) or original(self, path))
    assert script.main(["--pdfs", str(tmp_path / "none"), "--journals", str(folder), "--repeat", "3"]) == 0
    printed = capsys.readouterr().out
    assert "| Hp4sLx9TcV.pdf | journal |" in printed and "| journal | 1 |" in printed
    assert len(parses) == 1 + 3  # the warm-up, then three timed parses of the one paper
    with pytest.raises(SystemExit) as refused:
        script.main(["--pdfs", str(tmp_path / "none"), "--journals", str(folder), "--repeat", "0"])
    assert refused.value.code == 2 and "--repeat 0: parse each PDF at least once" in capsys.readouterr().err
