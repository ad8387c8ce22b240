"""`skynomad market import|export` through a tiny argparse parser, on SQLite and PostgreSQL."""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import pandas as pd
import pytest

from airflow_provider_skynomad.cli.market import add_market_commands
from airflow_provider_skynomad.market.observations import COLUMNS, read_observations, write_observations
from airflow_provider_skynomad.market.store.table import MarketTable

TRACE = Path(__file__).parents[3] / "airflow_provider_skynomad" / "data" / "gcp-h100-2025-first-week.csv.gz"
HEADER = ",".join(COLUMNS)
ROW = "2025-10-04T00:10:00Z,gcp,us-central1,us-central1-a,a3-highgpu-1g,H100,1,16,16,2.3724,10.3157"
ROW2 = "2025-10-04T00:20:00Z,gcp,us-central1,us-central1-a,a3-highgpu-1g,H100,1,16,0,2.3724,10.3157"


def skynomad(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="skynomad")
    add_market_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture(scope="module")
def canonical(tmp_path_factory) -> bytes:
    """The bundled trace after the canonical formatting (the file itself has CRLF line ends)."""
    path = tmp_path_factory.mktemp("canonical") / "trace.csv"
    write_observations(read_observations(TRACE), path)
    return path.read_bytes()


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_round_trip_is_exact(market_url, tmp_path, canonical, capsys):
    assert skynomad("market", "import", "--trace", str(TRACE), "--url", market_url) == 0
    assert "imported 13897 new rows" in capsys.readouterr().out
    assert skynomad("market", "export", "--output", str(tmp_path / "out.csv"), "--url", market_url) == 0
    assert (tmp_path / "out.csv").read_bytes() == canonical
    assert canonical.splitlines() == gzip.decompress(TRACE.read_bytes()).splitlines()
    assert skynomad("market", "export", "--output", str(tmp_path / "out.csv.gz"), "--url", market_url) == 0
    assert gzip.decompress((tmp_path / "out.csv.gz").read_bytes()) == canonical
    assert not list(tmp_path.glob(".tmp-*"))


def test_reimport_adds_nothing(market_url, tmp_path, capsys):
    trace = _write(tmp_path / "t.csv", HEADER, ROW, ROW2)
    assert skynomad("market", "import", "--trace", str(trace), "--url", market_url) == 0
    assert skynomad("market", "import", "--trace", str(trace), "--url", market_url) == 0
    assert "imported 0 new rows" in capsys.readouterr().out.splitlines()[-1]
    with MarketTable(market_url) as t:
        assert len(t.read()) == 2


def test_export_filters(market_url, tmp_path):
    assert skynomad("market", "import", "--trace", str(TRACE), "--url", market_url) == 0
    out = tmp_path / "part.csv"
    code = skynomad(
        "market", "export", "--output", str(out), "--url", market_url,
        "--zones", "us-west1-a,europe-west1-c", "--since", "2025-10-05T00:00:00Z", "--until", "2025-10-05 06:00",
    )  # fmt: skip
    assert code == 0
    trace = read_observations(TRACE)
    keep = trace["zone"].isin(["us-west1-a", "europe-west1-c"])
    keep &= trace["observed_at"].between(pd.Timestamp("2025-10-05T00:00Z"), pd.Timestamp("2025-10-05T06:00Z"), "left")
    pd.testing.assert_frame_equal(read_observations(out), trace[keep].reset_index(drop=True))
    assert len(read_observations(out)) == 2 * 36


@pytest.mark.parametrize(
    "lines, where",
    [
        ([HEADER.replace(",spot_price", ""), ROW.replace(",2.3724", "")], "line 1"),
        ([HEADER, ROW, ROW2.replace("2025-10-04T00:20:00Z", "yesterday")], "line 3, column 'observed_at'"),
        ([HEADER, ROW, ROW2.replace(",16,0,", ",16,-1,")], "line 3, column 'available'"),
        ([HEADER, ROW2, ROW], "line 3, column 'observed_at'"),  # goes back in time
        ([HEADER, ROW, ROW], "line 3, column 'observed_at'"),  # duplicate
    ],
    ids=["missing-column", "unparsable-time", "negative-count", "unsorted", "duplicate"],
)
def test_malformed_trace_is_refused_and_nothing_is_written(market_url, tmp_path, capsys, lines, where):
    kept = _write(tmp_path / "kept.csv", HEADER, ROW)
    assert skynomad("market", "import", "--trace", str(kept), "--url", market_url) == 0
    bad = _write(tmp_path / "bad.csv", *lines[:1], ROW.replace("us-central1-a", "us-central1-b"), *lines[1:])
    # the extra good row makes line numbers one higher and proves partial writes do not happen
    where = where.replace("line 3", "line 4")
    assert skynomad("market", "import", "--trace", str(bad), "--url", market_url) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and where in err, err
    with MarketTable(market_url) as t:
        assert t.zones() == ["us-central1-a"] and len(t.read()) == 1


