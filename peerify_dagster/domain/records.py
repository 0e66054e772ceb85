"""Record files, one way: JSON lines and CSV that carry any text through a write and a read unchanged, and a
`file:line: reason` for every input that is not what it claims to be. Pure logic: no Dagster, no file system.

JSON lines are split on "\\n" only. `str.splitlines()` also splits on \\r, \\x0b, \\x0c, \\x1c-\\x1e, U+0085, U+2028
and U+2029, which JSON strings may hold, so one such character in a note would cut a record in two and shift every
later line. The writer escapes U+0085, U+2028 and U+2029 as well (JSON escapes the rest already), so a file of
ours reads back right even in a reader that does split on them.

CSV is written with "\\r\\n" line ends, so every field holding a delimiter, a quote, \\r or \\n is quoted (the csv
module quotes a field when it holds a character of the line terminator), and read without newline translation, so
a quoted \\r stays an \\r; line numbers count "\\n" as the JSON lines' do.
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
            yield JsonLine(number, text, json.loads(text))
        except json.JSONDecodeError as exc:
            yield JsonLine(number, text, problem=f"not valid JSON ({exc.msg}, column {exc.colno})")


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
    """(line number where the row starts, {column: value}) per row after the header line; fields beyond the header
    are dropped. A row the csv module cannot read is RecordError with its line."""
    reader = csv.DictReader(io.StringIO(text, newline="\n"))  # lines end at "\n" only, as the line numbers count
    start = 2  # line 1 is the header
    try:
        for record in reader:
            yield start, {name: value for name, value in record.items() if name is not None}
            start = reader.line_num + 1  # a quoted field may span lines: the next row starts after this one
    except csv.Error as exc:
        raise RecordError(None, reader.line_num, f"not readable as CSV ({exc})") from None
