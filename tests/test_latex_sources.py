"""LaTeX and BibTeX inputs of the citation checker (`domain/citations/bibtex.py`, `domain/citations/latex.py`):
.bib files read exactly (macros, concatenation, accents, a malformed entry reported while the rest is read),
written back unchanged and corrected; a LaTeX project's main file, inputs, comments, citation commands, prose and
citances; compiled bibliographies (natbib and biblatex .bbl); arXiv source archives.

Every input is written here for these tests.
"""

from __future__ import annotations

import gzip
import io
import re
import tarfile

import pytest

from peerify_dagster.domain.citations.bibtex import (
    BibtexEntry,
    corrected_entry,
    parse_name,
    read_bibtex,
    tex_to_text,
    to_parsed_entry,
    write_bibtex,
)
from peerify_dagster.domain.citations.entries import PARSED, PARTIAL, UNPARSED
from peerify_dagster.domain.citations.latex import (
    MATH_PLACEHOLDER,
    LatexSourceError,
    arxiv_source_files,
    bbl_entries,
    citances,
    read_bbl,
    read_latex_source,
    reference_entries,
)

# --- BibTeX reading -------------------------------------------------------------------------------------------------

BIB = r"""This text before the first entry is ignored, even with an address: someone@example.org.
@String{acl = "Proceedings of the Annual Meeting of the {ACL}"}
@STRING( year2019 = {2019} )
@comment{ @article{commented, title = {Never read}} }
@preamble{ "\newcommand{\noopsort}[1]{}" }

@InProceedings{devlin2019bert,
  AUTHOR    = {Jacob Devlin and Ming-Wei Chang and {van der Berg}, Jan and Kristina Toutanova},
  Title     = "{BERT}: Pre-training of Deep Bidirectional Transformers for {L}anguage Understanding",
  booktitle = acl # ", Volume 1",
  year      = year2019,
  month     = jun,
  pages     = {4171--4186},
  doi       = {https://doi.org/10.18653/V1/N19-1423},
}

@article{broken,
  title = {A missing comma}
  author = {Some One},
}

@misc(mueller2020,
  author = {M{\"u}ller, Hans and Ludwig van Beethoven and de la Cruz, Jr, Jos{\'e} and others},
  title = {Sch{\"o}ne {\"A}pfel: \emph{na{\"\i}ve} sets \& 5\% of $\alpha$-mixing --- revisited},
  eprint = {2203.00130v2}, archivePrefix = {arXiv},
  year = 2020
)
@article{Devlin2019BERT-dup, title = {A different key}}
@article{devlin2019bert, title = {The same key again}}
"""


def test_bibtex_reads_macros_concatenation_and_values_as_written():
    bib = read_bibtex(BIB, "refs.bib")
    assert [entry.key for entry in bib.entries] == ["devlin2019bert", "mueller2020", "Devlin2019BERT-dup"]
    devlin = bib.entries[0]
    assert devlin.entry_type == "inproceedings" and devlin.line == 7 and devlin.source == "refs.bib"
    assert [name for name, _ in devlin.fields] == ["author", "title", "booktitle", "year", "month", "pages", "doi"]
    assert devlin.get("booktitle") == "Proceedings of the Annual Meeting of the {ACL}, Volume 1"
    assert devlin.get("YEAR") == "2019" and devlin.get("month") == "June"
    assert devlin.get("title").startswith("{BERT}: Pre-training")  # TeX kept as the source wrote it
    assert bib.macros == {"acl": "Proceedings of the Annual Meeting of the {ACL}", "year2019": "2019"}
    assert bib.entries[1].get("author").startswith(r"M{\"u}ller, Hans")


def test_bibtex_malformed_entry_is_reported_and_reading_goes_on():
    bib = read_bibtex(BIB, "refs.bib")
    assert "mueller2020" in [entry.key for entry in bib.entries]  # the entry after the broken one
    assert bib.problems[0].startswith("refs.bib:17: malformed @article entry 'broken': expected ',' or '}'")
    # a key repeated (BibTeX compares keys without case) is reported and the first entry kept
    assert bib.problems[1].startswith("refs.bib:29: duplicate key 'devlin2019bert' (first at line 7)")
    assert bib.entry("devlin2019bert").get("title").startswith("{BERT}")


