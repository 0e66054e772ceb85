"""benchmarks/eval_citation_pipeline.py on the smallest real pair of the shared PDFs (skipped when ../shared is absent):
the S2ORC paper (`2020.acl-main.447.pdf`) verified through the real `verify_citations` job with a library holding only
the literature-graph paper it cites (`N18-3011.pdf`). That entry, and no other, must resolve to the file, and the same
file named by another entry's arXiv id must be refused as the wrong paper. Without verdicts: no model is loaded."""

from __future__ import annotations

import re
import shutil

from tests.benchmark_scripts import load_benchmark
from tests.real_data import REAL_DATA, needs

PDFS = REAL_DATA / "pdfs"


@needs(PDFS)
def test_the_s2orc_paper_resolves_its_cited_file_and_refuses_a_misnamed_one(tmp_path, capsys):
    library = tmp_path / "library"
    library.mkdir()
    shutil.copyfile(PDFS / "N18-3011.pdf", library / "N18-3011.pdf")

    code = load_benchmark("eval_citation_pipeline").main([
        "--pdfs", str(PDFS), "--manuscripts", "2020.acl-main.447.pdf", "--library", str(library), "--no-verdicts",
        "--work", str(tmp_path / "work")])

    out = capsys.readouterr().out
    assert code == 0
    # The README's pair: the literature-graph entry resolved to its file, by its title on the first page.
    assert re.search(r"^\| N18-3011\.pdf \| \S+:r\d+ \| yes \|", out, re.M), out
    assert "via: library (title_on_first_page) 1" in out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("summary: manuscripts=1 expected_pairs_resolved=1/1 "), summary
    # Only that entry: the library holds one paper, so exactly one of the bibliography's entries resolves.
    assert re.search(r" resolved=1/\d+ ", summary), summary
    assert " other_resolved=0 self_resolved=0 " in summary, summary
    # The same PDF named by the GNMT entry's arXiv id is found by that name and refused by the right-paper check.
    assert " wrong_paper_rejected=1/1 " in summary, summary
    assert "| 1609.08144.pdf | rejected |" in out
    assert " verdict_calls=0 " in summary and "Verdicts: not run (--no-verdicts)" in out
    # The run's tables were written to the work folder's own lake, not the project's.
    assert list((tmp_path / "work" / "2020.acl-main.447" / "lake" / "cited_papers").glob("*.parquet"))
