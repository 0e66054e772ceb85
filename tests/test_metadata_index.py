"""The offline metadata index: dumps written here in each format (DBLP XML, JSON lines of Crossref and OpenAlex
works, a BibTeX collection) read by metadata_dumps.py, imported into a real DuckDB file and looked up as the
reference check looks a service up; and `peerify refs index` end to end."""

from __future__ import annotations

import gzip
import io
import json
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from peerify_dagster.cli import main
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.metadata import BY_ARXIV_ID, BY_DOI, BY_TITLE
from peerify_dagster.domain.citations.metadata_dumps import (
    BIBTEX,
    DBLP,
    JSONL,
    DumpFormatError,
    DumpProblem,
    DumpRecord,
    NumericEntities,
    read_bibtex_collection,
    read_dblp,
    read_work_lines,
)
from peerify_dagster.domain.citations.options import METADATA_INDEX
from peerify_dagster.resources.metadata_index import MetadataIndex, MetadataIndexError, default_index_path

DBLP_XML = """<?xml version="1.0" encoding="ISO-8859-1"?>
<!DOCTYPE dblp SYSTEM "dblp.dtd">
<dblp>
<article key="journals/jmlr/Muller01" mdate="2020-01-01">
<author>J&uuml;rgen M&uuml;ller 0001</author>
<author>Wei Wang 0042</author>
<title>Stra&szlig;en and <i>Caf&eacute;s</i> of H<sub>2</sub>O Networks.</title>
<year>2001</year>
<journal>J. Mach. Learn. Res.</journal>
<ee>https://doi.org/10.5555/JMLR.2001.7</ee>
</article>
<www key="homepages/m/JurgenMuller"><author>J&uuml;rgen M&uuml;ller 0001</author><title>Home Page</title></www>
<article key="journals/corr/abs-1810-04805" publtype="informal">
<author>Jacob Devlin</author><author>Ming-Wei Chang</author>
<title>BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding.</title><year>2018</year>
<journal>CoRR</journal><volume>abs/1810.04805</volume><ee type="oa">http://arxiv.org/abs/1810.04805</ee></article>
<inproceedings key="conf/nips/VaswaniSPUJGKP17"><author>Ashish Vaswani</author><author>Noam Shazeer</author>
<title>Attention is All you Need.</title><booktitle>NIPS</booktitle><year>2017</year>
<ee>https://proceedings.neurips.cc/paper/2017/hash/3f5ee243547dee91fbd053c1c4a845aa-Abstract.html</ee></inproceedings>
<proceedings key="conf/tiny/2019"><editor>Anna Smith</editor><title>Proceedings of the Workshop on Tiny Things</title>
<year>2019</year></proceedings>
<article key="journals/x/NoTitle"><author>Nobody</author><year>2000</year></article>
</dblp>
""".encode("latin-1")

CROSSREF_WORK = {"DOI": "10.1145/3292500.3330701", "type": "proceedings-article",
                 "title": ["Optuna: A Next-generation Hyperparameter Optimization Framework"],
                 "author": [{"given": "Takuya", "family": "Akiba"}, {"given": "Shotaro", "family": "Sano"}],
                 "issued": {"date-parts": [[2019, 7, 25]]}, "container-title": ["Proceedings of KDD"]}
OPENALEX_WORK = {"id": "https://openalex.org/W2194775991", "title": "Deep Residual Learning for Image Recognition",
                 "publication_year": 2016, "doi": "https://doi.org/10.1109/cvpr.2016.90",
                 "authorships": [{"author": {"display_name": "Kaiming He"}},
                                 {"author": {"display_name": "Xiangyu Zhang"}}],
                 "ids": {"openalex": "https://openalex.org/W2194775991", "doi": "https://doi.org/10.1109/cvpr.2016.90"},
                 "primary_location": {"source": {"display_name": "CVPR"}}}
WORK_LINES = "\n".join([
    json.dumps(CROSSREF_WORK),
    "",
    '{"DOI": "10.1000/broken", ',
    json.dumps(OPENALEX_WORK),
    "[1, 2]",
    json.dumps({"name": "not a work"}),
]) + "\n"

BIBTEX_COLLECTION = r"""@string{naacl = "Proceedings of NAACL-HLT"}
@inproceedings{devlin-etal-2019-bert,
    title = "{BERT}: Pre-training of Deep Bidirectional Transformers for Language Understanding",
    author = "Devlin, Jacob  and Chang, Ming-Wei and M{\"u}ller, J{\"o}rg",
    booktitle = naacl,
    year = "2019",
    doi = "10.18653/v1/N19-1423",
}
@misc{just-a-note, note = {nothing to look up}}
"""