def test_bibtex_reports_unclosed_braces_and_undefined_macros_without_stopping():
    text = "@article{a, title = {Open\n\n@article{b, journal = nomacro, title = {Fine}}\n"
    bib = read_bibtex(text, "x.bib")
    assert [entry.key for entry in bib.entries] == ["b"]
    assert bib.entries[0].get("journal") == ""
    assert any(problem.startswith("x.bib:1: malformed @article entry 'a': a brace opened") for problem in bib.problems)
    assert "x.bib:3: undefined macro 'nomacro' (read as empty, as BibTeX does)" in bib.problems


@pytest.mark.parametrize(("tex", "text"), [
    (r"\"{o} {\"o} \'e \`a \^o \~n \c{c} \v{s} \u{a} \H{o} \k{a} \={a} \.{z} \r{a} \'{\i}",
     "ö ö é à ô ñ ç š ă ő ą ā ż å í"),
    (r"{\ss} {\o} {\O} {\aa} {\AA} {\ae} {\l} {\L} {\i}", "ß ø Ø å Å æ ł Ł ı"),
    (r"Sm\o rgrav and G{\"o}del", "Smørgrav and Gödel"),
    (r"\& \% \_ \$ \#", "& % _ $ #"),
    (r"1--2 and A---B, J.~Smith", "1–2 and A—B, J. Smith"),
    (r"{BERT} and \emph{x}, \textit{y}, \textbf{z}", "BERT and x, y, z"),
    (r"$O(n^2)$ time, $\alpha$-sparse", "O(n^2) time, α-sparse"),
    (r"\url{https://example.org/a_b~c%20d}", "https://example.org/a_b~c%20d"),
])
def test_tex_to_text(tex, text):
    assert tex_to_text(tex) == text


@pytest.mark.parametrize(("written", "given", "family", "suffix"), [
    ("Jacob Devlin", "Jacob", "Devlin", ""),
    ("Devlin, Jacob", "Jacob", "Devlin", ""),
    ("{van der Berg}, Jan", "Jan", "van der Berg", ""),
    ("Ludwig van Beethoven", "Ludwig", "van Beethoven", ""),
    ("de la Cruz, Jr, José", "José", "de la Cruz", "Jr"),
    ("{Google Research}", "", "Google Research", ""),
    (r"{\'E}mile Zola", "Émile", "Zola", ""),
])
def test_bibtex_names(written, given, family, suffix):
    name = parse_name(written)
    assert (name.given, name.family, name.suffix) == (given, family, suffix)


def test_bibtex_entry_as_parsed_entry():
    bib = read_bibtex(BIB, "refs.bib")
    devlin = to_parsed_entry(bib.entries[0], 1)
    assert devlin.status == PARSED and devlin.reason is None and devlin.label == "devlin2019bert"
    assert devlin.authors == ("Jacob Devlin", "Ming-Wei Chang", "Jan van der Berg", "Kristina Toutanova")
    assert devlin.surnames == ("Devlin", "Chang", "van der Berg", "Toutanova")
    assert devlin.title == "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding"
    assert (devlin.year, devlin.year_suffix) == (2019, None)
    assert devlin.venue == "Proceedings of the Annual Meeting of the ACL, Volume 1"
    assert devlin.doi == "10.18653/v1/n19-1423"
    assert set(devlin.field_sources.values()) == {"bibtex"}
    assert devlin.raw_text == ("Jacob Devlin, Ming-Wei Chang, Jan van der Berg, and Kristina Toutanova. 2019. BERT: "
                               "Pre-training of Deep Bidirectional Transformers for Language Understanding. "
                               "Proceedings of the Annual Meeting of the ACL, Volume 1.")
    mueller = to_parsed_entry(bib.entries[1], 2)
    assert mueller.surnames == ("Müller", "van Beethoven", "de la Cruz")  # "others" is no author
    assert mueller.title == "Schöne Äpfel: naïve sets & 5% of α-mixing — revisited"
    assert mueller.arxiv_id == "2203.00130" and mueller.status == PARSED


