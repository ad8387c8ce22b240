"""A SkyNomadOperator deadline resolved to cloud hours (jobs/deadline.py): relative deadlines count from
the run's start, absolute ones on the cloud's clock, anything else refused before a launch."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pandas as pd
import pytest

from airflow_provider_skynomad.jobs.deadline import deadline_from_alert, reserve_hours, resolve_deadline_hours
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.params import MAX_HOURS

REAL = SimpleNamespace(cloud="aws", wall_seconds_per_cloud_hour=3600.0)
SIMULATED = SimpleNamespace(cloud="simulated", wall_seconds_per_cloud_hour=12.0)  # 300x


class Clock:
    """A cloud whose clock reads `at` (the simulated cloud's replayed trace time)."""

    def __init__(self, at: str):
        self.at = pd.Timestamp(at)

    def now_timestamp(self) -> pd.Timestamp:
        return self.at


def started(ago: timedelta) -> dict:
    """A task context whose DAG run started `ago` before now."""
    return {"dag_run": SimpleNamespace(start_date=datetime.now(UTC) - ago, run_after=None)}


def test_an_absolute_deadline_on_the_simulated_cloud_is_read_on_its_clock():
    cloud = Clock("2025-10-07T04:00:00Z")
    assert resolve_deadline_hours("2025-10-07T10:00:00Z", None, {}, SIMULATED, cloud) == 6.0
    assert resolve_deadline_hours(datetime(2025, 10, 7, 1, tzinfo=UTC), None, {}, SIMULATED, cloud) == -3.0


def test_a_relative_deadline_counts_from_the_runs_start():
    """Two hours of a five-hour deadline were spent before the task ran: about three are left."""
    hours = resolve_deadline_hours(timedelta(hours=5), None, started(timedelta(hours=2)), REAL, None)
    assert 2.9 < hours <= 3.0
    assert 2.9 < resolve_deadline_hours(5, None, started(timedelta(hours=2)), REAL, None) <= 3.0


def test_a_deadline_long_past_is_returned_as_it_is_for_the_runner_to_say():
    assert resolve_deadline_hours(-2 * MAX_HOURS, None, {}, REAL, None) == -2 * MAX_HOURS


@pytest.mark.parametrize(
    ("deadline", "said"),
    [
        (MAX_HOURS + 1, "may be at most a year"),
        (timedelta(days=400), "may be at most a year"),
        (math.nan, "got NaN"),
        ("next tuesday", "is not an ISO 8601 datetime"),
        (datetime(2025, 10, 7, 10), "has no time zone"),
        (True, "must be a datetime, timedelta or ISO string, got bool"),
        (None, "no deadline"),
    ],
)
def test_a_deadline_no_job_can_keep_is_refused(deadline, said):
    with pytest.raises(SkyNomadInputError, match=said):
        resolve_deadline_hours(deadline, SimpleNamespace(deadline=None), {}, REAL, None)


class FixedDatetimeDeadline:
    def __init__(self, at: datetime):
        self._datetime = at


class DagRunQueuedAtDeadline:
    pass


class VariableDeadline:
    pass


def test_the_earliest_of_the_dags_alerts_is_the_deadline_and_unreadable_ones_are_skipped():
    at = datetime(2025, 10, 7, 12, tzinfo=UTC)
    run_start = datetime(2025, 10, 7, 8, tzinfo=UTC)
    context = {"dag_run": SimpleNamespace(start_date=run_start)}
    dag = SimpleNamespace(
        deadline=[
            SimpleNamespace(reference=FixedDatetimeDeadline(at), interval=timedelta(hours=1)),  # 13:00
            SimpleNamespace(reference=DagRunQueuedAtDeadline(), interval=timedelta(hours=3)),  # 11:00: earliest
            SimpleNamespace(reference=VariableDeadline(), interval=timedelta(minutes=1)),  # not ours to resolve
            SimpleNamespace(reference=DagRunQueuedAtDeadline(), interval=None),  # a variable interval
        ]
    )
    assert deadline_from_alert(dag, context) == (run_start, timedelta(hours=3), None)
    single = SimpleNamespace(deadline=SimpleNamespace(reference=FixedDatetimeDeadline(at), interval=timedelta(0)))
    assert deadline_from_alert(single, context) == (None, None, at)
    assert deadline_from_alert(SimpleNamespace(), context) == (None, None, None)


def test_the_downstream_reserve_is_in_cloud_hours():
    assert reserve_hours(None, REAL) == 0.0
    assert reserve_hours(timedelta(minutes=30), REAL) == 0.5
    assert reserve_hours(timedelta(minutes=1), SIMULATED) == 5.0  # a wall minute is five cloud hours at 300x
    assert reserve_hours("auto", REAL, downstream_median_seconds=1800) == 0.5
    assert reserve_hours("auto", REAL) == 0.0  # nothing measured yet


@pytest.mark.parametrize("reserve", ["soon", 30, -timedelta(minutes=1)])
def test_a_reserve_that_is_no_duration_is_refused(reserve):
    with pytest.raises(SkyNomadInputError, match="downstream_reserve must"):
        reserve_hours(reserve, REAL)