def crossref_line(doi: str, title: str) -> str:
    return json.dumps({"DOI": doi, "title": [title], "author": [{"given": "Ada", "family": "Lovelace"}],
                       "issued": {"date-parts": [[2020]]}}) + "\n"


@pytest.fixture
def dumps(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "dumps"
    folder.mkdir()
    dblp = folder / "dblp.xml.gz"
    dblp.write_bytes(gzip.compress(DBLP_XML))
    works = folder / "works.jsonl"
    works.write_text(WORK_LINES, encoding="utf-8")
    bib = folder / "anthology.bib"
    bib.write_text(BIBTEX_COLLECTION, encoding="utf-8")
    return {DBLP: dblp, JSONL: works, BIBTEX: bib}


@pytest.fixture
def index(tmp_path: Path, dumps: dict[str, Path]) -> MetadataIndex:
    built = MetadataIndex(tmp_path / "index" / "index.duckdb", batch_records=2)
    for format, path in dumps.items():
        built.import_dump(path, format)
    yield built
    built.close()


def records_of(items: list) -> list[DumpRecord]:
    return [item for item in items if isinstance(item, DumpRecord)]


def problems_of(items: list) -> list[str]:
    return [str(item) for item in items if isinstance(item, DumpProblem)]


# -- reading the dumps -------------------------------------------------------------------------------------------------

def test_named_entities_become_numeric_references_even_when_a_read_cuts_one():
    stream = io.BytesIO(b"a &amp; &lt;&eacute; &nosuch; &#228; b")
    translated = NumericEntities(stream, chunk_size=4)  # "a &a", "mp; ", "&lt;", "&eac", ...: entities cut in two
    data = b"".join(iter(lambda: translated.read(16), b""))
    assert data == b"a &amp; &lt;&#233; &amp;nosuch; &#228; b"
    assert translated.unknown == {"nosuch": 1}


def test_dblp_records_whatever_the_read_size():
    cut = DBLP_XML.index(b"&uuml;") + 3
    assert DBLP_XML[:cut].endswith(b"&uu")  # the first read ends inside the entity
    read = [list(read_dblp(io.BytesIO(DBLP_XML), "dblp.xml", chunk_size=size)) for size in (cut, 1, 1 << 16)]
    assert read[0] == read[1] == read[2]
    records = {item.key: item.record for item in records_of(read[0])}
    assert list(records) == ["journals/jmlr/Muller01", "journals/corr/abs-1810-04805",
                             "conf/nips/VaswaniSPUJGKP17", "conf/tiny/2019"]  # the www page is no publication
    muller = records["journals/jmlr/Muller01"]
    assert muller.service == METADATA_INDEX
    assert muller.title == "Straßen and Cafés of H2O Networks"  # inline markup's text kept, DBLP's full stop not
    assert muller.author_names == ("Jürgen Müller", "Wei Wang")  # without the disambiguation numbers
    assert muller.authors == ("Müller", "Wang")
    assert (muller.year, muller.venue, muller.doi) == (2001, "J. Mach. Learn. Res.", "10.5555/jmlr.2001.7")
    assert records["journals/corr/abs-1810-04805"].arxiv_id == "1810.04805"
    assert records["conf/nips/VaswaniSPUJGKP17"].doi is None  # a publisher's page is no identifier
    assert records["conf/tiny/2019"].author_names == ("Anna Smith",)  # editors stand in for authors
    assert problems_of(read[0]) == ["dblp.xml: journals/x/NoTitle: no title, DOI or arXiv id"]


def test_dblp_corr_key_gives_the_arxiv_id_and_a_gzipped_dump_reads_the_same(tmp_path: Path):
    xml = b'<dblp><article key="journals/corr/abs-2203-00130"><title>A Preprint.</title></article></dblp>'
    (record,) = records_of(list(read_dblp(io.BytesIO(xml), "corr.xml")))
    assert record.record.arxiv_id == "2203.00130"
    copy = tmp_path / "dblp.xml.gz"
    copy.write_bytes(gzip.compress(DBLP_XML))
    with gzip.open(copy, "rb") as stream:
        assert list(read_dblp(stream, "dblp.xml")) == list(read_dblp(io.BytesIO(DBLP_XML), "dblp.xml"))


def test_a_file_that_is_not_dblp_xml_is_refused():
    with pytest.raises(DumpFormatError, match=r"x\.xml: not DBLP XML: the root element is <feed>"):
        list(read_dblp(io.BytesIO(b"<feed><entry/></feed>"), "x.xml"))
    with pytest.raises(DumpFormatError, match=r"works\.jsonl:1: not well-formed XML"):
        list(read_dblp(io.BytesIO(WORK_LINES.encode()), "works.jsonl"))


def test_work_lines_tell_crossref_from_openalex_and_report_bad_lines():
    items = list(read_work_lines(io.BytesIO(WORK_LINES.encode()), "works.jsonl"))
    records = {item.key: item.record for item in records_of(items)}
    assert list(records) == ["10.1145/3292500.3330701", "W2194775991"]
    optuna, resnet = records.values()
    assert (optuna.service, optuna.authors, optuna.year, optuna.venue) == (
        METADATA_INDEX, ("Akiba", "Sano"), 2019, "Proceedings of KDD")
    assert (resnet.service, resnet.doi, resnet.authors, resnet.year) == (
        METADATA_INDEX, "10.1109/cvpr.2016.90", ("He", "Zhang"), 2016)
    problems = problems_of(items)
    assert [problem.split(": ", 1)[0] for problem in problems] == ["works.jsonl:3", "works.jsonl:5", "works.jsonl:6"]
    assert "not JSON" in problems[0] and "a JSON list, not a work object" in problems[1]
    assert "neither a Crossref work" in problems[2]


def test_work_lines_of_which_none_is_a_work_are_refused():
    with pytest.raises(DumpFormatError, match=r"dblp\.xml: no line is a Crossref or OpenAlex work \(first: "
                                              r"dblp\.xml:1: not JSON"):
        list(read_work_lines(io.BytesIO(DBLP_XML), "dblp.xml"))


def test_bibtex_collection_entries_become_records():
    items = list(read_bibtex_collection(io.BytesIO(BIBTEX_COLLECTION.encode()), "anthology.bib"))
    (bert,) = records_of(items)
    assert bert.key == "devlin-etal-2019-bert"
    assert bert.record.title == "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding"
    assert bert.record.authors == ("Devlin", "Chang", "Müller")
    assert (bert.record.year, bert.record.doi, bert.record.venue) == (
        2019, "10.18653/v1/n19-1423", "Proceedings of NAACL-HLT")
    assert problems_of(items) == ["anthology.bib:9: entry 'just-a-note' has no title, DOI or arXiv id"]
    with pytest.raises(DumpFormatError, match="no BibTeX entry"):
        list(read_bibtex_collection(io.BytesIO(b"just prose"), "notes.bib"))


# -- the index ---------------------------------------------------------------------------------------------------------

def test_lookup_by_doi_arxiv_id_exact_title_and_similar_title(index: MetadataIndex):
    by_doi = index.lookup(ParsedEntry(1, "", doi="https://doi.org/10.5555/JMLR.2001.7"))
    assert by_doi.service == METADATA_INDEX and by_doi.error is None
    (muller,) = by_doi.records
    assert (muller.found_by, muller.title, muller.authors) == (
        BY_DOI, "Straßen and Cafés of H2O Networks", ("Müller", "Wang"))
    assert muller.external_ids == {"dump": "dblp.xml", "key": "journals/jmlr/Muller01"}

    (bert,) = index.lookup(ParsedEntry(1, "", arxiv_id="1810.04805v2")).records
    assert (bert.found_by, bert.external_ids["key"]) == (BY_ARXIV_ID, "journals/corr/abs-1810-04805")

    # a DOI the index does not know: the title is looked up next
    (vaswani,) = index.lookup(ParsedEntry(1, "", doi="10.9999/unknown", title="Attention Is All You Need!")).records
    assert (vaswani.found_by, vaswani.external_ids["key"], vaswani.year) == (
        BY_TITLE, "conf/nips/VaswaniSPUJGKP17", 2017)

    # the same title in two dumps: both records
    both = index.lookup(ParsedEntry(1, "", title="BERT - pre-training of deep bidirectional transformers for "
                                                  "language understanding")).records
    assert sorted(record.external_ids["dump"] for record in both) == ["anthology.bib", "dblp.xml"]

    (resnet,) = index.lookup(ParsedEntry(1, "", title="Deep Residul Learning for Imag Recognition")).records
    assert (resnet.found_by, resnet.external_ids, resnet.doi) == (
        BY_TITLE, {"dump": "works.jsonl", "key": "W2194775991"}, "10.1109/cvpr.2016.90")

    (from_bibtex,) = index.lookup(ParsedEntry(1, "", doi="10.18653/v1/n19-1423")).records
    assert from_bibtex.external_ids == {"dump": "anthology.bib", "key": "devlin-etal-2019-bert"}


def test_a_miss_is_an_empty_answer(index: MetadataIndex):
    for entry in (ParsedEntry(1, "", title="A Field Guide to the Llamas of Peru"), ParsedEntry(1, "", doi="10.1/x"),
                  ParsedEntry(1, "", arxiv_id="2401.99999"), ParsedEntry(1, "")):
        answer = index.lookup(entry)
        assert (answer.records, answer.error) == ((), None)


def test_lookups_from_many_threads_agree_with_one(index: MetadataIndex):
    entries = [ParsedEntry(1, "", doi="10.5555/jmlr.2001.7"), ParsedEntry(1, "", arxiv_id="1810.04805"),
               ParsedEntry(1, "", title="Attention is all you need"),
               ParsedEntry(1, "", title="Deep residual learning for image recogniton")] * 10
    alone = [index.lookup(entry) for entry in entries]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(index.lookup, entries))
    assert together == alone
    assert all(answer.records and answer.error is None for answer in together)


