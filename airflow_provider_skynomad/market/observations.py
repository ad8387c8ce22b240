"""The market-observation format (docs/market.md): one row per (time, zone, instance type).

The same columns are the trace file format and the market table's rows, so a trace is
a dump of the table. Everything here validates at the boundary and names file, line and
column in its errors, because a bad trace silently skews every cost the simulator reports.
"""

from __future__ import annotations

import csv
import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from airflow_provider_skynomad.exceptions import TraceError
from airflow_provider_skynomad.market.trace_lines import LineBoundError, line_of, open_bounded
from airflow_provider_skynomad.market.zone_names import zone_problem

COLUMNS = [
    "observed_at",
    "cloud",
    "region",
    "zone",
    "instance_type",
    "accelerator",
    "accelerator_count",
    "requested",
    "available",
    "spot_price",
    "on_demand_price",
]
KEY = ["zone", "instance_type", "observed_at"]
TIME_ORDER = ("observed_at", "zone", "instance_type")
"""The key's columns in time order, a sorted trace's order (and the market table's time index)."""
INTEGER_COLUMNS = ("accelerator_count", "requested", "available")
_CONTROL = r"[\x00-\x1f\x7f]"
MAX_INTEGER = 2**31 - 1
"""Largest count the format accepts: the market table stores the integer columns as SQL INTEGER,
32-bit on PostgreSQL, so a larger value could be read from a file but never imported."""


@dataclass(frozen=True)
class _Where:
    source: str

    def at(self, line: int | None = None, column: str | None = None) -> str:
        parts = [self.source]
        if line is not None:
            parts.append(f"line {line}")
        if column is not None:
            parts.append(f"column {column!r}")
        return ", ".join(parts)


CHUNK_ROWS = 50_000
"""Rows per chunk when a trace is streamed (import, read): a 10⁶-row file never sits in memory as text."""
TEXT_COLUMNS = ("cloud", "region", "zone", "instance_type", "accelerator")
_READ_ERRORS = (
    pd.errors.ParserError,
    pd.errors.EmptyDataError,
    UnicodeDecodeError,
    EOFError,  # a truncated gzip stream
    OSError,  # gzip.BadGzipFile, unreadable file
    zlib.error,  # a corrupt gzip stream
    csv.Error,
)


def read_observations(path: str | Path, zones: list[str] | None = None) -> pd.DataFrame:
    """Read and validate a trace CSV (optionally gzipped); optionally keep only `zones`."""
    path = Path(path)
    frame = pd.concat(list(iter_observations(path)), ignore_index=True)
    return select_zones(frame, zones, source=str(path))


def iter_observations(
    path: str | Path, chunk_rows: int | None = None, zone_names: bool = False
) -> Iterator[pd.DataFrame]:
    """Validated chunks of a trace, in file order, checked across chunks as if read whole.

    Each chunk is typed as `validate_observations` returns it; a bad row anywhere raises
    TraceError naming file, line and column when its chunk is reached, so a caller that
    writes chunk by chunk must do it in one transaction (`MarketTable.append_chunks`).
    `zone_names`: also refuse a row whose zone is not an AWS or GCP zone name, or whose cloud or
    region is not that zone's (what is stored in the market table is planned on by every job).
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file")
    header = _check_header(path)
    where = _Where(str(path))
    last_seen: dict[tuple[str, str], pd.Timestamp] = {}
    first_line = 2  # file line of the chunk's first row (header = line 1)
    rows = 0
    handle = open_bounded(path)  # lines bounded, errors with their line (market/trace_lines.py)
    try:
        reader = pd.read_csv(
            handle,
            dtype=str,
            keep_default_na=False,
            skip_blank_lines=False,
            chunksize=chunk_rows or CHUNK_ROWS,
            encoding="utf-8",
            compression=None,
        )
        for raw in reader:
            # Blank lines are dropped, but errors keep the line numbers an editor shows.
            blank = (raw == "").all(axis=1) if len(raw.columns) else pd.Series(True, index=raw.index)
            lines = (np.flatnonzero(~blank.to_numpy()) + first_line).tolist()
            first_line += len(raw)
            chunk = raw[~blank].reset_index(drop=True)
            if chunk.empty and set(COLUMNS) <= set(chunk.columns):
                continue
            chunk = validate_observations(chunk, source=str(path), line_numbers=lines)
            if zone_names:
                check_zone_names(chunk, where, lines)
            _check_across_chunks(chunk, last_seen, where, lines)
            rows += len(chunk)
            yield chunk
    except LineBoundError as exc:
        raise TraceError(f"{where.at(exc.line)}: {exc}") from None
    except _READ_ERRORS as exc:
        reason = _reason(exc)
        raise TraceError(f"{path}, {line_of(reason, handle.raw.line)}: not a readable CSV trace ({reason})") from None
    finally:
        handle.close()
    if rows == 0:
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise TraceError(f"{where.at(line=1)}: missing columns {missing}; expected header {','.join(COLUMNS)}")
        raise TraceError(f"{where.at()}: no observation rows")


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: byte {exc.object[exc.start : exc.start + 1]!r} at offset {exc.start} of a block"
    return str(exc).strip() or type(exc).__name__


def _check_header(path: Path) -> list[str]:
    """The header's names, each once: with a name repeated, which column holds the value is ambiguous."""
    try:
        with open_bounded(path) as handle:
            first = handle.readline().decode("utf-8")
        names = next(csv.reader([first]), [])
    except LineBoundError as exc:
        raise TraceError(f"{path}, line {exc.line}: {exc}") from None
    except _READ_ERRORS as exc:
        raise TraceError(f"{path}, line 1: not a readable CSV trace ({_reason(exc)})") from None
    names = [name.strip() for name in names]
    repeated = sorted({name for name in names if name and names.count(name) > 1})
    if repeated:
        raise TraceError(f"{path}, line 1: column(s) {repeated} appear more than once in the header; keep one of each")
    return names


