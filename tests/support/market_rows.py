"""Rows of the bundled GCP trace for the market table's tests, and writers appending them at once.
Shared by tests/unit/market/store/test_table.py and tests/integration/market/test_table_processes.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from airflow_provider_skynomad.market.observations import read_observations
from airflow_provider_skynomad.market.store.table import MarketTable

TRACE = Path(__file__).parents[2] / "airflow_provider_skynomad" / "data" / "gcp-h100-2025-first-week.csv.gz"


def first_rows(trace: pd.DataFrame, zones: list[str], hours: float = 6) -> pd.DataFrame:
    """The first `hours` of `zones`, in file order."""
    start = trace["observed_at"].min()
    keep = trace["zone"].isin(zones) & (trace["observed_at"] < start + pd.Timedelta(hours=hours))
    return trace[keep].reset_index(drop=True)


CONCURRENT_ZONES = [
    ["us-central1-a", "us-west1-a"],
    ["europe-west1-c", "europe-west3-c"],
    ["asia-south2-b"],
    ["asia-southeast1-b", "asia-southeast1-c"],
    ["us-east4-b"],
]


def append_in_batches(url: str, zones: list[str], barrier, batch: int = 25) -> int:
    """One writer: its own MarketTable (as a mapped probe task would have), many small transactions."""
    rows = first_rows(read_observations(TRACE), zones, hours=24)
    barrier.wait()
    with MarketTable(url) as t:  # first use creates the schema: concurrent create() is exercised too
        return sum(t.append(rows.iloc[i : i + batch]) for i in range(0, len(rows), batch))


def expected_concurrent(trace: pd.DataFrame) -> pd.DataFrame:
    zones = [z for group in CONCURRENT_ZONES for z in group]
    return first_rows(trace, zones, hours=24).sort_values(["observed_at", "zone"], kind="stable").reset_index(drop=True)


def writer_process(url: str, zones: list[str], barrier, results) -> None:
    """A writer process's target (here, not in the test module: a child imports it by name, and
    tests.integration may resolve to another distribution's package)."""
    try:
        results.put(append_in_batches(url, zones, barrier))
    except BaseException as exc:  # report, so the test fails at once with the cause
        results.put(f"{type(exc).__name__}: {exc}")
        raise
