"""Hostile trace files through `skynomad market import` and `skynomad evaluate --trace` (hypothesis).

Each example is a CSV built from a valid one with hostile pieces put in: NaN, inf, negative and
huge numbers, empty, quoted, multi-line and control-character strings, SQL in names, duplicate,
missing or extra header columns, a BOM, non-UTF-8 bytes, gzip (whole or truncated). The promise:
exit code 0 with the rows imported, or exit code 2 with one error line naming the file, never a
traceback; a refused file writes nothing (the row count is unchanged) and leaves no file behind.
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_provider_skynomad.cli import main as skynomad
from airflow_provider_skynomad.market.observations import COLUMNS, TraceError, iter_observations, read_observations
from airflow_provider_skynomad.market.store.table import MarketTable

FUZZ = settings(
    max_examples=int(os.environ.get("SKYNOMAD_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HOSTILE_NUMBERS = [
    "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "-1", "-0", "-0.0", "1e308", "1e309", "-1e309",
    "99999999999999999999", "2147483647", "2147483648", "1e-400", "0x10", "1_000", "١٢", "", " ", "1,5",
    "4.5", "True", "None", "null", "16 ", " 16",
]  # fmt: skip
HOSTILE_TEXT = [
    "", " ", "'; DROP TABLE market_observations; --", "\" OR 1=1 --", "a\x00b", "tab\there", "é-zone",
    "\ufeffzone", "%s", "?", ":zone", "\\", "x" * 300, "Robert'); DROP TABLE schema_version;--",
]  # fmt: skip
HOSTILE_TIMES = [
    "", "yesterday", "2025-13-01T00:00:00Z", "2025-10-04T00:10:00.1234567Z", "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z", "nan", "NaT", "1e10", "2025-10-04", "2025-10-04T00:10:00+14:00", "now",
    "2025-10-04T24:00:00Z", "2025-02-30T00:00:00Z",
]  # fmt: skip
GOOD = {
    "cloud": "gcp",
    "region": "us-central1",
    "zone": "us-central1-a",
    "instance_type": "a3-highgpu-1g",
    "accelerator": "H100",
    "accelerator_count": "1",
    "requested": "16",
    "available": "16",
    "spot_price": "2.3724",
    "on_demand_price": "10.3157",
}
NUMERIC = ("accelerator_count", "requested", "available", "spot_price", "on_demand_price")


def _quote(value: str) -> str:
    if any(c in value for c in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


@st.composite
def trace_files(draw, hostile: bool = True) -> bytes:
    """The bytes of a small trace file, maybe broken in one or several ways."""
    header = list(COLUMNS)
    header_change = draw(st.sampled_from(["none", "none", "duplicate", "missing", "extra", "bom", "reorder"]))
    if header_change == "duplicate":
        header.append(draw(st.sampled_from(COLUMNS)))
    elif header_change == "missing":
        header.remove(draw(st.sampled_from(COLUMNS)))
    elif header_change == "extra":
        header.append("note")
    elif header_change == "reorder":
        header = draw(st.permutations(header))
    n = draw(st.integers(1, 6))
    lines = [",".join(header)]
    if header_change == "bom":
        lines[0] = "\ufeff" + lines[0]
    for k in range(n):
        row = {"observed_at": f"2025-10-04T00:{10 * k:02d}:00Z", **GOOD}
        if hostile and draw(st.booleans()):
            column = draw(st.sampled_from(COLUMNS))
            if column == "observed_at":
                row[column] = draw(st.sampled_from(HOSTILE_TIMES) | st.text(max_size=12))
            elif column in NUMERIC:
                row[column] = draw(st.sampled_from(HOSTILE_NUMBERS) | st.floats().map(repr) | st.integers().map(str))
            else:
                row[column] = draw(st.sampled_from(HOSTILE_TEXT) | st.text(max_size=12))
        values = [_quote(row.get(c, "x")) for c in header]
        if hostile and draw(st.integers(0, 9)) == 0:
            values = values[: draw(st.integers(0, len(values)))]  # a short row
        lines.append(",".join(values))
    if hostile and draw(st.integers(0, 5)) == 0:
        lines.insert(draw(st.integers(1, len(lines))), lines[-1])  # a duplicate row
    if hostile and draw(st.integers(0, 5)) == 0:
        lines.insert(draw(st.integers(1, len(lines))), "")
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "latin-1", "utf-16"])) if hostile else "utf-8"
    data = text.encode(encoding, errors="replace")
    if hostile and draw(st.integers(0, 6)) == 0:
        data += draw(st.binary(min_size=1, max_size=8))
    return data


@st.composite
def stored_files(draw, hostile: bool = True) -> tuple[str, bytes]:
    """A file name and its bytes: plain, gzipped, or gzipped and cut short."""
    data = draw(trace_files(hostile=hostile))
    form = draw(st.sampled_from(["plain", "plain", "gzip", "truncated-gzip"]))
    if form == "plain":
        return "trace.csv", data
    packed = gzip.compress(data)
    if form == "truncated-gzip":
        packed = packed[: draw(st.integers(0, len(packed) - 1))]
    return "trace.csv.gz", packed


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'market.db'}"
    with MarketTable(url) as table:
        table.create()
    return url


def _count(url: str) -> int:
    with MarketTable(url) as table:
        return table.count()


def _one_error_line(err: str, command: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"skynomad {command}"), err
    return lines[0]


def _files_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@FUZZ
@given(stored_files())
def test_import_of_a_hostile_file_is_all_or_nothing_with_a_clear_error(sqlite_url, capsys, stored):
    name, data = stored
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        before = _count(sqlite_url)
        try:  # what the import reads: a trace whose zones are AWS or GCP zone names
            expected = sum(len(chunk) for chunk in iter_observations(path, zone_names=True))
        except TraceError:
            expected = None
        code = skynomad(["market", "import", "--trace", str(path), "--url", sqlite_url])
        out, err = capsys.readouterr()
        assert _files_in(Path(folder)) == {name}
    event(f"import exit {code} {re.sub(r'[0-9]+', 'N', err.replace(str(path), 'FILE'))[24:90].strip()}")
    if code == 0:
        assert expected is not None and err == "" and "Traceback" not in out
        assert _count(sqlite_url) - before == int(out.split("imported ")[1].split()[0]) <= expected
    else:
        assert code == 2 and expected is None
        line = _one_error_line(err, "market import")
        assert str(path) in line and line.endswith("nothing was written"), line
        assert _count(sqlite_url) == before


@FUZZ
@given(stored_files())
def test_evaluate_refuses_a_hostile_trace_before_any_run_or_write(capsys, stored):
    name, data = stored
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        report = Path(folder) / "report.json"
        code = skynomad(
            ["evaluate", "--trace", str(path), "--work-hours", "2", "--deadline-hours", "4", "--output", str(report)]
        )
        _, err = capsys.readouterr()
        assert _files_in(Path(folder)) == {name}  # no report, no temporary file
    # Every example spans under an hour, shorter than the job's window: even a valid one is refused.
    assert code == 2
    _one_error_line(err, "evaluate")


@FUZZ
@given(st.binary(max_size=200), st.sampled_from(["trace.csv", "trace.csv.gz"]))
def test_import_of_arbitrary_bytes_never_raises(sqlite_url, capsys, data, name):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        before = _count(sqlite_url)
        code = skynomad(["market", "import", "--trace", str(path), "--url", sqlite_url])
        _, err = capsys.readouterr()
    assert code == 2
    _one_error_line(err, "market import")
    assert _count(sqlite_url) == before


# -- what fuzzing found (each raised a traceback or was accepted before) --------------------------

HEADER = ",".join(COLUMNS)
ROW = "2025-10-04T00:10:00Z,gcp,us-central1,us-central1-a,a3-highgpu-1g,H100,1,16,16,2.3724,10.3157"


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("corrupt.csv.gz", b"\x1f\x8b\x08\x00garbage-bytes-here", "not a readable CSV trace"),  # zlib.error
        ("nul.csv", (HEADER + "\n" + ROW.replace("us-central1-a", "a\x00b") + "\n").encode(), "control character"),
        ("dup.csv", f"{HEADER},zone\n{ROW},other-zone\n".encode(), "more than once in the header"),
    ],
    ids=["corrupt-gzip", "nul-in-zone", "duplicate-header"],
)
def test_what_fuzzing_found_is_a_trace_error(tmp_path, name, data, said):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TraceError, match=said):
        read_observations(path)


# -- streaming: chunks are checked as if the file were read whole --------------------------------


@st.composite
def sorted_traces(draw) -> str:
    """A valid trace of a few markets, then maybe one row changed to break it anywhere."""
    zones = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    steps = draw(st.integers(1, 8))
    rows = [
        ",".join([f"2025-10-04T{k // 6:02d}:{10 * (k % 6):02d}:00Z", "gcp", "r", f"r-{z}", "t", "H100", "1", "16", "3",
                  "2.5", "10"])
        for k in range(steps) for z in zones
    ]  # fmt: skip
    if draw(st.booleans()):
        i = draw(st.integers(0, len(rows) - 1))
        j = draw(st.integers(0, len(rows) - 1))
        rows[i] = draw(st.sampled_from([rows[j], rows[i].replace(",3,", ",-3,"), rows[i].replace(",16,", ",2,")]))
    return "\n".join([",".join(COLUMNS), *rows]) + "\n"


@FUZZ
@given(sorted_traces(), st.integers(1, 5))
def test_chunked_reading_finds_what_a_whole_read_finds(tmp_path_factory, text, chunk_rows):
    from airflow_provider_skynomad.market.observations import validate_observations

    path = tmp_path_factory.mktemp("chunks") / "trace.csv"
    path.write_text(text)
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    try:
        whole, whole_error = validate_observations(raw, source=str(path)), None
    except TraceError as exc:
        whole, whole_error = None, str(exc)
    try:
        chunked, chunked_error = pd.concat(list(iter_observations(path, chunk_rows)), ignore_index=True), None
    except TraceError as exc:
        chunked, chunked_error = None, str(exc)
    assert (whole_error is None) == (chunked_error is None), (whole_error, chunked_error)
    if whole is not None:
        pd.testing.assert_frame_equal(chunked, whole)
    else:  # the same line, though a later chunk's error of another kind may be found first
        assert chunked_error.split(":")[0] and str(path) in chunked_error


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_bad_row_in_a_later_chunk_rolls_back_the_chunks_before(request, tmp_path, capsys, monkeypatch, backend):
    from airflow_provider_skynomad.market import observations

    url = f"sqlite:///{tmp_path / 'm.db'}" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    monkeypatch.setattr(observations, "CHUNK_ROWS", 7_000)  # 3 chunks, the first two over the COPY threshold
    lines = [",".join(COLUMNS)]
    for k in range(20_000):
        at = pd.Timestamp("2025-10-04T00:00:00Z") + pd.Timedelta(minutes=k)
        lines.append(f"{at.strftime('%Y-%m-%dT%H:%M:%SZ')},gcp,us-central1,us-central1-a,t,H100,1,16,3,2.5,10")
    lines[-1] = lines[-1].replace(",16,3,", ",16,17,")
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(lines) + "\n")
    assert skynomad(["market", "import", "--trace", str(trace), "--url", url]) == 2
    assert "line 20001, column 'available'" in capsys.readouterr().err
    with MarketTable(url) as table:
        assert table.count() == 0