def _check_across_chunks(
    chunk: pd.DataFrame, last_seen: dict[tuple[str, str], pd.Timestamp], where: _Where, lines: list[int]
) -> None:
    """Duplicates and back-in-time rows whose earlier row sits in a previous chunk."""
    if last_seen:
        firsts = chunk.assign(_i=range(len(chunk))).drop_duplicates(["zone", "instance_type"], keep="first")
        for i, zone, instance_type, at in zip(
            firsts["_i"], firsts["zone"], firsts["instance_type"], firsts["observed_at"], strict=True
        ):
            before = last_seen.get((zone, instance_type))
            if before is None or at > before:
                continue
            if at == before:
                raise TraceError(
                    f"{where.at(lines[i], 'observed_at')}: duplicate observation for zone {zone!r} at {at.isoformat()}"
                )
            raise TraceError(
                f"{where.at(lines[i], 'observed_at')}: rows for zone {zone!r} go back in time ({at.isoformat()} "
                f"after {before.isoformat()}); sort the trace by observed_at"
            )
    lasts = chunk.drop_duplicates(["zone", "instance_type"], keep="last")
    last_seen.update(zip(zip(lasts["zone"], lasts["instance_type"], strict=True), lasts["observed_at"], strict=True))


def check_zone_names(frame: pd.DataFrame, where: _Where, lines: list[int]) -> None:
    """TraceError at the first row whose (cloud, region, zone) is not a real cloud's zone and region."""
    places = frame[["cloud", "region", "zone"]].drop_duplicates()
    bad = []
    for i, cloud, region, zone in zip(places.index, places["cloud"], places["region"], places["zone"], strict=True):
        problem = zone_problem(cloud, region, zone)
        if problem is not None:
            bad.append((int(i), problem))
    if bad:
        i, (column, words) = min(bad)
        raise TraceError(f"{where.at(lines[i], column)}: {words}")


def select_zones(frame: pd.DataFrame, zones: list[str] | None, source: str = "trace") -> pd.DataFrame:
    """Keep only `zones`, failing loudly on names the trace does not have."""
    if not zones:
        return frame
    known = set(frame["zone"].unique())
    unknown = [z for z in zones if z not in known]
    if unknown:
        raise TraceError(
            f"{source}: zone filter names {unknown} which the trace does not have; known zones: {sorted(known)}"
        )
    return frame[frame["zone"].isin(zones)].reset_index(drop=True)


