"""`skynomad market compact`: old rows that repeat their market's previous row go; no grid changes."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pytest

from airflow_provider_skynomad.cli.market import add_market_commands
from airflow_provider_skynomad.market.grid import build_grid
from airflow_provider_skynomad.market.store.retention import compact
from airflow_provider_skynomad.market.store.table import MarketTable

START = pd.Timestamp("2026-01-01T00:00:00Z")


def _rows(days: int = 10, markets: int = 3) -> pd.DataFrame:
    """Every 10 minutes; availability changes now and then, one market's price steps, one market stops early."""
    rng = np.random.default_rng(3)
    steps = days * 144
    frames = []
    for m in range(markets):
        available = np.repeat(rng.integers(0, 17, steps // 18 + 1), 18)[:steps]
        spot = np.where(np.arange(steps) < steps // 2, 2.0, 2.5) if m == 1 else np.full(steps, 1.5)
        n = steps if m != 2 else steps // 3  # market 2: last probed long before the cutoff
        frames.append(
            pd.DataFrame(
                {
                    "observed_at": START + pd.Timedelta(minutes=10) * np.arange(n),
                    "cloud": "gcp",
                    "region": f"r{m}",
                    "zone": f"r{m}-a",
                    "instance_type": "a3-highgpu-1g",
                    "accelerator": "H100",
                    "accelerator_count": 1,
                    "requested": 16,
                    "available": available[:n],
                    "spot_price": spot[:n],
                    "on_demand_price": 10.0,
                }
            )
        )
    return pd.concat(frames).sort_values(["observed_at", "zone"]).reset_index(drop=True)


def _grid_arrays(frame: pd.DataFrame) -> tuple:
    grid = build_grid(frame, step_hours=1 / 6)
    return grid.start, grid.keys, grid.available, grid.spot_usd_per_hour, grid.on_demand_usd_per_hour


def test_compaction_keeps_every_grid_value_recent_rows_and_each_markets_last_row(market_url):
    rows = _rows()
    with MarketTable(market_url) as table:
        table.append(rows)
        newest = table.latest_observed_at()
        dry = compact(table, keep_full_days=3, dry_run=True)
        assert table.count() == len(rows)
        report = compact(table, keep_full_days=3)
        assert report.deleted == dry.deleted > len(rows) // 2
        assert report.cutoff == newest - pd.Timedelta(days=3)
        after = table.read()
        assert table.count() == len(rows) - report.deleted
        assert compact(table, keep_full_days=3).deleted == 0  # idempotent
    cutoff = report.cutoff
    recent = rows[rows["observed_at"] >= cutoff].reset_index(drop=True)
    pd.testing.assert_frame_equal(after[after["observed_at"] >= cutoff].reset_index(drop=True), recent)
    before_grid, after_grid = _grid_arrays(rows), _grid_arrays(after)
    assert before_grid[:2] == after_grid[:2]
    for old, new in zip(before_grid[2:], after_grid[2:], strict=True):
        np.testing.assert_array_equal(old, new)
    for zone, group in rows.groupby("zone"):
        kept = after[after["zone"] == zone]
        assert kept["observed_at"].max() == group["observed_at"].max()  # last-observed time never moves
        old = group[group["observed_at"] < cutoff]
        hours = old["observed_at"].dt.floor("h").unique()
        assert set(hours) <= set(kept["observed_at"].dt.floor("h"))  # probe gaps stay visible hour by hour


def test_a_job_window_reaching_before_the_cutoff_sees_the_same_view(market_url):
    from airflow_provider_skynomad.market.source import MarketSource

    rows = _rows()
    now = rows["observed_at"].max() + pd.Timedelta(minutes=5)
    since = now - pd.Timedelta(days=6)
    with MarketTable(market_url) as table:
        table.append(rows)
        full = MarketSource(table, ["r0-a", "r1-a"], None, since, 1 / 6, 4).view(now)
        compact(table, keep_full_days=2)
        squeezed = MarketSource(table, ["r0-a", "r1-a"], None, since, 1 / 6, 4).view(now)
    np.testing.assert_array_equal(full._grid.available, squeezed._grid.available)
    np.testing.assert_array_equal(full._grid.spot_usd_per_hour, squeezed._grid.spot_usd_per_hour)
    assert full.source_key == squeezed.source_key


def _skynomad(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="skynomad")
    add_market_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.mark.parametrize("days", ["0.5", "nan", "inf", "-3"])
def test_compact_refuses_a_window_shorter_than_a_day(tmp_path, capsys, days):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    assert _skynomad("market", "compact", "--url", url, f"--keep-full-days={days}") == 2
    assert "--keep-full-days" in capsys.readouterr().err


def test_compact_command_reports_what_it_did(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    assert _skynomad("market", "compact", "--url", url) == 0
    assert "empty" in capsys.readouterr().out
    with MarketTable(url) as table:
        table.append(_rows())
    assert _skynomad("market", "compact", "--url", url, "--keep-full-days", "3", "--dry-run") == 0
    said = capsys.readouterr().out
    assert said.startswith("would delete ") and "older than 2026-01-07" in said
    assert _skynomad("market", "compact", "--url", url, "--keep-full-days", "3") == 0
    assert capsys.readouterr().out.startswith("deleted ")