def test_missing_trace_file(market_url, tmp_path, capsys):
    assert skynomad("market", "import", "--trace", str(tmp_path / "nope.csv"), "--url", market_url) == 2
    assert "nope.csv: no such trace file" in capsys.readouterr().err


def test_export_unknown_zone_and_empty_selection(market_url, tmp_path, capsys):
    out, trace = tmp_path / "out.csv", _write(tmp_path / "t.csv", HEADER, ROW)
    assert skynomad("market", "import", "--trace", str(trace), "--url", market_url) == 0
    assert skynomad("market", "export", "--output", str(out), "--url", market_url, "--zones", "mars-1a") == 2
    assert "mars-1a" in capsys.readouterr().err
    assert skynomad("market", "export", "--output", str(out), "--url", market_url, "--since", "2030-01-01") == 1
    assert "no rows" in capsys.readouterr().err
    assert not out.exists()


def test_bad_time_argument_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        skynomad("market", "export", "--output", "x.csv", "--since", "soon")
    assert exit_.value.code == 2
    assert "cannot parse time 'soon'" in capsys.readouterr().err


def test_database_errors_never_show_the_password(tmp_path, capsys):
    url = "postgresql://skynomad:s3cret@127.0.0.1:1/market"  # nothing listens on port 1
    assert skynomad("market", "import", "--trace", str(TRACE), "--url", url) == 1
    assert skynomad("market", "export", "--output", str(tmp_path / "o.csv"), "--url", url) == 1
    assert skynomad("market", "export", "--output", "o.csv", "--url", "mysql://u:s3cret@h/db") == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and "skynomad:***@127.0.0.1:1/market" in err, err


