"""The vectorised grid rebuild against the rule it implements, market by market."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from airflow_provider_skynomad.market.grid import build_grid
from airflow_provider_skynomad.market.observations import read_observations

TRACE = Path(__file__).parents[2] / "airflow_provider_skynomad" / "data" / "gcp-h100-2025-first-week.csv.gz"


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
