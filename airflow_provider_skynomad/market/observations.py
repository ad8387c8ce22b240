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
    out["observed_at"] = times

    for column in ("cloud", "region", "zone", "instance_type"):
        empty = out[column].astype(str).str.strip() == ""
        if empty.any():
            raise TraceError(f"{where.at(line(empty.idxmax()), column)}: empty value")

    for column in ("accelerator_count", "requested", "available"):
        values = pd.to_numeric(out[column], errors="coerce")
        bad = values.isna() | (values < 0) | (values != np.floor(values))
        if bad.any():
            i = bad.idxmax()
            raise TraceError(
                f"{where.at(line(i), column)}: expected a non-negative integer, got {frame[column].iloc[i]!r}"
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
    out["observed_at"] = pd.to_datetime(out["observed_at"], utc=True).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    out.to_csv(path, index=False, float_format="%.10g")
