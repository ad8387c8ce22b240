"""The vectorised grid rebuild against the rule it implements, market by market."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from airflow_provider_skynomad.market.grid import build_grid
from airflow_provider_skynomad.market.observations import read_observations

TRACE = Path(__file__).parents[3] / "airflow_provider_skynomad" / "data" / "gcp-h100-2025-first-week.csv.gz"


def _reference(frame: pd.DataFrame, grid) -> tuple[np.ndarray, np.ndarray]:
    """Per market, per tick: the last row at or before the tick's start (none before the first row)."""
    times = [grid.start + pd.Timedelta(hours=grid.step_hours) * k for k in range(grid.ticks)]
    available = np.zeros((grid.ticks, len(grid.markets)), dtype=np.int64)
    spot = np.full(available.shape, np.inf)
    for j, market in enumerate(grid.markets):
        rows = frame[(frame["zone"] == market.zone) & (frame["instance_type"] == market.instance_type)]
        for k, at in enumerate(times):
            before = rows[rows["observed_at"] <= at]
            if len(before):
                available[k, j] = before["available"].iloc[-1]
                spot[k, j] = before["spot_price"].iloc[-1]
    return available, spot


@pytest.fixture(scope="module")
def trace() -> pd.DataFrame:
    frame = read_observations(TRACE)
    return frame[frame["observed_at"] < frame["observed_at"].min() + pd.Timedelta(hours=8)].reset_index(drop=True)


@pytest.mark.parametrize("step_hours", [1 / 6, 0.07, 0.5])
def test_grid_holds_the_last_row_at_or_before_each_tick(trace, step_hours):
    # Two instance types, a market that starts late, and irregular times that fall between ticks.
    rng = np.random.default_rng(7)
    other = trace[trace["zone"] == "us-east4-a"].iloc[5:].assign(instance_type="a3-highgpu-2g")
    jitter = pd.to_timedelta(rng.integers(0, 600, len(other)), unit="s")
    other = other.assign(observed_at=other["observed_at"] + jitter, available=rng.integers(0, 17, len(other)))
    frame = pd.concat([trace, other]).sort_values("observed_at", kind="stable", ignore_index=True)
    grid = build_grid(frame, step_hours=step_hours)
    available, spot = _reference(frame, grid)
    assert len(grid.markets) == trace["zone"].nunique() + 1
    np.testing.assert_array_equal(grid.available, available)
    np.testing.assert_array_equal(grid.spot_usd_per_hour, spot)
    late = grid.keys.index("us-east4-a:a3-highgpu-2g")
    assert np.isinf(grid.on_demand_usd_per_hour[0, late])  # nothing known before its first row


def test_extending_a_grid_by_appended_rows_gives_the_grid_built_from_all_of_them(trace):
    from airflow_provider_skynomad.market.grid import extend_grid

    frame = trace.sort_values(["observed_at", "zone"], ignore_index=True)
    # The window grows by the rows newer than all it holds, as a job's reads append them (whole
    # probe rounds, so each cut falls between two times); some steps add no tick.
    times = frame["observed_at"]
    cuts = [int(times.searchsorted(times.iloc[0] + pd.Timedelta(minutes=m), side="right")) for m in (30, 40, 50, 90)]
    cuts += [int(times.searchsorted(times.iloc[0] + pd.Timedelta(hours=h), side="right")) for h in (2, 3.5, 5)]
    grid, built = build_grid(frame.iloc[:39], step_hours=0.25), 39
    for end in [*cuts, len(frame)]:
        part = frame.iloc[:end]
        grid = extend_grid(grid, part, built)
        built = end
        whole = build_grid(part, step_hours=0.25)
        assert grid.ticks == whole.ticks
        np.testing.assert_array_equal(grid.available, whole.available)
        np.testing.assert_array_equal(grid.spot_usd_per_hour, whole.spot_usd_per_hour)
        np.testing.assert_array_equal(grid.on_demand_usd_per_hour, whole.on_demand_usd_per_hour)
    unknown = pd.concat([frame.iloc[:39], frame.iloc[[-1]].assign(zone="nowhere-a")], ignore_index=True)
    assert extend_grid(build_grid(frame.iloc[:39], step_hours=0.25), unknown, 39) is None
