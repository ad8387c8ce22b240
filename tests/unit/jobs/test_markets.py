"""The one place a job's market view is built: a market input the job cannot plan with fails it in
words, and an observation that cannot be shared never does."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from airflow_provider_skynomad.jobs.carry_out import Observation
from airflow_provider_skynomad.jobs.errors import SkyNomadJobFailed
from airflow_provider_skynomad.jobs.markets import JobMarkets
from airflow_provider_skynomad.jobs.stale import StaleGuard
from airflow_provider_skynomad.market.source import MarketInputError
from airflow_provider_skynomad.planner.job import JobState


class NoMarkets:
    def view(self, until):
        raise MarketInputError("no market row for us-east4-a since 2026-12-01")


def test_a_market_input_the_job_cannot_plan_with_fails_it_in_words(cloud):
    markets = JobMarkets(job_id="j", table=None, source=NoMarkets(), stale=StaleGuard())
    with pytest.raises(SkyNomadJobFailed, match="no market row for us-east4-a"):
        markets.view(cloud, state=JobState(), group=None, start_hours=0.0, instances=1)


def test_an_observation_that_cannot_be_shared_is_said_and_the_job_goes_on(caplog):
    markets = JobMarkets(job_id="j", table=None, source=NoMarkets(), stale=StaleGuard())
    with caplog.at_level(logging.WARNING, logger="test.markets"):
        markets.share([Observation("m", 0, pd.Timestamp("2026-12-01", tz="UTC"))], logging.getLogger("test.markets"))
    assert "could not record an observation of m" in caplog.text


def test_the_jobs_own_preemption_reaches_the_market_table(started, cloud):
    job = started()
    run = job.controller().steps.run
    cloud.hours = 0.5  # after the launch's own observation
    now = cloud.now_timestamp()
    market = run.record.state.running.market
    before = len(run.table.read(until=now + pd.Timedelta(seconds=1)))
    run.markets.share([Observation(market, 0, now)], logging.getLogger("test.markets"))
    assert len(run.table.read(until=now + pd.Timedelta(seconds=1))) == before + 1
