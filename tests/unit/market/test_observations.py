"""The market-observation format (docs/market.md): reading, validation errors naming file, line and column."""

from __future__ import annotations

import gzip
import re

import pandas as pd
import pytest

from airflow_provider_skynomad.market.observations import (
    COLUMNS,
    TraceError,
    read_observations,
    validate_observations,
    write_observations,
)

HEADER = ",".join(COLUMNS)


def row(
    t: str,
    zone: str = "us-central1-a",
    requested="16",
    available="16",
    spot="2.3724",
    on_demand="10.3157",
    region: str = "us-central1",
    instance_type: str = "a3-highgpu-1g",
) -> str:
    return f"{t},gcp,{region},{zone},{instance_type},H100,1,{requested},{available},{spot},{on_demand}"


def write(tmp_path, lines: list[str], name: str = "trace.csv", header: str = HEADER):
    path = tmp_path / name
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


def good_lines() -> list[str]:
    return [
        row("2025-10-04T00:00:00Z"),
        row("2025-10-04T00:00:00Z", zone="us-west1-a", region="us-west1", available="0"),
        row("2025-10-04T00:10:00Z"),
        row("2025-10-04T00:10:00Z", zone="us-west1-a", region="us-west1", available="3"),
    ]


def assert_where(exc: TraceError, path, line: int | None, column: str | None) -> None:
    message = str(exc)
    assert str(path) in message, message
    if line is not None:
        assert re.search(rf"\bline {line}\b", message), message
    if column is not None:
        assert repr(column) in message or column in message, message


def test_reads_a_good_trace_with_types(tmp_path):
    frame = read_observations(write(tmp_path, good_lines()))
    assert list(frame.columns) == COLUMNS
    assert len(frame) == 4
    assert str(frame["observed_at"].dt.tz) == "UTC"
    assert frame["available"].tolist() == [16, 0, 16, 3]
    assert frame["available"].dtype.kind == "i"
    assert frame["spot_price"].dtype.kind == "f"
    assert frame["spot_price"].iloc[0] == pytest.approx(2.3724)


def test_reads_gzip_and_round_trips_through_write(tmp_path):
    frame = read_observations(write(tmp_path, good_lines()))
    out = tmp_path / "copy.csv.gz"
    write_observations(frame, out)
    with gzip.open(out, "rt") as handle:
        assert handle.readline().strip() == HEADER
    again = read_observations(out)
    pd.testing.assert_frame_equal(frame, again)


def test_times_with_offsets_are_converted_to_utc(tmp_path):
    frame = read_observations(write(tmp_path, [row("2025-10-04T02:00:00+02:00"), row("2025-10-04T00:10:00Z")]))
    assert frame["observed_at"].tolist() == [
        pd.Timestamp("2025-10-04T00:00:00Z"),
        pd.Timestamp("2025-10-04T00:10:00Z"),
    ]


def test_missing_columns_are_named(tmp_path):
    header = HEADER.replace(",spot_price", "")
    lines = [",".join(p for i, p in enumerate(r.split(",")) if i != 9) for r in good_lines()]
    path = write(tmp_path, lines, header=header)
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, line=1, column=None)
    assert "spot_price" in str(exc.value)
    assert "on_demand_price" not in str(exc.value).split("expected header")[0]