def test_bibtex_partial_and_identifiers_from_links():
    entries = read_bibtex(r"""
@misc{web, title = {A Page}, url = {https://arxiv.org/abs/1706.03762v5}}
@article{bydoi, author = {A. Author}, year = {2017}, doi = {10.48550/arXiv.1810.04805}, journal = {arXiv}}
@misc{bare, note = {nothing usable}}
""").entries
    web, by_doi, bare = (to_parsed_entry(entry, index) for index, entry in enumerate(entries, start=1))
    assert web.status == PARTIAL and web.reason == "no authors or year found"
    assert web.arxiv_id == "1706.03762" and web.url == "https://arxiv.org/abs/1706.03762v5"
    assert by_doi.status == PARTIAL and by_doi.reason == "no title found" and by_doi.arxiv_id == "1810.04805"
    assert bare.status == UNPARSED and "bare" in bare.reason


# --- BibTeX writing and correcting ----------------------------------------------------------------------------------


def test_bibtex_write_round_trip_keeps_tex_as_written():
    bib = read_bibtex(BIB, "refs.bib")
    written = write_bibtex(bib.entries)
    assert r"title = {Sch{\"o}ne {\"A}pfel: \emph{na{\"\i}ve} sets \& 5\% of $\alpha$-mixing --- revisited}," in written
    again = read_bibtex(written, "written.bib")
    assert again.problems == ()
    assert again.entries == bib.entries
    assert write_bibtex(again.entries) == written


def test_corrected_entry_lists_its_changes():
    entry = read_bibtex(BIB).entries[0]
    corrected, changes = corrected_entry(entry, {"Year": "2019", "title": "BERT & Friends", "note": "Oral"})
    assert changes == [
        "title: '{BERT}: Pre-training of Deep Bidirectional Transformers for {L}anguage Understanding' -> "
        "'BERT \\& Friends'",
        "note: added 'Oral'",
    ]  # an unchanged year is no change; "&" is escaped for LaTeX
    assert corrected.get("title") == r"BERT \& Friends" and corrected.get("note") == "Oral"
    assert entry.get("title").startswith("{BERT}")  # the original is left as it was
    assert read_bibtex(write_bibtex([corrected])).entries == (corrected,)
    with pytest.raises(ValueError, match="devlin2019bert.*unbalanced"):
        corrected_entry(entry, {"title": "{Unclosed"})


def test_written_entries_compare_without_their_place():
    entry = BibtexEntry("article", "k", (("title", "T"),), line=3, source="a.bib")
    assert entry == BibtexEntry("article", "k", (("title", "T"),))


# --- LaTeX projects -------------------------------------------------------------------------------------------------

MAIN = r"""\documentclass{article}
\usepackage{natbib}
\begin{document}
\section{Introduction}\label{sec:intro}
Transformers~\citep{devlin2019bert} changed the field. % a comment \cite{commented}
A cost of 50\% is typical \citep[see][p.~4]{smith2020, lee2021}.
% a comment line does not end the paragraph
\input{sections/related}

\begin{figure}[t]
\includegraphics{plot.pdf}
\caption{Results as in \cite{figurekey}.}
\end{figure}
\begin{equation}
x = \cite{equationkey}
\end{equation}
\begin{verbatim}
\cite{verbatimkey}
\end{verbatim}
\subsection{Details}
\citet{lee2021} show it for $k$ items in $O(n \log n)$ time.\cite{smith2020} Later work agrees.
\bibliographystyle{plainnat}
\bibliography{refs}
\end{document}
"""
RELATED = r"""Related work\footnote{See \citeauthor{smith2020}.} is covered in Section~\ref{sec:intro}.
\input{sections/missing}
\input sections/loop
"""
LOOP = r"""A loop \input{sections/related}"""
REFS = r"""@inproceedings{devlin2019bert, author = {Jacob Devlin}, title = {{BERT}}, year = 2019}
@article{smith2020, author = {Smith, Ann}, title = {Costs}, year = 2020}
@article{lee2021, author = {Lee, Bo}, title = {Items}, year = 2021}
@article{uncited, author = {Doe, Jo}, title = {Not cited}, year = 2018}
@article{bad title = {x}}
"""


