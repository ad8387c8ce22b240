"""The market table under writer processes at once (SQLite and PostgreSQL): five fresh interpreters,
each with its own MarketTable, appending in many small transactions, lose no row. The same with
threads, and the rest of the table: tests/unit/market/store/test_table.py."""

from __future__ import annotations

import multiprocessing

import pandas as pd
import pytest

from airflow_provider_skynomad.market.observations import read_observations
from airflow_provider_skynomad.market.store.table import MarketTable
from tests.support.market_rows import CONCURRENT_ZONES, TRACE, expected_concurrent, writer_process


@pytest.fixture(scope="module")
def trace() -> pd.DataFrame:
    return read_observations(TRACE)


def test_concurrent_writer_processes_lose_no_row(market_url, trace):
    # Fresh interpreters (engines must not cross a fork), forked from a server that has the heavy
    # imports done already, so the writers start together and the test stays fast.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["pandas", "sqlalchemy", "airflow_provider_skynomad.market.store.table"])
    barrier, results = context.Barrier(len(CONCURRENT_ZONES)), context.Queue()
    processes = [
        context.Process(target=writer_process, args=(market_url, z, barrier, results)) for z in CONCURRENT_ZONES
    ]
    for process in processes:
        process.start()
    counts = [results.get(timeout=60) for _ in processes]
    assert all(isinstance(c, int) for c in counts), counts
    for process in processes:
        process.join(timeout=10)
        assert process.exitcode == 0
    expected = expected_concurrent(trace)
    assert sum(counts) == len(expected)
    with MarketTable(market_url) as t:
        pd.testing.assert_frame_equal(t.read(), expected)
