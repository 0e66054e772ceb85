"""`peerify refs check` end to end (issue 35): a .bib, a .bbl, a LaTeX folder, a source archive and an arXiv id's
local archive read exactly; each entry checked against the offline metadata index (built by `peerify refs index`
from a dump the test writes) and the loopback stand-in of Crossref, OpenAlex and Semantic Scholar; a fabricated
reference told apart (not_found) from an unreachable source (unvalidatable); corrected BibTeX with each change
listed; JSON, CSV and HTML; the exit code `--fail-on` gives."""

from __future__ import annotations

import csv
import io
import json
import tarfile

import pytest

from peerify_dagster.cli import main
from peerify_dagster.domain.citations.bibtex import read_bibtex
from tests.fakes.scholarly_server import CorpusWork, FakeScholarlyServer, FaultRule

GRAPH = CorpusWork("Construction of the Literature Graph in Semantic Scholar",
                   (("Waleed", "Ammar"), ("Dirk", "Groeneveld")), 2018, doi="10.18653/v1/n18-3011",
                   venue="Proceedings of NAACL")
BIB = r"""
@inproceedings{ammar2018,
  author = {Ammar, Waleed and Groeneveld, Dirk},
  title = {Construction of the literature graph in {S}emantic {S}cholar},
  booktitle = {Proceedings of NAACL},
  year = 2018
}
@article{made_up,
  author = {Nobody, Anne},
  title = {A thorough study of things that were never written down anywhere},
  journal = {Journal of Nothing},
  year = {2021}
}
@misc{lo2020,
  author = {Lo, Kyle and Wang, Lucy Lu},
  title = {S2ORC: The Semantic Scholar Open Research Corpus},
  year = {2020}
}
"""
# A Crossref work record per line, as `peerify refs index --jsonl` imports them.
DUMP = [{"DOI": "10.18653/v1/2020.acl-main.447", "title": ["S2ORC: The Semantic Scholar Open Research Corpus"],
         "author": [{"given": "Kyle", "family": "Lo"}, {"given": "Lucy Lu", "family": "Wang"}],
         "issued": {"date-parts": [[2020]]}, "container-title": ["Proceedings of ACL"], "type": "proceedings-article"}]


@pytest.fixture
def lake(tmp_path, monkeypatch):
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    return tmp_path / "lake"


@pytest.fixture
def server():
    with FakeScholarlyServer((GRAPH,)) as running:
        yield running


@pytest.fixture
def index(tmp_path, lake):
    dump = tmp_path / "works.jsonl"
    dump.write_text("".join(json.dumps(work) + "\n" for work in DUMP))
    path = tmp_path / "index.duckdb"
    assert main(["refs", "index", "--index", str(path), "--jsonl", str(dump)]) == 0
    return path


def network(server: FakeScholarlyServer) -> list[str]:
    arguments = ["--requests-per-second", "50"]
    for service, url in server.base_urls.items():
        arguments += ["--source", service, "--base-url", f"{service}={url}"]
    return arguments