def project(**extra: str) -> dict[str, str]:
    return {"paper/main.tex": MAIN, "paper/sections/related.tex": RELATED, "paper/sections/loop.tex": LOOP,
            "paper/refs.bib": REFS, "paper/macros.sty": r"\newcommand{\x}{x}", **extra}


def test_latex_main_file_inputs_and_problems():
    source = read_latex_source(project())
    assert source.main_file == "paper/main.tex"
    assert source.tex_files == ("paper/main.tex", "paper/sections/related.tex", "paper/sections/loop.tex")
    problems = "\n".join(source.problems)
    assert ("paper/sections/related.tex:2: \\input{sections/missing}: no such file in the source; read as empty"
            in source.problems)
    assert ("paper/sections/loop.tex:1: \\input{sections/related} reads paper/sections/related.tex again (cycle "
            "paper/main.tex -> paper/sections/related.tex -> paper/sections/loop.tex -> paper/sections/related.tex)"
            in problems)
    assert "paper/refs.bib:5: malformed @article entry 'bad'" in problems
    # cited keys absent from the bibliography, at the line citing them (the verbatim one is no citation)
    assert "paper/main.tex:12: \\cite: the key 'figurekey' is in no bibliography" in source.problems
    assert "paper/main.tex:15: \\cite: the key 'equationkey' is in no bibliography" in source.problems
    assert "verbatimkey" not in problems and "commented" not in problems


def test_latex_main_file_is_the_one_no_other_inputs():
    standalone = "\\documentclass{article}\n\\begin{document}\nA part.\n\\end{document}\n"
    main = "\\documentclass{article}\n\\begin{document}\n\\subfile{part}\nMain text.\n\\end{document}\n"
    source = read_latex_source({"a_part.tex": standalone.replace("part.", "standalone part."), "part.tex": standalone,
                                "z_main.tex": main})
    assert source.main_file == "a_part.tex"  # two files no other inputs: the first by name, reported
    assert source.problems[0] == "a_part.tex: taken as the main file; also possible: z_main.tex"
    source = read_latex_source({"part.tex": standalone, "z_main.tex": main})
    assert source.main_file == "z_main.tex" and not source.problems
    assert [paragraph.text for paragraph in source.paragraphs] == ["A part. Main text."]  # the subfile's body only


def test_latex_without_a_main_file_raises_naming_the_files():
    with pytest.raises(LatexSourceError, match=r"none of the \.tex files \(intro\.tex\)"):
        read_latex_source({"intro.tex": "\\section{Intro} text", "refs.bib": ""})
    with pytest.raises(LatexSourceError, match=r"no \.tex file in the source \(it holds: refs\.bib\)"):
        read_latex_source({"refs.bib": ""})


def test_latex_prose_paragraphs_and_markers():
    source = read_latex_source(project())
    texts = [paragraph.text for paragraph in source.paragraphs]
    assert texts == [
        "Introduction",
        "Transformers [@devlin2019bert] changed the field. A cost of 50% is typical [@smith2020; @lee2021]. "
        "Related work is covered in Section #. A loop",
        "See [@smith2020].",
        "Details",
        f"[@lee2021] show it for k items in {MATH_PLACEHOLDER} time. [@smith2020] Later work agrees.",
    ]
    headings = [paragraph.text for paragraph in source.paragraphs if paragraph.heading]
    assert headings == ["Introduction", "Details"]
    assert [paragraph.section for paragraph in source.paragraphs] == ["Introduction"] * 3 + ["Details"] * 2
    first = source.paragraphs[1]
    assert [(first.text[marker.start:marker.end], marker.keys, marker.command) for marker in first.markers] == [
        ("[@devlin2019bert]", ("devlin2019bert",), "citep"),
        ("[@smith2020; @lee2021]", ("smith2020", "lee2021"), "citep"),
    ]
    # every citation command of the body, captions and equations included, with where it is
    assert [(citation.file, citation.line, citation.keys) for citation in source.citations] == [
        ("paper/main.tex", 5, ("devlin2019bert",)), ("paper/main.tex", 6, ("smith2020", "lee2021")),
        ("paper/sections/related.tex", 1, ("smith2020",)), ("paper/main.tex", 12, ("figurekey",)),
        ("paper/main.tex", 15, ("equationkey",)), ("paper/main.tex", 21, ("lee2021",)),
        ("paper/main.tex", 21, ("smith2020",)),
    ]