def test_default_url_is_used_without_url(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SKYNOMAD_HOME", str(tmp_path))
    assert skynomad("market", "import", "--trace", str(_write(tmp_path / "t.csv", HEADER, ROW))) == 0
    assert f"sqlite:///{tmp_path}/market.db" in capsys.readouterr().out


def test_sub_second_times_round_trip_exactly(market_url, tmp_path, capsys):
    times = [
        "2025-10-04T00:10:00.123456Z",
        "2025-10-04T00:10:00.5Z",
        "2025-10-04T00:10:01Z",
        "2025-10-04T00:10:01.000001Z",
    ]
    lines = [HEADER, *(ROW.replace("2025-10-04T00:10:00Z", t) for t in times)]
    trace = _write(tmp_path / "subsecond.csv", *lines)
    assert skynomad("market", "import", "--trace", str(trace), "--url", market_url) == 0
    assert "imported 4 new rows" in capsys.readouterr().out
    assert skynomad("market", "export", "--output", str(tmp_path / "out.csv"), "--url", market_url) == 0
    assert (tmp_path / "out.csv").read_text() == trace.read_text()
    # the instant is the key: a sub-second row is its own observation, and re-importing adds nothing
    assert skynomad("market", "import", "--trace", str(tmp_path / "out.csv"), "--url", market_url) == 0
    assert "imported 0 new rows" in capsys.readouterr().out


@pytest.mark.parametrize("column", ["accelerator_count", "requested", "available"])
def test_integer_out_of_range_is_refused_naming_file_line_and_column(market_url, tmp_path, capsys, column):
    fields = ROW2.split(",")
    fields[COLUMNS.index(column)] = "99999999999999999999"
    trace = _write(tmp_path / "huge.csv", HEADER, ROW, ",".join(fields))
    assert skynomad("market", "import", "--trace", str(trace), "--url", market_url) == 2
    err = capsys.readouterr().err
    assert f"{trace}, line 3, column '{column}'" in err and "out of range" in err, err
    with MarketTable(market_url) as t:
        assert len(t.read()) == 0


def _large_trace(path: Path, zones: int = 12, steps: int = 5000) -> int:
    """zones × steps rows (60 000 by default: many insert batches), written fast; returns the row count."""
    start = pd.Timestamp("2025-10-04T00:00:00Z")
    times = (start + pd.to_timedelta(range(steps), unit="min") * 10).strftime("%Y-%m-%dT%H:%M:%SZ")
    frames = [
        pd.DataFrame(
            {
                "observed_at": times,
                "cloud": "gcp",
                "region": f"us-region{z}",
                "zone": f"us-region{z}-a",
                "instance_type": "a3-highgpu-1g",
                "accelerator": "H100",
                "accelerator_count": 1,
                "requested": 16,
                "available": [k % 17 for k in range(steps)],
                "spot_price": 2.5,
                "on_demand_price": 10.25,
            }
        )
        for z in range(zones)
    ]
    pd.concat(frames).to_csv(path, index=False)
    return zones * steps


def test_large_import_with_a_bad_last_row_writes_nothing(market_url, tmp_path, capsys):
    trace = tmp_path / "large.csv"
    rows = _large_trace(trace)
    with trace.open("a") as f:
        f.write("2030-01-01T00:00:00Z,gcp,us-region0,us-region0-a,a3-highgpu-1g,H100,1,16,17,2.5,10.25\n")
    assert skynomad("market", "import", "--trace", str(trace), "--url", market_url) == 2
    err = capsys.readouterr().err
    assert f"line {rows + 2}, column 'available'" in err and "nothing was written" in err, err
    with MarketTable(market_url) as t:
        assert len(t.read()) == 0


def test_large_import_failing_in_the_database_midway_writes_nothing(market_url, tmp_path, capsys):
    """All or nothing also when the database refuses a row after thousands went in: one transaction."""
    trace = tmp_path / "large.csv"
    rows = _large_trace(trace)
    table = MarketTable(market_url)
    table.create()
    refuse = "us-region7-a"  # rows of this zone come after 35 000 others
    with table.engine.begin() as conn:
        if table.dialect == "sqlite":
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse BEFORE INSERT ON market_observations "
                f"WHEN NEW.zone = '{refuse}' BEGIN SELECT RAISE(ABORT, 'refused by test trigger'); END"
            )
        else:
            conn.exec_driver_sql(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.zone = '{refuse}' THEN RAISE EXCEPTION 'refused by test trigger'; END IF; "
                "RETURN NEW; END $$"
            )
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse BEFORE INSERT ON market_observations FOR EACH ROW EXECUTE FUNCTION refuse()"
            )
    table.close()
    assert skynomad("market", "import", "--trace", str(trace), "--url", market_url) == 1
    assert "refused by test trigger" in capsys.readouterr().err
    with MarketTable(market_url) as t:
        assert len(t.read()) == 0
    assert rows == 60_000


# -- issue 31, break 7: a name that is not a zone name is not stored --------------------------------


@pytest.mark.parametrize(
    ("row", "where", "says"),
    [
        (ROW2.replace("us-central1-a", "ζ" * 300), "column 'zone'", "is not a zone name"),
        (ROW2.replace("us-central1-a", "us-central1-a" + "b" * 60), "column 'zone'", "is not a zone name"),
        (ROW2.replace("us-central1-a", "US-CENTRAL1-A").replace("us-central1,", "US-CENTRAL1,"), "column 'zone'", ""),
        (ROW2.replace("us-central1-a", "us-central١-a"), "column 'zone'", "lowercase ASCII"),  # a non-ASCII digit
        (ROW2.replace("us-central1-a", "us-east-1a").replace("us-central1,", "us-east-1,"), "column 'cloud'", "'aws'"),
        (ROW2.replace("gcp,us-central1,", "gcp,europe-west4,"), "column 'region'", "expected 'us-central1'"),
    ],
    ids=["300-unicode", "too-long", "uppercase", "unicode-digit", "wrong-cloud", "wrong-region"],
)
def test_break_7_market_import_refuses_a_name_that_is_not_a_zone_with_file_and_line(
    market_url, tmp_path, capsys, row, where, says
):
    kept = _write(tmp_path / "kept.csv", HEADER, ROW)
    assert skynomad("market", "import", "--trace", str(kept), "--url", market_url) == 0
    capsys.readouterr()
    bad = _write(tmp_path / "bad.csv", HEADER, ROW.replace("T00:10", "T00:05"), row)
    assert skynomad("market", "import", "--trace", str(bad), "--url", market_url) == 2
    err = capsys.readouterr().err
    assert f"{bad}, line 3, {where}" in err and says in err and "nothing was written" in err, err
    assert len(err) < 400, err  # a 300-character name is not echoed whole
    with MarketTable(market_url) as t:  # what was stored before is all still there, and nothing more
        assert t.zones() == ["us-central1-a"] and len(t.read()) == 1