def run_check(capsys, *arguments: str) -> tuple[int, str, str]:
    code = main(["refs", "check", *arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_bib_file_against_the_index_and_the_services(tmp_path, lake, server, index, capsys):
    bib = tmp_path / "paper.bib"
    bib.write_text(BIB)
    code, out, err = run_check(capsys, str(bib), "--index", str(index), *network(server), "--format", "json")
    rows = {row["key"]: row for row in json.loads(out)["references"]}
    assert code == 1  # made_up is not_found, the default --fail-on
    assert rows["lo2020"]["status"] == "validated" and rows["lo2020"]["sources"] == ["index"]  # no network asked
    assert rows["ammar2018"]["status"] == "validated" and rows["ammar2018"]["matched_source"] != "index"
    made_up = rows["made_up"]
    assert made_up["status"] == "not_found" and made_up["sources"] == ["index", *server.base_urls]
    assert made_up["reasons"][0] == "no record of its title in any source asked"
    assert "made_up: not_found" in err
    assert main(["refs", "check", str(bib), "--index", str(index), *network(server), "--fail-on", ""]) == 0


def test_an_unreachable_service_is_never_read_as_a_fabricated_reference(tmp_path, lake, server, capsys):
    bib = tmp_path / "paper.bib"
    bib.write_text(BIB)
    server.add_fault(FaultRule("/openalex/works", "status", status=503, times=None))
    code, out, _ = run_check(capsys, str(bib), "--no-index", *network(server), "--fail-on", "not_found")
    rows = {row["key"]: row for row in json.loads(out)["references"]}
    assert code == 0
    assert rows["made_up"]["status"] == "unvalidatable"
    assert any("openalex" in error for error in rows["made_up"]["errors"])


def test_corrected_bibtex_lists_each_change_and_leaves_the_unknown_alone(tmp_path, lake, server, index, capsys):
    bib = tmp_path / "paper.bib"
    bib.write_text(BIB)
    _, out, _ = run_check(capsys, str(bib), "--index", str(index), *network(server), "--format", "bibtex")
    corrected = read_bibtex(out)
    assert corrected.problems == ()
    by_key = {entry.key: entry for entry in corrected.entries}
    assert by_key["lo2020"].get("doi") == "10.18653/v1/2020.acl-main.447"
    assert by_key["ammar2018"].get("doi") == "10.18653/v1/n18-3011"
    assert by_key["made_up"] == read_bibtex(BIB).entry("made_up")  # never corrected
    assert "doi: added '10.18653/v1/2020.acl-main.447'" in out
    assert "% not_found:" in out


def test_csv_and_html_reports(tmp_path, lake, index, capsys):
    bib = tmp_path / "paper.bib"
    bib.write_text(BIB.replace("A thorough study", "=HYPERLINK(1) A thorough study"))
    out_csv = tmp_path / "report.csv"
    assert main(["refs", "check", str(bib), "--index", str(index), "--format", "csv", "--output", str(out_csv),
                 "--fail-on", ""]) == 0
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert [row["key"] for row in rows] == ["ammar2018", "made_up", "lo2020"]
    assert rows[1]["title"].startswith("'=HYPERLINK")  # no formula runs when the sheet is opened
    assert rows[1]["status"] == "not_found"  # the index alone answered, and knows no such work
    code, page, _ = run_check(capsys, str(bib), "--index", str(index), "--format", "html", "--fail-on", "")
    assert code == 0 and page.startswith("<!doctype html>") and "not_found" in page and "<script" not in page


def test_latex_sources_a_bbl_an_archive_and_an_arxiv_id(tmp_path, lake, index, capsys):
    folder = tmp_path / "paper"
    folder.mkdir()
    (folder / "main.tex").write_text("\\documentclass{article}\\begin{document}\nGraphs help \\citep{lo2020}.\n"
                                     "\\bibliography{refs}\n\\end{document}\n")
    (folder / "refs.bib").write_text(BIB)
    code, out, _ = run_check(capsys, str(folder), "--index", str(index), "--fail-on", "")
    assert code == 0 and [row["key"] for row in json.loads(out)["references"]] == ["lo2020"]  # only what is cited

    bbl = tmp_path / "main.bbl"
    bbl.write_text("\\begin{thebibliography}{1}\n\\bibitem[Lo et~al.(2020)]{lo2020}\nKyle Lo and Lucy~Lu Wang.\n"
                   "\\newblock 2020.\n\\newblock S2ORC: The Semantic Scholar Open Research Corpus.\n"
                   "\\end{thebibliography}\n")
    code, out, _ = run_check(capsys, str(bbl), "--index", str(index))
    assert code == 0 and json.loads(out)["references"][0]["status"] == "validated"

    sources = tmp_path / "arxiv"
    sources.mkdir()
    with tarfile.open(sources / "2004.10706.tar.gz", "w:gz") as archive:
        archive.add(folder / "main.tex", arcname="main.tex")
        archive.add(folder / "refs.bib", arcname="refs.bib")
    code, out, _ = run_check(capsys, "arXiv:2004.10706", "--arxiv-sources", str(sources), "--index", str(index))
    assert code == 0 and json.loads(out)["references"][0]["key"] == "lo2020"
    code, _, err = run_check(capsys, "2004.99999", "--arxiv-sources", str(sources))
    assert code == 2 and "no source archive" in err


def test_inputs_that_cannot_be_read_are_named(tmp_path, lake, capsys):
    code, _, err = run_check(capsys, str(tmp_path / "missing.bib"))
    assert code == 2 and "missing.bib: no such file" in err
    odd = tmp_path / "notes.txt"
    odd.write_text("x")
    code, _, err = run_check(capsys, str(odd))
    assert code == 2 and "not a .bib" in err
    code, _, err = run_check(capsys, str(odd), "--fail-on", "fabricated")
    assert code == 2 and "--fail-on names ['fabricated']" in err
    broken = tmp_path / "broken.bib"
    broken.write_text("@article{ok, title={Fine}, year={2020}}\n@article{bad, title={Unclosed\n")
    code, out, err = run_check(capsys, str(broken), "--fail-on", "")
    assert code == 0 and "broken.bib:2:" in err  # the rest of the file is still checked
    assert [row["key"] for row in json.loads(out)["references"]] == ["ok"]
    assert "every entry is unvalidatable" in err