def test_latex_citances_carry_their_keys():
    source = read_latex_source(project())
    found = [(citance.text, citance.keys, citance.section, citance.paragraph) for citance in citances(source)]
    assert found == [
        ("Transformers [@devlin2019bert] changed the field.", ("devlin2019bert",), "Introduction", 1),
        ("A cost of 50% is typical [@smith2020; @lee2021].", ("smith2020", "lee2021"), "Introduction", 1),
        ("See [@smith2020].", ("smith2020",), "Introduction", 2),
        # a narrative \citet opens its sentence; a \cite after the full stop belongs to the sentence before
        (f"[@lee2021] show it for k items in {MATH_PLACEHOLDER} time. [@smith2020]", ("lee2021", "smith2020"),
         "Details", 4),
    ]
    last = citances(source)[-1]
    paragraph = source.paragraphs[last.paragraph]
    assert paragraph.text[last.start:last.end] == last.text
    assert [paragraph.text[marker.start:marker.end] for marker in last.markers] == ["[@lee2021]", "[@smith2020]"]


@pytest.mark.parametrize("command", [
    r"\cite{k1,k2}", r"\citep{k1, k2}", r"\citet{ k1 ,k2 }", r"\citealp{k1,k2}", r"\citealt{k1,k2}",
    r"\citeauthor{k1,k2}", r"\citeyear{k1,k2}", r"\citenum{k1,k2}", r"\parencite{k1,k2}", r"\textcite{k1,k2}",
    r"\autocite{k1,k2}", r"\footcite{k1,k2}", r"\smartcite{k1,k2}", r"\supercite{k1,k2}", r"\Cite{k1,k2}",
    r"\Citep{k1,k2}", r"\Textcite{k1,k2}", r"\Parencite{k1,k2}", r"\Autocite{k1,k2}", r"\citep*{k1,k2}",
    r"\citet*{k1,k2}", r"\citep[p.~5]{k1,k2}", r"\citep[see][]{k1,k2}", r"\citep[see][ch.~2]{k1,k2}",
    r"\parencite*[e.g.][p.~1]{k1,k2}", r"\cite [p.~5] {k1,k2}",
])
def test_every_citation_command_form(command):
    document = f"\\documentclass{{article}}\n\\begin{{document}}\nAs shown {command} here.\n\\end{{document}}\n"
    source = read_latex_source({"main.tex": document})
    (paragraph,) = source.paragraphs
    assert paragraph.text == "As shown [@k1; @k2] here."
    (marker,) = paragraph.markers
    assert marker.keys == ("k1", "k2") and marker.command == re.match(r"\\([A-Za-z]+\*?)", command).group(1)
    assert (marker.start, marker.end) == (9, 19)


def test_nocite_keys_are_recorded_without_a_marker():
    document = ("\\documentclass{article}\n\\nocite{pre}\n\\begin{document}\nText\\nocite{a, b} here.\n"
                "\\nocite{*}\n\\end{document}\n")
    source = read_latex_source({"main.tex": document})
    assert source.nocite_keys == ("pre", "a", "b", "*")
    assert [paragraph.text for paragraph in source.paragraphs] == ["Text here."]
    assert source.citations == () and citances(source) == []