def test_an_index_that_cannot_be_opened_is_an_answer_with_an_error(tmp_path: Path):
    missing = MetadataIndex(tmp_path / "none.duckdb").lookup(ParsedEntry(1, "", title="Anything at all"))
    assert missing.records == () and "no index there" in missing.error
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"not a database" * 1000)
    damaged = MetadataIndex(garbage).lookup(ParsedEntry(1, "", title="Anything at all"))
    assert damaged.records == () and "cannot open the index" in damaged.error


def test_importing_the_same_file_again_changes_nothing(index: MetadataIndex, dumps: dict[str, Path]):
    before = index.stats()
    again = index.import_dump(dumps[JSONL], JSONL)
    assert again.unchanged and (again.records, again.problem_count) == (2, 3)
    assert index.stats() == before
    assert [(dump.name, dump.records, dump.problem_count) for dump in before.dumps] == [
        ("anthology.bib", 1, 1), ("dblp.xml", 4, 1), ("works.jsonl", 2, 3)]
    assert before.records == 7


def test_a_new_version_of_a_dump_replaces_its_records(index: MetadataIndex, dumps: dict[str, Path]):
    old_sha = index.stats().dumps[2].sha256
    dumps[JSONL].write_text(crossref_line("10.1000/new", "A Newer Work on Indexes"), encoding="utf-8")
    report = index.import_dump(dumps[JSONL], JSONL)
    assert (report.records, report.replaced, report.unchanged) == (1, old_sha, False)
    assert index.lookup(ParsedEntry(1, "", doi="10.1145/3292500.3330701")).records == ()
    assert index.lookup(ParsedEntry(1, "", title="Deep Residual Learning for Image Recognition")).records == ()
    (new,) = index.lookup(ParsedEntry(1, "", doi="10.1000/new")).records
    assert new.title == "A Newer Work on Indexes"
    stats = index.stats()
    assert stats.records == 6 and stats.dumps[2].sha256 == report.sha256
    # the other dumps' records and title words are untouched
    assert index.lookup(ParsedEntry(1, "", title="Atention is all you need")).records[0].external_ids["dump"] == \
        "dblp.xml"


