"""Traces with one enormous line, broken bytes or broken CSV: a TraceError naming file and line,
memory bounded by the line limit, never an uncaught parser error."""

from __future__ import annotations

import gzip
import subprocess
import sys
import textwrap

import pytest

from airflow_provider_skynomad.market.observations import COLUMNS, TraceError, iter_observations, read_observations

HEADER = ",".join(COLUMNS) + "\n"
ROW = "2025-10-04T00:{m:02d}:00Z,gcp,us-central1,us-central1-a,a3-highgpu-1g,H100,1,16,16,2.3724,10.3157\n"
MIB = 1 << 20


def rows(n: int) -> str:
    return "".join(ROW.format(m=i) for i in range(n))


def write_gzip_with_long_line(path, before: str, length: int) -> None:
    """`before`, then one line of `length` bytes, streamed: the test itself never holds it."""
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(before.encode())
        block = b"a" * MIB
        for _ in range(length // MIB):
            out.write(block)
        out.write(b"\n")


@pytest.mark.parametrize("line", [1, 4])
def test_a_long_line_in_a_small_gzip_is_refused_naming_file_and_line(tmp_path, line):
    path = tmp_path / "long.csv.gz"
    before = "" if line == 1 else HEADER + rows(line - 2)
    write_gzip_with_long_line(path, before, 256 * MIB)
    assert path.stat().st_size < 600 * 1024  # the shape of the report: a few hundred KiB on disk
    with pytest.raises(TraceError, match=rf"^{path}, line {line}: the line is longer than 65536 bytes"):
        list(iter_observations(path))


def test_reading_a_gigabyte_line_costs_no_gigabyte(tmp_path):
    """Peak memory of a fresh interpreter reading it stays within 200 MiB of one reading a good trace."""
    bad = tmp_path / "long.csv.gz"
    write_gzip_with_long_line(bad, HEADER + rows(3), 1024 * MIB)
    good = tmp_path / "good.csv"
    good.write_text(HEADER + rows(3))
    probe = textwrap.dedent(
        """
        import resource, sys
        from airflow_provider_skynomad.market.observations import TraceError, iter_observations
        try:
            list(iter_observations(sys.argv[1]))
        except TraceError as exc:
            print("TraceError:", exc, file=sys.stderr)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        """
    )

    def peak_kib(path) -> int:
        done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    grown_mib = (peak_kib(bad) - peak_kib(good)) / 1024
    assert grown_mib < 200, f"reading a trace with a 1 GiB line grew memory by {grown_mib:.0f} MiB"


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