def test_comments_and_escaped_percent():
    document = ("\\documentclass{article}\n\\begin{document}\n"
                "We gain 5\\% % and this is a comment \\cite{hidden}\n"
                "% a whole comment line\n"
                "more, and 100\\\\% a comment after a line break\n"
                "joined%\n"
                "   word.\n"
                "\n"
                "Second paragraph.\n\\end{document}\n")
    source = read_latex_source({"main.tex": document})
    assert [paragraph.text for paragraph in source.paragraphs] == [
        "We gain 5% more, and 100 joinedword.", "Second paragraph."]
    assert source.citations == ()


def test_dropped_environments_and_math():
    document = r"""\documentclass{article}
\begin{document}
\title{A Title}\author{Some Author}
\maketitle
Before the float.
\begin{table*}
\begin{tabular}{lr} a & \cite{t} \\ \end{tabular}
\caption{A caption.}
\end{table*}
\begin{align}
a &= b \\ c &= d
\end{align}
\begin{lstlisting}
print("\cite{code}")
\end{lstlisting}
\begin{tikzpicture}\draw (0,0) -- (1,1);\end{tikzpicture}
We have \[ x^2 \] and $$y$$ and \(\beta\) and $x_i$ and $\sum_{i=1}^{n} x_i^2$.
\end{document}
"""
    source = read_latex_source({"main.tex": document})
    assert [paragraph.text for paragraph in source.paragraphs] == [
        f"Before the float. We have and and β and x_i and {MATH_PLACEHOLDER}."]
    assert [citation.keys for citation in source.citations] == [("t",)]  # the listing's \cite is code


def test_latex_body_without_end_document_stops_after_the_bibliography():
    document = ("\\documentclass{article}\n\\begin{document}\nText \\cite{a}.\n\\begin{thebibliography}{1}\n"
                "\\bibitem{a} A. Author. 2020. A title. Venue.\n\\end{thebibliography}\nTrailing junk \\cite{junk}.\n")
    source = read_latex_source({"main.tex": document})
    assert [paragraph.text for paragraph in source.paragraphs] == ["Text [@a]."]
    assert "main.tex: no \\end{document}; the body is read to the end of the bibliography" in source.problems
    assert [item.key for item in source.bbl_items] == ["a"] and source.bbl_source == "main.tex"
    assert not any("junk" in problem for problem in source.problems)


# --- Compiled bibliographies ----------------------------------------------------------------------------------------

NATBIB_BBL = r"""\begin{thebibliography}{2}
\providecommand{\natexlab}[1]{#1}
\providecommand{\url}[1]{\texttt{#1}}

\bibitem[{Devlin et~al.(2019)Devlin, Chang, Lee, and Toutanova}]{devlin2019bert}
Jacob Devlin, Ming-Wei Chang, Kenton Lee, and Kristina Toutanova. 2019.
\newblock \href {https://doi.org/10.18653/v1/N19-1423} {{BERT}: Pre-training of deep bidirectional
  transformers for language understanding}.
\newblock In \emph{Proceedings of NAACL}, pages 4171--4186.

\bibitem[M{\"u}ller and Smith(2020{\natexlab{a}})]{muller2020a}
Hans M{\"u}ller and John Smith. 2020{\natexlab{a}}.
\newblock \bibinfo{title}{Learning things}.
\newblock \emph{\bibinfo{journal}{Journal of Things}}, \bibinfo{volume}{5}:\bibinfo{pages}{1--10}.
\newblock \urlprefix\url{https://example.org/a_b}.

\end{thebibliography}
"""

