"""The one place a job's market view is built, on the worker and in the trigger alike.

Why one place: the planner must see the same markets whoever asks. A view is the job's market
source read up to now, with stale markets showing no spot capacity (`jobs.stale`, said once per
spell) and, for a fleet-aware job, the deployment's other jobs laid on it (`jobs.fleet`). The
job's own launch outcomes and preemptions go back to the market table from here too
(`share`), so every job of the deployment learns from them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pandas as pd

from airflow_provider_skynomad.clouds.base import Cloud, GroupHandle
from airflow_provider_skynomad.jobs.carry_out import Observation
from airflow_provider_skynomad.jobs.errors import SkyNomadJobFailed
from airflow_provider_skynomad.jobs.fleet import FleetLens, own_row
from airflow_provider_skynomad.jobs.stale import StaleGuard, held_rows
from airflow_provider_skynomad.market.source import MarketInputError, MarketSource
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.job import JobState


@dataclass
class JobMarkets:
    """A job's market source, its stale-market guard and its reading of the fleet (None: it plans alone)."""

    job_id: str
    table: object  # the market table (`market.store.table.MarketTable`)
    source: MarketSource
    stale: StaleGuard
    fleet: FleetLens | None = None

    @classmethod
    def open(cls, table, record, *, step_hours: float, stale: StaleGuard, fleet_aware: bool) -> JobMarkets:
        """The markets of `record` (a `JobRecord`): its zones and instance types since its lookback."""
        from airflow_provider_skynomad.jobs.live import LiveStatusTable

        source = MarketSource(
            table,
            record.zones,
            record.instance_types,
            pd.Timestamp(record.market_since),
            step_hours,
            record.job.instances,
        )
        fleet = FleetLens(LiveStatusTable(market=table), record.job_id) if fleet_aware else None
        return cls(record.job_id, table, source, stale, fleet)

    def view(
        self, cloud: Cloud, *, state: JobState, group: GroupHandle | None, start_hours: float, instances: int
    ) -> tuple[MarketView, list[str]]:
        """(the planner's view now, warnings in plain words about markets gone stale: new ones only).

        `state` and `group` are where the job stands (its running market keeps its capacity;
        its own spot group is its row in the fleet's youngest-first order).
        """
        now = cloud.now_timestamp()
        try:
            view = self.source.view(now + pd.Timedelta(seconds=1))
        except MarketInputError as exc:
            raise SkyNomadJobFailed(str(exc)) from exc
        running = state.running.market if group is not None and state.running else None
        view, warnings = self.stale.apply(view, held_rows(self.source), now, running)
        if self.fleet is not None:
            own = own_row(self.job_id, state, group, start_hours, instances)
            view = self.fleet.apply(view, cloud, own)
        return view, warnings

    def share(self, observations: list[Observation], log: logging.Logger) -> None:
        """Our own launch outcomes and preemptions are market observations: share them via the table."""
        for seen in observations:
            try:
                view = self.source.view(seen.at + pd.Timedelta(seconds=1))  # the prices as observed
                row = self.source.observation_row(view, seen.market, seen.available, seen.at.floor("us"))
                self.table.append(pd.DataFrame([row]), source=f"SkyNomad job {self.job_id}")
            except Exception as exc:  # noqa: BLE001 - sharing an observation must never fail the job
                log.warning("could not record an observation of %s: %s", seen.market, exc)
