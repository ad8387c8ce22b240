"""Traces with one enormous line, broken bytes or broken CSV: a TraceError naming file and line,
never an uncaught parser error. The memory a gigabyte line costs (a fresh interpreter reading one):
tests/integration/market/test_trace_memory.py."""

from __future__ import annotations

import gzip

import pytest

from airflow_provider_skynomad.market.observations import TraceError, iter_observations, read_observations
from tests.support.trace_files import HEADER, MIB, ROW, rows, write_gzip_with_long_line


@pytest.mark.parametrize("line", [1, 4])
def test_a_long_line_in_a_small_gzip_is_refused_naming_file_and_line(tmp_path, line):
    path = tmp_path / "long.csv.gz"
    before = "" if line == 1 else HEADER + rows(line - 2)
    write_gzip_with_long_line(path, before, 256 * MIB)
    assert path.stat().st_size < 600 * 1024  # the shape of the report: a few hundred KiB on disk
    with pytest.raises(TraceError, match=rf"^{path}, line {line}: the line is longer than 65536 bytes"):
        list(iter_observations(path))


@pytest.mark.parametrize(
    ("content", "line", "what"),
    [
        (HEADER + rows(2) + ROW.replace("\n", ",extra\n") + rows(2), 4, "Expected 11 fields in line 4, saw 12"),
        (HEADER + rows(2) + 'x,"unterminated\n' + rows(2), 4, "not a readable CSV trace"),
        (HEADER.encode() + rows(3).encode() + b"\xff\xfe,x\n", 5, "not UTF-8"),
        ('a,"b\n', 1, "not a readable CSV trace"),
    ],
)
def test_every_csv_error_names_file_and_line(tmp_path, content, line, what):
    path = tmp_path / "bad.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(TraceError) as caught:
        read_observations(path)
    message = str(caught.value)
    assert message.startswith(f"{path}, ") and what in message
    assert f"line {line}" in message


def test_a_damaged_gzip_names_the_line_reached(tmp_path):
    path = tmp_path / "cut.csv.gz"
    data = gzip.compress((HEADER + rows(50)).encode())
    path.write_bytes(data[: len(data) // 2])  # cut mid-stream
    with pytest.raises(TraceError, match=rf"^{path}, line \d+: not a readable CSV trace \(damaged gzip stream"):
        read_observations(path)


def test_a_good_gzip_trace_still_reads_whole(tmp_path):
    path = tmp_path / "ok.csv.gz"
    path.write_bytes(gzip.compress((HEADER + rows(30)).encode()))
    frame = read_observations(path)
    assert len(frame) == 30 and frame["zone"].unique().tolist() == ["us-central1-a"]


def test_market_import_says_file_and_line_and_writes_nothing(tmp_path, capsys):
    import argparse

    from airflow_provider_skynomad.cli.market import add_market_commands

    path = tmp_path / "long.csv.gz"
    write_gzip_with_long_line(path, HEADER + rows(2), 8 * MIB)
    database = tmp_path / "market.db"
    parser = argparse.ArgumentParser(prog="skynomad")
    add_market_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["market", "import", "--trace", str(path), "--url", f"sqlite:///{database}"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert f"{path}, line 4: the line is longer than" in err and "nothing was written" in err
    assert not database.exists()
