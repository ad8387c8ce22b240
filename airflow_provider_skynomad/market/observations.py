"""The market-observation format (docs/market.md): one row per (time, zone, instance type).

The same columns are the trace file format and the market table's rows, so a trace is
a dump of the table. Everything here validates at the boundary and names file, line and
column in its errors, because a bad trace silently skews every cost the simulator reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

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
INTEGER_COLUMNS = ("accelerator_count", "requested", "available")
MAX_INTEGER = 2**31 - 1
"""Largest count the format accepts: the market table stores the integer columns as SQL INTEGER,
32-bit on PostgreSQL, so a larger value could be read from a file but never imported."""


class TraceError(ValueError):
    """A trace or market-table dump is malformed; the message says where and how to fix it."""


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


def read_observations(path: str | Path, zones: list[str] | None = None) -> pd.DataFrame:
    """Read and validate a trace CSV (optionally gzipped); optionally keep only `zones`."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, EOFError, OSError) as exc:
        raise TraceError(f"{path}: not a readable CSV trace ({exc})") from exc
    # Blank lines are dropped, but errors keep the line numbers an editor shows (header = line 1).
    blank = (frame == "").all(axis=1) if len(frame.columns) else pd.Series(False, index=frame.index)
    lines = (np.flatnonzero(~blank.to_numpy()) + 2).tolist()
    frame = frame[~blank].reset_index(drop=True)
    frame = validate_observations(frame, source=str(path), line_numbers=lines)
    return select_zones(frame, zones, source=str(path))


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
    bad = times.isna()
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


def write_observations(frame: pd.DataFrame, path: str | Path) -> None:
    """Write rows in the canonical format (gzip when the name ends in .gz)."""
    out = frame[COLUMNS].copy()
    out["observed_at"] = format_times(out["observed_at"])
    out.to_csv(path, index=False, float_format="%.10g")


def format_times(values: pd.Series) -> pd.Series:
    """Canonical UTC text: 2025-10-04T00:10:00Z, with a fraction only when there is one and
    without trailing zeros (00:10:00.123456Z, 00:10:00.5Z), so that a trace's sub-second times
    come back from the market table as they went in."""
    times = pd.to_datetime(values, utc=True)
    seconds = times.dt.floor("s")
    nanos = pd.Series((times - seconds).to_numpy().astype("timedelta64[ns]").astype(np.int64), index=times.index)
    digits = nanos.astype(str).str.zfill(9).str.rstrip("0")
    fraction = ("." + digits).where(nanos != 0, "")
    return seconds.dt.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"