def test_an_interrupted_import_leaves_the_previous_version(index: MetadataIndex, dumps: dict[str, Path]):
    before = index.stats()
    dumps[JSONL].write_text("".join(crossref_line(f"10.1000/new{n}", f"Work number {n}") for n in range(5)),
                            encoding="utf-8")
    seen: list[int] = []

    def interrupt(records: int) -> None:
        seen.append(records)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        index.import_dump(dumps[JSONL], JSONL, progress=interrupt)
    assert seen == [2]  # one batch of two was in when it stopped
    assert index.stats() == before
    assert index.lookup(ParsedEntry(1, "", doi="10.1000/new0")).records == ()
    assert len(index.lookup(ParsedEntry(1, "", doi="10.1145/3292500.3330701")).records) == 1


def test_a_killed_import_leaves_the_previous_version(index: MetadataIndex, dumps: dict[str, Path]):
    before = index.stats()
    index.close()
    dumps[JSONL].write_text("".join(crossref_line(f"10.1000/new{n}", f"Work number {n}") for n in range(5)),
                            encoding="utf-8")
    code = ("import os, signal, sys\n"
            "from peerify_dagster.resources.metadata_index import MetadataIndex\n"
            "MetadataIndex(sys.argv[1], batch_records=2).import_dump(\n"
            "    sys.argv[2], 'jsonl', progress=lambda records: os.kill(os.getpid(), signal.SIGKILL))\n")
    killed = subprocess.run([sys.executable, "-c", code, str(index.path), str(dumps[JSONL])], capture_output=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    assert index.stats() == before
    assert index.lookup(ParsedEntry(1, "", doi="10.1000/new0")).records == ()


def test_a_dump_of_the_wrong_format_imports_nothing(index: MetadataIndex, dumps: dict[str, Path], tmp_path: Path):
    before = index.stats()
    with pytest.raises(DumpFormatError, match="not well-formed XML"):
        index.import_dump(dumps[JSONL], DBLP, name="dblp.xml")  # would have replaced the DBLP records
    not_gzip = tmp_path / "more.jsonl.gz"
    not_gzip.write_text(WORK_LINES, encoding="utf-8")
    with pytest.raises(DumpFormatError, match="not a readable gzip file"):
        index.import_dump(not_gzip, JSONL)
    with pytest.raises(MetadataIndexError, match="no such file"):
        index.import_dump(tmp_path / "absent.xml", DBLP)
    with pytest.raises(MetadataIndexError, match="unknown dump format 'csv'"):
        index.import_dump(dumps[JSONL], "csv")
    assert index.stats() == before


def test_default_index_path_is_in_a_folder_lake_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    assert default_index_path() == tmp_path / "lake" / "metadata_index" / "index.duckdb"
    monkeypatch.setenv("PEERIFY_LAKE", "s3://bucket/lake")
    with pytest.raises(MetadataIndexError, match=r"s3://bucket/lake.*--index PATH"):
        default_index_path()


# -- peerify refs index ------------------------------------------------------------------------------------------------

def test_refs_index_command_end_to_end(tmp_path: Path, dumps: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]):
    lake = tmp_path / "lake"
    monkeypatch.setenv("PEERIFY_LAKE", str(lake))
    assert main(["refs", "index", "--dblp", str(dumps[DBLP]), "--jsonl", str(dumps[JSONL]),
                 "--bibtex", str(dumps[BIBTEX]), "--stats"]) == 0
    out = capsys.readouterr().out
    assert "dblp.xml (dblp): 4 records, 1 problem, " in out
    assert "works.jsonl (jsonl): 2 records, 3 problems, " in out and "records/s" in out
    assert f"  {dumps[JSONL]}:3: not JSON" in out
    assert "anthology.bib (bibtex): 1 record, 1 problem, " in out
    assert "records: 7; title words:" in out
    assert re.search(r"^dblp\.xml +dblp +4 +1 ", out, re.MULTILINE)  # the --stats table
    index_file = lake / "metadata_index" / "index.duckdb"
    with MetadataIndex(index_file) as built:
        assert built.lookup(ParsedEntry(1, "", arxiv_id="1810.04805")).records[0].found_by == BY_ARXIV_ID

    assert main(["refs", "index", "--dblp", str(dumps[DBLP])]) == 0
    assert "dblp.xml (dblp): unchanged since its import" in capsys.readouterr().out


@pytest.mark.parametrize(("arguments", "lake", "message"), [
    (["--jsonl", "absent.jsonl"], "lake", "absent.jsonl: no such file"),
    (["--dblp", "{works}"], "lake", "not well-formed XML"),
    (["--stats"], "s3://bucket/lake", "give its path (--index PATH)"),
    (["--stats"], "lake", "no index there"),
    ([], "lake", "nothing to do"),
])
def test_refs_index_refusals_are_one_line_and_exit_2(arguments: list[str], lake: str, message: str, tmp_path: Path,
                                                     dumps: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]):
    monkeypatch.setenv("PEERIFY_LAKE", lake if "://" in lake else str(tmp_path / lake))
    monkeypatch.chdir(tmp_path)
    arguments = [argument.format(works=dumps[JSONL]) for argument in arguments]
    assert main(["refs", "index", *arguments]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
