"""Record files, one way: JSON lines and CSV that carry any text through a write and a read unchanged, and a
`file:line: reason` for every input that is not what it claims to be. Pure logic: no Dagster, no file system.

JSON lines are split on "\\n" only. `str.splitlines()` also splits on \\r, \\x0b, \\x0c, \\x1c-\\x1e, U+0085, U+2028
and U+2029, which JSON strings may hold, so one such character in a note would cut a record in two and shift every
later line. The writer escapes U+0085, U+2028 and U+2029 as well (JSON escapes the rest already), so a file of
ours reads back right even in a reader that does split on them.

CSV is written with "\\r\\n" line ends, so every field holding a delimiter, a quote, \\r or \\n is quoted (the csv
module quotes a field when it holds a character of the line terminator), and read without newline translation, so
a quoted \\r stays an \\r; line numbers count "\\n" as the JSON lines' do. A CSV row must have the header's
fields (a short row, a field beyond the header that holds something, or a file ending inside quotes is a file cut
short or a delimiter outside quotes), so no cut or misaligned row is ever read as a shorter answer.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BYTE_ORDER_MARK = "\ufeff"  # spreadsheets and some editors start a UTF-8 file with it
# Line breaks to str.splitlines() that JSON leaves raw in a string (the others it escapes as control characters).
_RAW_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\u0085\u2028\u2029"}
_JSON_BLANK = b" \t\r"  # JSON whitespace besides the line feed the lines are split on


class RecordError(ValueError):
    """Input that is not a readable record file; the message is `file:line: reason` (or `line N: reason` when the
    file is not known where it is raised: `in_file` adds it)."""

    def __init__(self, file: str | None, line: int | None, reason: str) -> None:
        self.file, self.line, self.reason = file, line, reason
        super().__init__(f"{_where(file, line)}: {reason}")

    def in_file(self, file: str) -> RecordError:
        return RecordError(file, self.line, self.reason)


def _where(file: str | None, line: int | None) -> str:
    if line is None:
        return file or "input"
    return f"{file}:{line}" if file else f"line {line}"


# -- JSON lines --------------------------------------------------------------------------------------------------------
def json_line(record: Any) -> str:
    """One record as a JSON line (text kept readable: ensure_ascii off), ending in "\\n"."""
    return json.dumps(record, ensure_ascii=False).translate(_RAW_LINE_BREAKS) + "\n"


def jsonl_text(records: Iterable[Any]) -> str:
    return "".join(json_line(record) for record in records)


def jsonl_bytes(records: Iterable[Any]) -> bytes:
    return jsonl_text(records).encode("utf-8")


@dataclass(frozen=True)
class JsonLine:
    """One non-blank line of a JSON-lines file: its value, or why it has none."""

    number: int  # 1-based line number
    text: str | None  # the line as written (None when it is not UTF-8)
    record: Any = None
    problem: str | None = None  # "not UTF-8 (...)", "not valid JSON (...)"


def json_lines(data: bytes) -> Iterator[JsonLine]:
    """Every non-blank line of `data` (split on "\\n" only, a leading byte-order mark dropped), parsed on its own: an
    undecodable or unparsable line is a JsonLine with a problem and the lines after it still come."""
    for number, raw in enumerate(data.removeprefix(BYTE_ORDER_MARK.encode()).split(b"\n"), start=1):
        if not raw.strip(_JSON_BLANK):
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield JsonLine(number, None, problem=_not_utf8(exc))
            continue
        try:
            yield JsonLine(number, text, json_value(text))
        except RecordError as exc:
            yield JsonLine(number, text, problem=exc.reason)


def json_value(text: str) -> Any:
    """`text` parsed as JSON; RecordError with the line (when known) and the reason when it is not. json.loads
    raises other errors than JSONDecodeError for some input (a number past int()'s digit limit, deep nesting)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(None, exc.lineno, f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    except ValueError:
        raise RecordError(None, None, "not valid JSON (a number with more digits than can be read)") from None
    except RecursionError:
        raise RecordError(None, None, "not valid JSON (arrays or objects nested too deeply)") from None


def _not_utf8(exc: UnicodeDecodeError, column_offset: int = 0) -> str:
    return f"not UTF-8 (byte 0x{exc.object[exc.start]:02x} at column {exc.start - column_offset + 1})"


def decoded(data: bytes, file: str | None = None) -> str:
    """`data` as UTF-8 text without a leading byte-order mark; RecordError naming the line of the first byte that
    is not UTF-8."""
    try:
        return data.decode("utf-8").removeprefix(BYTE_ORDER_MARK)
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        raise RecordError(file, data.count(b"\n", 0, exc.start) + 1, _not_utf8(exc, line_start)) from None


# -- CSV ---------------------------------------------------------------------------------------------------------------
def csv_text(columns: Sequence[str], records: Iterable[Mapping[str, Any]]) -> str:
    """A header and one row per record (missing values and None as empty fields)."""
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue()


def csv_records(text: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number where the row starts, {column: value}) per row after the header line; empty fields beyond the
    header (a spreadsheet's trailing delimiters) are dropped. A row that is not one of the header's fields is
    RecordError with the line it starts on."""
    # The whole text is in memory already: the csv module's field size limit (128 KiB, a guard for streamed input)
    # would only refuse a long field of our own export (a whole manuscript as source material). It is process-wide,
    # so it is only ever raised.
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    # Lines end at "\n" only, as the line numbers count; strict: a file ending inside quotes is an error.
    reader = csv.reader(io.StringIO(text, newline="\n"), strict=True)
    start = 1
    try:
        header = next(reader, [])
        if not header and text.strip():
            raise RecordError(None, 1, "the first line is empty; it must be the header (the column names)")
        twice = sorted({name for name in header if name and header.count(name) > 1})
        if twice:
            raise RecordError(None, 1, f"column(s) {', '.join(map(repr, twice))} appear more than once in the header")
        start = reader.line_num + 1  # a quoted field may span lines: a row starts after the previous one's last
        for row in reader:
            if row:  # a blank line is no row
                yield start, _csv_record(header, row, start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise RecordError(None, start, _csv_problem(str(exc))) from None


def _csv_record(header: list[str], row: list[str], line: int) -> dict[str, str]:
    if len(row) < len(header):
        raise RecordError(None, line, f"{len(row)} field(s) where the header has {len(header)}: the row is cut short")
    beyond = [value for value in row[len(header):] if value]
    if beyond:
        raise RecordError(None, line, f"{len(row)} fields where the header has {len(header)} (a delimiter outside "
                                      f"quotes?); beyond the header: {beyond[0][:40]!r}")
    return dict(zip(header, row))


def _csv_problem(message: str) -> str:
    if message == "unexpected end of data":
        return "the file ends inside a quoted field of the row starting here: it is cut short, or a quote is missing"
    if message.startswith("new-line character seen in unquoted field"):
        return "a line break (\\r) outside quotes inside a row: save the file with \\r\\n or \\n line ends"
    return f"not readable as CSV ({message})"
