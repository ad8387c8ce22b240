"""Through the operator: a job queued minutes after a probe run that took many cloud hours starts."""

from __future__ import annotations

import pandas as pd
import pytest

from airflow_provider_skynomad.market.freshness import CompletedRound
from airflow_provider_skynomad.market.store.rounds import ProbeRoundTable
from airflow_provider_skynomad.market.store.table import MarketTable

from .test_operator import FakeStore, cloud, context_for, defer, make_op, now  # noqa: F401 - fixtures


def stamp_round(planned: pd.Timestamp, ended: pd.Timestamp) -> None:
    """The probe DAG's round of every market in the table, as its region tasks stamp it."""
    with MarketTable() as table:
        rows = table.read()
        markets = rows.drop_duplicates(["zone", "instance_type"])
        done = [
            CompletedRound(r.cloud, r.region, r.zone, r.instance_type, planned.to_pydatetime(), ended.to_pydatetime())
            for r in markets.itertuples()
        ]
        ProbeRoundTable(market=table).record(done)


def test_a_slow_probe_run_then_a_job_minutes_later_starts(cloud, now):  # noqa: F811 - fixtures
    # the probe run began at `now` and took 4.5 cloud hours on a busy box; the job's check comes half
    # an hour later: its newest rows are 5 h old, over the default 2 h max_market_age
    stamp_round(now, now + pd.Timedelta(hours=4.5))
    cloud.hours = 5.0
    trigger = defer(make_op(), context_for(FakeStore()))
    assert trigger.args.job_id and len(cloud.launches) == 1


def test_when_the_probe_dag_stopped_the_job_is_refused_naming_the_fix(cloud, now):  # noqa: F811 - fixtures
    stamp_round(now, now + pd.Timedelta(hours=0.1))
    cloud.hours = 5.0  # two of its 0.1 h paces, and max_market_age, long gone
    from airflow_provider_skynomad.operators.skynomad import SkyNomadInputError

    with pytest.raises(SkyNomadInputError, match="unpause it or see why its runs fail; nothing was launched"):
        make_op().execute(context_for(FakeStore()))
    assert cloud.launches == []