@pytest.mark.parametrize(
    "bad_line, line, column",
    [
        (row("04/10/2025 00:20"), 4, "observed_at"),
        (row("yesterday"), 4, "observed_at"),
        (row("now"), 4, "observed_at"),  # pandas reads these two as the wall clock
        (row(" today"), 4, "observed_at"),
        (row(""), 4, "observed_at"),
        (row("2025-10-04T00:20:00Z", spot="-0.5"), 4, "spot_price"),
        (row("2025-10-04T00:20:00Z", spot=""), 4, "spot_price"),
        (row("2025-10-04T00:20:00Z", spot="abc"), 4, "spot_price"),
        (row("2025-10-04T00:20:00Z", on_demand="-3"), 4, "on_demand_price"),
        (row("2025-10-04T00:20:00Z", on_demand=""), 4, "on_demand_price"),
        (row("2025-10-04T00:20:00Z", on_demand="nan"), 4, "on_demand_price"),
        (row("2025-10-04T00:20:00Z", on_demand="inf"), 4, "on_demand_price"),
        (row("2025-10-04T00:20:00Z", requested="4", available="5"), 4, "available"),
        (row("2025-10-04T00:20:00Z", available=""), 4, "available"),
        (row("2025-10-04T00:20:00Z", available="-1"), 4, "available"),
        (row("2025-10-04T00:20:00Z", requested="2.5"), 4, "requested"),
        (row("2025-10-04T00:20:00Z", zone=""), 4, "zone"),
    ],
)
def test_bad_values_name_file_line_and_column(tmp_path, bad_line, line, column):
    path = write(tmp_path, [row("2025-10-04T00:00:00Z"), row("2025-10-04T00:10:00Z"), bad_line])
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, line, column)


def test_unsorted_rows_of_one_zone_are_reported_at_the_row_going_back(tmp_path):
    lines = [
        row("2025-10-04T00:00:00Z"),
        row("2025-10-04T00:10:00Z", zone="us-west1-a", region="us-west1"),
        row("2025-10-04T00:20:00Z"),
        row("2025-10-04T00:00:00Z", zone="us-west1-a", region="us-west1"),  # line 5: goes back in time
    ]
    path = write(tmp_path, lines)
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, 5, "observed_at")
    assert "us-west1-a" in str(exc.value)


def test_interleaved_zones_sorted_per_zone_are_fine(tmp_path):
    lines = [
        row("2025-10-04T00:10:00Z", zone="us-west1-a", region="us-west1"),
        row("2025-10-04T00:00:00Z"),  # earlier than the previous line, but another zone
        row("2025-10-04T00:20:00Z", zone="us-west1-a", region="us-west1"),
        row("2025-10-04T00:10:00Z"),
    ]
    assert len(read_observations(write(tmp_path, lines))) == 4


def test_duplicate_rows_of_one_zone_are_reported(tmp_path):
    lines = [
        row("2025-10-04T00:00:00Z"),
        row("2025-10-04T00:00:00Z", zone="us-west1-a", region="us-west1"),
        row("2025-10-04T00:00:00Z", instance_type="a3-highgpu-8g"),  # same zone, another type: fine
        row("2025-10-04T00:00:00Z", zone="us-west1-a", region="us-west1"),  # line 5: duplicate
    ]
    path = write(tmp_path, lines)
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, 5, "observed_at")
    assert "duplicate" in str(exc.value)


def test_same_instant_written_differently_is_a_duplicate(tmp_path):
    path = write(tmp_path, [row("2025-10-04T00:00:00Z"), row("2025-10-04T02:00:00+02:00")])
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, 3, "observed_at")


@pytest.mark.parametrize("zones", [["nowhere-1a"], ["us-central1-a", "nowhere-1a"]])
def test_zone_filter_naming_unknown_zones_fails(tmp_path, zones):
    path = write(tmp_path, good_lines())
    with pytest.raises(TraceError) as exc:
        read_observations(path, zones)
    assert str(path) in str(exc.value)
    assert "nowhere-1a" in str(exc.value)
    assert "us-west1-a" in str(exc.value)  # lists the zones it does have


def test_zone_filter_keeps_only_those_zones(tmp_path):
    frame = read_observations(write(tmp_path, good_lines()), ["us-west1-a"])
    assert frame["zone"].unique().tolist() == ["us-west1-a"]
    assert frame.index.tolist() == [0, 1]