BIBLATEX_BBL = r"""% $ biblatex auxiliary file $
% $ biblatex bbl format version 3.2 $
\begingroup
\makeatletter
\endgroup
\refsection{0}
  \datalist[entry]{nty/global//global/global}
    \entry{devlin2019bert}{inproceedings}{}{}
      \name{author}{2}{}{%
        {{un=0,uniquepart=base,hash=abc}{%
           family={Devlin},
           familyi={D\bibinitperiod},
           given={Jacob},
           giveni={J\bibinitperiod}}}%
        {{un=0,uniquepart=base,hash=def}{%
           family={Berg},
           familyi={B\bibinitperiod},
           given={Jan\bibnamedelima Willem},
           giveni={J\bibinitperiod\bibinitdelim W\bibinitperiod},
           prefix={van\bibnamedelimb der},
           prefixi={v\bibinitperiod\bibinitdelim d\bibinitperiod}}}%
      }
      \list{publisher}{1}{%
        {ACL}%
      }
      \field{labelalpha}{DB19}
      \field{booktitle}{Proceedings of {NAACL}}
      \field{title}{{BERT}: Pre-training of Deep Bidirectional Transformers}
      \field{year}{2019}
      \range{pages}{4171\bibrangedash 4186}
      \verb{doi}
      \verb 10.18653/v1/N19-1423
      \endverb
      \verb{url}
      \verb https://aclanthology.org/N19-1423%20x
      \endverb
    \endentry
    \entry{old}{article}{}
      \name{author}{1}{}{%
        {{hash=zz}{Smith}{S\bibinitperiod}{John}{J\bibinitperiod}{}{}{}{}}%
      }
      \field{journaltitle}{J. Old}
      \field{title}{Old style names}
      \field{year}{1999}
      \field{eprinttype}{arXiv}
      \verb{eprint}
      \verb hep-th/9901001
      \endverb
    \endentry
  \enddatalist
\endrefsection
"""


def test_natbib_bbl():
    items = read_bbl(NATBIB_BBL)
    assert [(item.key, item.label) for item in items] == [
        ("devlin2019bert", "Devlin et al.(2019)Devlin, Chang, Lee, and Toutanova"),
        ("muller2020a", "Müller and Smith(2020a)"),
    ]
    assert items[1].text == ("Hans Müller and John Smith. 2020a. Learning things. Journal of Things, 5:1–10. "
                             "https://example.org/a_b.")
    devlin, muller = bbl_entries(items)
    assert (devlin.index, devlin.label, devlin.status) == (1, "devlin2019bert", PARSED)
    assert devlin.title == "BERT: Pre-training of deep bidirectional transformers for language understanding"
    assert devlin.doi == "10.18653/v1/n19-1423" and devlin.surnames[0] == "Devlin"
    assert (muller.label, muller.year, muller.year_suffix, muller.title) == ("muller2020a", 2020, "a",
                                                                              "Learning things")
    assert muller.url == "https://example.org/a_b"


def test_biblatex_bbl():
    items = read_bbl(BIBLATEX_BBL)
    assert [(item.key, item.label) for item in items] == [("devlin2019bert", "DB19"), ("old", None)]
    devlin = items[0].entry
    assert devlin.entry_type == "inproceedings"
    assert devlin.get("author") == "{Devlin}, Jacob and van der {Berg}, Jan Willem"
    assert devlin.get("publisher") == "ACL" and devlin.get("pages") == "4171--4186"
    assert devlin.get("url") == "https://aclanthology.org/N19-1423%20x"  # a \verb value keeps its "%"
    assert items[0].text == ("Jacob Devlin and Jan Willem van der Berg. 2019. BERT: Pre-training of Deep "
                             "Bidirectional Transformers. Proceedings of NAACL.")
    first, old = bbl_entries(items)
    assert first.surnames == ("Devlin", "van der Berg") and first.doi == "10.18653/v1/n19-1423"
    assert first.label == "devlin2019bert" and first.status == PARSED
    assert old.surnames == ("Smith",) and old.arxiv_id == "hep-th/9901001" and old.venue == "J. Old"


