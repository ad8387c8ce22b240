"""Resolve a SkyNomadOperator deadline (datetime, timedelta, ISO string or the DAG's DeadlineAlert) to cloud hours."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from airflow_provider_skynomad.clouds.base import Cloud
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.params import MAX_HOURS


def resolve_deadline_hours(deadline, dag, context, config, cloud: Cloud) -> float:
    """Cloud hours from now to the deadline (negative when it is past); SkyNomadInputError for a
    deadline more than a year away, like work of more than a year (a deadline job, not a service).

    Relative deadlines count from their anchor (the run's start, or a DeadlineAlert's reference)
    and the wall time already spent since then is subtracted. The simulated cloud accelerates the
    *job*, not Airflow: its pre-task wall time (scheduling, upstream tasks) counts one to one, or a
    few seconds of ``dag.test()`` start-up would eat hours of an accelerated deadline. Absolute
    datetimes are read on the cloud's clock (the simulated cloud's replayed trace time).
    """
    now_wall = datetime.now(UTC)
    anchor, interval, absolute = None, None, None
    if deadline is None:
        anchor, interval, absolute = deadline_from_alert(dag, context)
        if interval is None and absolute is None:
            raise SkyNomadInputError(
                "no deadline: pass deadline= (datetime, timedelta or ISO string) or give the DAG a DeadlineAlert"
            )
    elif isinstance(deadline, timedelta):
        anchor, interval = _run_start(context) or now_wall, deadline
    elif isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
        if math.isnan(float(deadline)):
            raise SkyNomadInputError("deadline must be a number of hours, a datetime, timedelta or ISO string, got NaN")
        if float(deadline) > MAX_HOURS:
            raise _beyond_a_year(f"deadline {float(deadline):g} hours")
        if float(deadline) < -MAX_HOURS:
            return float(deadline)  # long past: the runner says so (a timedelta this long would overflow)
        anchor, interval = _run_start(context) or now_wall, timedelta(hours=float(deadline))
    elif isinstance(deadline, str):
        try:
            absolute = datetime.fromisoformat(deadline.replace("Z", "+00:00"))
        except ValueError:
            raise SkyNomadInputError(f"deadline {deadline!r} is not an ISO 8601 datetime") from None
    elif isinstance(deadline, datetime):
        absolute = deadline
    else:
        raise SkyNomadInputError(f"deadline must be a datetime, timedelta or ISO string, got {type(deadline).__name__}")
    if absolute is not None:
        if absolute.tzinfo is None:
            raise SkyNomadInputError(f"deadline {absolute!r} has no time zone; pass an aware datetime (UTC)")
        reference = cloud.now_timestamp().to_pydatetime() if config.cloud == "simulated" else now_wall
        return _within_a_year((absolute - reference).total_seconds() / 3600.0)
    spent = max(0.0, (now_wall - anchor).total_seconds())
    return _within_a_year((interval.total_seconds() - spent) / 3600.0)


def _within_a_year(hours: float) -> float:
    if hours > MAX_HOURS:
        raise _beyond_a_year(f"deadline {hours / 24:,.0f} days away")
    return hours


def _beyond_a_year(what: str) -> SkyNomadInputError:
    return SkyNomadInputError(
        f"{what}: a deadline may be at most a year ({MAX_HOURS / 24:.0f} days) away, like work_hours; "
        "nothing was launched"
    )


def reserve_hours(reserve, config, downstream_median_seconds=None) -> float:
    """The downstream reserve in cloud hours: a timedelta, "auto" (the measured median), or None.

    Downstream tasks run in Airflow's own time, so on the accelerated simulated cloud their wall
    seconds are worth `speed` times as many cloud seconds (the job's deadline is in cloud hours).
    """
    if reserve is None:
        return 0.0
    if isinstance(reserve, str):
        if reserve != "auto":
            raise SkyNomadInputError(f'downstream_reserve must be a timedelta, "auto" or None, got {reserve!r}')
        seconds = float(downstream_median_seconds or 0.0)
    elif isinstance(reserve, timedelta):
        seconds = reserve.total_seconds()
    else:
        raise SkyNomadInputError(f'downstream_reserve must be a timedelta, "auto" or None, got {reserve!r}')
    if seconds < 0:
        raise SkyNomadInputError(f"downstream_reserve must not be negative, got {reserve!r}")
    return seconds / config.wall_seconds_per_cloud_hour


def deadline_from_alert(dag, context) -> tuple[datetime | None, timedelta | None, datetime | None]:
    """(anchor, interval, absolute) from the earliest of the DAG's DeadlineAlerts, or Nones."""
    alerts = getattr(dag, "deadline", None) or []
    if not isinstance(alerts, (list, tuple)):
        alerts = [alerts]
    best = None
    for alert in alerts:
        interval = getattr(alert, "interval", None)
        if not isinstance(interval, timedelta):
            continue  # variable intervals are resolved by the scheduler only
        reference = getattr(alert, "reference", None)
        name = type(reference).__name__
        if name == "FixedDatetimeDeadline":
            candidate = (None, None, reference._datetime + interval)
        elif name == "DagRunLogicalDateDeadline":
            dag_run = context.get("dag_run")
            anchor = getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
            candidate = (anchor or datetime.now(UTC), interval, None)
        elif name == "DagRunQueuedAtDeadline":
            candidate = (_run_start(context) or datetime.now(UTC), interval, None)
        else:
            continue
        best = candidate if best is None else min(best, candidate, key=_deadline_wall)
    return best or (None, None, None)


def _deadline_wall(candidate) -> datetime:
    anchor, interval, absolute = candidate
    return absolute if absolute is not None else anchor + interval


def _run_start(context) -> datetime | None:
    dag_run = context.get("dag_run") if context else None
    return getattr(dag_run, "start_date", None) or getattr(dag_run, "run_after", None)