def test_missing_file_and_header_only_file(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        read_observations(tmp_path / "absent.csv")
    path = write(tmp_path, [])
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert str(path) in str(exc.value)


def test_validate_names_the_given_source_on_in_memory_frames():
    frame = pd.DataFrame([r.split(",") for r in good_lines()], columns=COLUMNS)
    frame.loc[2, "spot_price"] = "-1"
    with pytest.raises(TraceError) as exc:
        validate_observations(frame, source="market table")
    assert str(exc.value).startswith("market table, line 4, column 'spot_price'")


def test_empty_file_is_a_trace_error_naming_the_file(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert str(path) in str(exc.value)


def test_line_numbers_count_blank_lines_as_an_editor_does(tmp_path):
    path = tmp_path / "trace.csv"
    # line 1 header, 2 row, 3 blank, 4 row, 5 bad row
    path.write_text(
        "\n".join(
            [
                HEADER,
                row("2025-10-04T00:00:00Z"),
                "",
                row("2025-10-04T00:10:00Z"),
                row("2025-10-04T00:20:00Z", spot="-1"),
            ]
        )
        + "\n"
    )
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, 5, "spot_price")


def test_the_bundled_gcp_trace_validates():
    from importlib import resources

    path = resources.files("airflow_provider_skynomad") / "data" / "gcp-h100-2025-first-week.csv.gz"
    frame = read_observations(str(path))
    assert frame["zone"].nunique() == 13
    assert (frame["available"] <= frame["requested"]).all()
    assert pd.Timestamp("2025-10-04", tz="UTC") <= frame["observed_at"].min() < pd.Timestamp("2025-10-05", tz="UTC")


@pytest.mark.parametrize("column", ["accelerator_count", "requested", "available"])
@pytest.mark.parametrize(
    "value",
    [
        "99999999999999999999",  # beyond uint64: parsed as a float, which int64 would wrap
        "9223372036854775808",  # 2**63: parsed as uint64, which int64 would wrap
        "2147483648",  # 2**31: fits int64, but not the market table's INTEGER on PostgreSQL
        "1e20",
    ],
)
def test_integers_out_of_range_name_file_line_and_column(tmp_path, column, value):
    fields = row("2025-10-04T00:20:00Z").split(",")
    fields[COLUMNS.index(column)] = value  # checked before available ≤ requested
    path = write(tmp_path, [row("2025-10-04T00:00:00Z"), row("2025-10-04T00:10:00Z"), ",".join(fields)])
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, 4, column)
    assert "out of range" in str(exc.value) and value in str(exc.value)


@pytest.mark.parametrize("column", ["accelerator_count", "requested", "available"])
def test_integers_far_below_zero_name_file_line_and_column(tmp_path, column):
    fields = row("2025-10-04T00:20:00Z").split(",")
    fields[COLUMNS.index(column)] = "-99999999999999999999"
    path = write(tmp_path, [row("2025-10-04T00:00:00Z"), ",".join(fields)])
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, 3, column)


def test_largest_integer_is_kept_exactly(tmp_path):
    from airflow_provider_skynomad.market.observations import MAX_INTEGER

    path = write(tmp_path, [row("2025-10-04T00:00:00Z", requested=str(MAX_INTEGER), available=str(MAX_INTEGER))])
    frame = read_observations(path)
    assert frame["requested"].tolist() == [MAX_INTEGER] and frame["available"].tolist() == [MAX_INTEGER]


def test_sub_second_times_are_written_back_as_read(tmp_path):
    times = [
        "2025-10-04T00:10:00.123456Z",
        "2025-10-04T00:10:01Z",
        "2025-10-04T00:10:02.5Z",
        "2025-10-04T00:10:03.000001Z",
    ]
    path = write(tmp_path, [row(t) for t in times])
    frame = read_observations(path)
    assert frame["observed_at"].iloc[0] == pd.Timestamp("2025-10-04T00:10:00.123456Z")
    write_observations(frame, tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text() == path.read_text()


def test_times_below_the_microsecond_name_file_line_and_column(tmp_path):
    path = write(tmp_path, [row("2025-10-04T00:00:00Z"), row("2025-10-04T00:10:00.123456789Z")])
    with pytest.raises(TraceError) as exc:
        read_observations(path)
    assert_where(exc.value, path, 3, "observed_at")
    assert "microsecond" in str(exc.value)