def test_latex_source_reads_its_bbl_and_lists_its_references():
    document = ("\\documentclass{article}\n\\usepackage{biblatex}\n\\addbibresource{refs.bib}\n"
                "\\begin{document}\nSee \\textcite{old} and \\autocite{devlin2019bert,nowhere}.\n"
                "\\nocite{ghost}\n\\printbibliography\n\\end{document}\n")
    source = read_latex_source({"ms.tex": document, "ms.bbl": BIBLATEX_BBL})
    assert source.bbl_source == "ms.bbl" and [item.key for item in source.bbl_items] == ["devlin2019bert", "old"]
    # the .bib is missing but the .bbl stands for it: only the key in neither is a problem
    assert source.problems == ("ms.tex:5: \\autocite: the key 'nowhere' is in no bibliography",
                               "ms.tex:6: \\nocite: the key 'ghost' is in no bibliography")
    assert [(entry.index, entry.label) for entry in reference_entries(source)] == [(1, "devlin2019bert"),
                                                                                    (2, "old")]


def test_reference_entries_from_bib_in_citation_order():
    source = read_latex_source(project())
    entries = reference_entries(source)
    assert [(entry.index, entry.label) for entry in entries] == [(1, "devlin2019bert"), (2, "smith2020"),
                                                                 (3, "lee2021")]
    assert entries[1].surnames == ("Smith",) and entries[1].field_sources["title"] == "bibtex"


# --- arXiv source archives ------------------------------------------------------------------------------------------


def test_arxiv_tarball_keeps_text_files_and_skips_escaping_members(tmp_path):
    folder = tmp_path / "source"
    (folder / "sections").mkdir(parents=True)
    (folder / "main.tex").write_bytes(b"\\documentclass{article}\n\\begin{document}\nCaf\xe9 \\input{sections/a}"
                                      b"\n\\bibliography{refs}\n\\end{document}\n")  # latin-1
    (folder / "sections" / "a.tex").write_text("Naïve \\cite{k}.", encoding="utf-8")
    (folder / "refs.bib").write_text("@article{k, title={T}}", encoding="utf-8")
    (folder / "figure.png").write_bytes(b"\x89PNG\r\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=".")
        escaping = tarfile.TarInfo("../outside.tex")
        escaping.size = 1
        archive.addfile(escaping, io.BytesIO(b"x"))
        absolute = tarfile.TarInfo("/etc/evil.bib")
        absolute.size = 1
        archive.addfile(absolute, io.BytesIO(b"x"))
        link = tarfile.TarInfo("link.tex")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    files = arxiv_source_files(buffer.getvalue(), "2101.00001")
    assert sorted(files) == ["main.tex", "refs.bib", "sections/a.tex"]
    assert files["main.tex"].startswith("\\documentclass") and "Café" in files["main.tex"]
    assert files["sections/a.tex"] == "Naïve \\cite{k}."
    assert files.problems == [
        "2101.00001: ../outside.tex: the path leaves the archive's folder; skipped",
        "2101.00001: /etc/evil.bib: the path leaves the archive's folder; skipped",
        "2101.00001: link.tex: a link; skipped",
    ]
    source = read_latex_source(files)
    assert source.paragraphs[0].text == "Café Naïve [@k]." and source.problems == ()


def test_arxiv_gzipped_single_file_plain_tar_and_limits():
    document = "\\documentclass{article}\\begin{document}Only file.\\end{document}"
    single = arxiv_source_files(gzip.compress(document.encode()), "2203.00130")
    assert dict(single) == {"2203.00130.tex": document} and single.problems == []
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        member = tarfile.TarInfo("paper.tex")
        member.size = len(document)
        archive.addfile(member, io.BytesIO(document.encode()))
    assert dict(arxiv_source_files(buffer.getvalue(), "x.tar")) == {"paper.tex": document}
    with pytest.raises(LatexSourceError, match=r"x\.tar: more than .* MB of text files unpacked"):
        arxiv_source_files(buffer.getvalue(), "x.tar", max_bytes=10)
    with pytest.raises(LatexSourceError, match="2203.00130: more than"):
        arxiv_source_files(gzip.compress(document.encode()), "2203.00130", max_bytes=10)
    with pytest.raises(LatexSourceError, match="a PDF, not a LaTeX source"):
        arxiv_source_files(b"%PDF-1.7\n...", "paper.pdf")
    with pytest.raises(LatexSourceError, match="damaged"):
        arxiv_source_files(gzip.compress(buffer.getvalue())[:60], "cut.tar.gz")
