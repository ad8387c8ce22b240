"""A trace file's bytes as the CSV parser reads them, line by line bounded, every error with its line.

Why: pandas' tokenizer holds a whole line in memory before it can say anything about it, so one
line of a gigabyte (a 510 KiB gzip expands to that) cost a gigabyte before the error; and the
errors of the layers under it (gzip, UTF-8) name no line at all. This reader sits between the
file and the parser: it counts lines, refuses a line longer than `MAX_LINE_BYTES` as soon as
its bytes pass the bound, decodes UTF-8 as it goes, and turns a gzip error into a TraceError
naming the line reached. Its cost is a split per block read, well under the parser's own.
"""

from __future__ import annotations

import codecs
import gzip
import io
import re
import zlib
from pathlib import Path

from airflow_provider_skynomad.exceptions import LineBoundError

MAX_LINE_BYTES = 64 * 1024
"""Longest line a trace may hold: a row of the format is ~150 bytes, a header ~120."""
_BLOCK = 256 * 1024
_LINE_IN_MESSAGE = re.compile(r"\bline (\d+)")  # pandas: "Expected 11 fields in line 5, saw 12" (1-based)
_ROW_IN_MESSAGE = re.compile(r"\bstarting at row (\d+)")  # pandas: "EOF inside string starting at row 3" (0-based)


class BoundedLines(io.RawIOBase):
    """Bytes of `raw` (a binary stream), checked as they are read; `line` is the line being read (1-based)."""

    def __init__(self, raw, max_line_bytes: int = MAX_LINE_BYTES):
        self.raw = raw
        self.max_line_bytes = max_line_bytes
        self.line = 1
        self._current = 0  # bytes of the current (unfinished) line read so far
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            data = self.raw.read(len(buffer))
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            reason = str(exc).strip() or type(exc).__name__
            raise LineBoundError(self.line, f"not a readable CSV trace (damaged gzip stream: {reason})") from None
        self._check(data)
        buffer[: len(data)] = data
        return len(data)

    def _check(self, data: bytes) -> None:
        try:
            self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            at = max(exc.start, 0)
            bad = exc.object[at : at + 1]
            raise LineBoundError(self.line + data.count(b"\n", 0, at), f"not UTF-8 text (byte {bad!r})") from None
        parts = data.split(b"\n")
        limit = self.max_line_bytes
        lengths = [self._current + len(parts[0]), *map(len, parts[1:])]
        if max(lengths) > limit:
            over = next(i for i, n in enumerate(lengths) if n > limit)
            raise LineBoundError(
                self.line + over,
                f"the line is longer than {limit} bytes (a trace row is ~150); is this a trace file?",
            )
        self.line += len(parts) - 1
        self._current = lengths[-1] if len(parts) > 1 else lengths[0]

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            super().close()


def open_bounded(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> io.BufferedReader:
    """`path` (gzip when it ends in .gz) decompressed and checked as it is read."""
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115  (closed with the reader)
    return io.BufferedReader(BoundedLines(raw, max_line_bytes), buffer_size=_BLOCK)


def line_of(message: str, reached: int) -> str:
    """'line N' from a parser's message when it names one, else the line the reader had reached."""
    if found := _LINE_IN_MESSAGE.search(message):
        return f"line {found.group(1)}"
    if found := _ROW_IN_MESSAGE.search(message):
        return f"line {int(found.group(1)) + 1}"
    return f"by line {reached}"
