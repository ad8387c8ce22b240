"""The job runtime's units against a scripted fake cloud and a real market database (SQLite here,
PostgreSQL where a test asks for `market_url`): no Airflow scheduler, no workload processes."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.support.airflow_env import GCP_TRACE, seed_market  # noqa: F401 - also sets Airflow's test env
from tests.support.fakes import FakeCloud


@pytest.fixture(scope="session")
def gcp_frame():
    from airflow_provider_skynomad.market.observations import read_observations

    return read_observations(GCP_TRACE)


@pytest.fixture
def now(gcp_frame):
    return gcp_frame["observed_at"].min() + pd.Timedelta(hours=60)


@pytest.fixture
def cloud(tmp_path, monkeypatch, gcp_frame, now):
    """A fake cloud whose clock starts at `now`, over a market table holding 48 h of history."""
    return use_cloud(FakeCloud(now), tmp_path, monkeypatch, gcp_frame, now)


def use_cloud(fake, tmp_path, monkeypatch, gcp_frame, now):
    """`fake` as every connection's cloud, over a market table holding 48 h of history before `now`."""
    monkeypatch.setenv("SKYNOMAD_HOME", str(tmp_path / "skynomad"))
    seed_market(gcp_frame, until=now + pd.Timedelta(seconds=1))
    monkeypatch.setattr("airflow_provider_skynomad.hooks.skynomad.make_cloud", lambda config: fake)
    return fake


class Started:
    """A job started on the worker side (first launch, record handed to the job table), ready for its controller."""

    def __init__(
        self,
        cloud,
        policy: str = "skynomad",
        work_hours: float = 6.0,
        deadline_hours: float = 10.0,
        instances: int = 1,
        fleet_aware: bool = True,
        run: int = 1,
    ):
        import logging

        from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig
        from airflow_provider_skynomad.jobs.contract import TaskIdentity
        from airflow_provider_skynomad.jobs.params import JobParams
        from airflow_provider_skynomad.jobs.record import StateStore
        from airflow_provider_skynomad.jobs.run import JobRun
        from airflow_provider_skynomad.jobs.table import JobTable
        from airflow_provider_skynomad.jobs.worker import JobWorker
        from airflow_provider_skynomad.market.store.table import MarketTable

        self.cloud, self.config = cloud, SkyNomadConfig.default()
        self.log = logging.getLogger("test.jobs")
        self.params = JobParams(
            work_hours=work_hours,
            command=(),  # the bundled workload, paced to the declared work
            env={},
            instances=instances,
            fleet_aware=fleet_aware,
            cold_start_hours=0.2,
            checkpoint_gb=50.0,
            policy=policy,
            policy_params={},
            decision_step_minutes=10.0,
            market_lookback_hours=72.0,
            max_market_age=pd.Timedelta(hours=2).to_pytimedelta(),
        )
        task = TaskIdentity("dag", f"manual__{run}", "job", -1, 1, 2, f"0190a7e2-0000-7000-8000-{run:012d}")
        self.task = task
        self.jobs = JobTable(self.config.market_url)
        run = JobRun(
            params=self.params, config=self.config, cloud=cloud, store=StateStore(None), task=task, log=self.log,
            table_factory=lambda: MarketTable(self.config.market_url),
        )  # fmt: skip
        worker = JobWorker(run=run, conn_id="skynomad_default", handoff=self.jobs)
        self.args = worker.start(deadline_hours).args
        worker.close()
        self.table = MarketTable(self.config.market_url)
        self.table.create()

    def worker(self, try_number: int = 2, max_tries: int = 2):
        """A later try of the same task on the worker (a retry; a clear when `max_tries` grew)."""
        from dataclasses import replace

        from airflow_provider_skynomad.jobs.record import StateStore
        from airflow_provider_skynomad.jobs.run import JobRun
        from airflow_provider_skynomad.jobs.table import JobTable
        from airflow_provider_skynomad.jobs.worker import JobWorker

        task = replace(self.task, try_number=try_number, max_tries=max_tries)
        run = JobRun(
            params=self.params, config=self.config, cloud=self.cloud, store=StateStore(None), task=task,
            log=self.log, table_factory=lambda: self.table,
        )  # fmt: skip
        return JobWorker(run=run, conn_id="skynomad_default", handoff=JobTable(self.config.market_url))

    def controller(self):
        from airflow_provider_skynomad.jobs.controller import Controller

        return Controller.open(self.args, self.config, self.cloud, self.table, self.log)

    def record(self):
        return self.jobs.load(self.args.job_id).record

    def close(self):
        self.table.close()
        self.jobs.close()


@pytest.fixture
def started(cloud):
    """A factory of started jobs, closed after the test."""
    made = []

    def start(**kwargs) -> Started:
        made.append(Started(cloud, **kwargs))
        return made[-1]

    yield start
    for job in made:
        job.close()