def validate_observations(
    frame: pd.DataFrame, source: str = "trace", line_numbers: list[int] | None = None
) -> pd.DataFrame:
    """Check columns, types and ordering; return a typed copy (UTC timestamps, numbers).

    Line numbers in errors count the header as line 1, as an editor shows the file.
    """
    where = _Where(source)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise TraceError(f"{where.at(line=1)}: missing columns {missing}; expected header {','.join(COLUMNS)}")
    if frame.empty:
        raise TraceError(f"{where.at()}: no observation rows")
    frame = frame.reset_index(drop=True)
    out = frame[COLUMNS].copy()

    def line(i) -> int:
        """File line of row position i (header is line 1)."""
        return line_numbers[int(i)] if line_numbers is not None else int(i) + 2

    times = pd.to_datetime(out["observed_at"], utc=True, errors="coerce", format="ISO8601")
    # pandas reads "now" and "today" as the wall clock even in ISO 8601 mode; an ISO date starts with its year.
    bad = times.isna() | ~out["observed_at"].astype(str).str.lstrip().str.match(r"\d")
    if bad.any():
        i = bad.idxmax()
        raise TraceError(
            f"{where.at(line(i), 'observed_at')}: cannot parse time {frame['observed_at'].iloc[i]!r}; "
            "use ISO 8601 such as 2025-10-04T00:10:00Z"
        )
    fine = times.dt.nanosecond != 0
    if fine.any():
        i = fine.idxmax()
        raise TraceError(
            f"{where.at(line(i), 'observed_at')}: time {frame['observed_at'].iloc[i]!r} has digits below the "
            "microsecond; keep at most 6 fractional digits (the market table's precision)"
        )
    out["observed_at"] = times

    for column in ("cloud", "region", "zone", "instance_type"):
        empty = out[column].astype(str).str.strip() == ""
        if empty.any():
            raise TraceError(f"{where.at(line(empty.idxmax()), column)}: empty value")
    for column in TEXT_COLUMNS:
        # NUL cannot be stored in PostgreSQL text, and no cloud names a zone with control characters.
        text = out[column].astype(str)
        control = text.str.contains(_CONTROL, regex=True)
        if control.any():
            i = control.idxmax()
            raise TraceError(
                f"{where.at(line(i), column)}: {text.iloc[i]!r} holds a control character; names are printable text"
            )
        out[column] = text

    for column in INTEGER_COLUMNS:
        values = pd.to_numeric(out[column], errors="coerce")
        bad = values.isna() | (values < 0) | (values != np.floor(values))
        if bad.any():
            i = bad.idxmax()
            raise TraceError(
                f"{where.at(line(i), column)}: expected a non-negative integer, got {frame[column].iloc[i]!r}"
            )
        # Checked before the cast: int64 would wrap 1e20 to a negative number without a word.
        big = values > MAX_INTEGER
        if big.any():
            i = big.idxmax()
            raise TraceError(
                f"{where.at(line(i), column)}: {frame[column].iloc[i]!r} is out of range; expected an integer "
                f"from 0 to {MAX_INTEGER}"
            )
        out[column] = values.astype(np.int64)

    for column in ("spot_price", "on_demand_price"):
        values = pd.to_numeric(out[column], errors="coerce")
        bad = values.isna() | (values < 0) | ~np.isfinite(values)
        if bad.any():
            i = bad.idxmax()
            raise TraceError(
                f"{where.at(line(i), column)}: price must be a non-negative number of USD per "
                f"instance-hour, got {frame[column].iloc[i]!r}"
            )
        out[column] = values.astype(float)

    over = out["available"] > out["requested"]
    if over.any():
        i = over.idxmax()
        raise TraceError(
            f"{where.at(line(i), 'available')}: available={out['available'].iloc[i]} exceeds "
            f"requested={out['requested'].iloc[i]}"
        )

    key = ["zone", "instance_type"]
    previous = out.groupby(key, sort=False)["observed_at"].shift()
    dup = previous == out["observed_at"]
    if dup.any():
        i = dup.idxmax()
        raise TraceError(
            f"{where.at(line(i), 'observed_at')}: duplicate observation for zone "
            f"{out['zone'].iloc[i]!r} at {out['observed_at'].iloc[i].isoformat()}"
        )
    unsorted = previous > out["observed_at"]
    if unsorted.any():
        i = unsorted.idxmax()
        raise TraceError(
            f"{where.at(line(i), 'observed_at')}: rows for zone {out['zone'].iloc[i]!r} go back in "
            f"time ({out['observed_at'].iloc[i].isoformat()} after {previous.iloc[i].isoformat()}); "
            "sort the trace by observed_at"
        )
    return out


def write_observations(frame: pd.DataFrame, path_or_handle, header: bool = True) -> None:
    """Write rows in the canonical format (gzip when the name ends in .gz).

    Given an open text handle (`open_trace_for_writing`), append to it: streamed exports write
    the header with the first chunk only.
    """
    out = frame[COLUMNS].copy()
    out["observed_at"] = format_times(out["observed_at"])
    for column in ("spot_price", "on_demand_price"):
        values = out[column].to_numpy(dtype=float)
        if np.isfinite(values).all():
            # Formatted here, once per value: to_csv's float_format path costs ~10× more per value.
            out[column] = ["%.10g" % value for value in values.tolist()]  # noqa: UP031 - %g is the format
    out.to_csv(path_or_handle, index=False, header=header, float_format="%.10g", lineterminator="\n")


def open_trace_for_writing(path: str | Path):
    """A text handle for a trace file: gzip when the name ends in .gz, LF line ends."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8", newline="")
    return path.open("w", encoding="utf-8", newline="")


def format_times(values: pd.Series) -> pd.Series:
    """Canonical UTC text: 2025-10-04T00:10:00Z, with a fraction only when there is one and
    without trailing zeros (00:10:00.123456Z, 00:10:00.5Z), so that a trace's sub-second times
    come back from the market table as they went in."""
    times = pd.to_datetime(values, utc=True)
    nanos_of_second = pd.DatetimeIndex(times).as_unit("ns").asi8 % 1_000_000_000
    if not nanos_of_second.any():  # the usual trace: whole seconds, formatted in C
        naive = pd.DatetimeIndex(times).tz_localize(None).to_numpy()
        return pd.Series(np.char.add(np.datetime_as_string(naive, unit="s"), "Z"), index=times.index, dtype=object)
    seconds = times.dt.floor("s")
    nanos = pd.Series((times - seconds).to_numpy().astype("timedelta64[ns]").astype(np.int64), index=times.index)
    digits = nanos.astype(str).str.zfill(9).str.rstrip("0")
    fraction = ("." + digits).where(nanos != 0, "")
    return seconds.dt.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"
