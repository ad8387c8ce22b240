"""How often the probe DAG runs, on the wall clock and on the cloud's clock, and how old market data may be.

Three numbers must agree or a user meets errors and warnings they cannot act on: the probe DAG's
schedule (Airflow's wall clock), the jobs' ``max_market_age`` (the cloud's clock: a job refuses to
start on older data) and the age at which the runtime stops trusting a market (`jobs/stale.py`).
On a real cloud the clocks are one. The simulated cloud runs ``speed`` times faster, and Airflow
cannot run a DAG every 2 s (10 cloud minutes at 300x): on a busy 2-core box a probe run with its
mapped region tasks takes about 30 s of wall time. So the probe interval is asked for on the
cloud's clock (``SKYNOMAD_PROBE_INTERVAL_MINUTES``, default 10) and the DAG runs at that pace in
wall time, but no more often than `MIN_WALL_INTERVAL`; the interval the cloud then really sees is
what the ages follow. A round may end a round's length after it starts and one round may be late,
so data may be two intervals old before anyone should worry.

Pure: no Airflow import, no connection lookup, no database. The example DAGs call `declared` when
they are parsed; the tasks call `of` with the connection they run on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

from airflow_provider_skynomad.jobs.params import MAX_HOURS
from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_AGE_HOURS, STALE_AFTER_HOURS

MIN_WALL_INTERVAL = timedelta(seconds=60)  # what one scheduler on a busy 2-core box keeps (a run takes ~30 s)
DEFAULT_INTERVAL_MINUTES = 10.0  # of the cloud's clock: the traces' own probe cadence


@dataclass(frozen=True)
class ProbeSchedule:
    """The probe DAG's pace and the freshness rules that follow from it.

    :param wall_interval: the probe DAG's ``schedule`` (Airflow's wall clock).
    :param cloud_interval_hours: the same interval on the cloud's clock.
    :param max_market_age: the jobs' ``max_market_age`` (cloud clock): newest data older than this
        means the probe DAG missed a round.
    """

    wall_interval: timedelta
    cloud_interval_hours: float
    max_market_age: timedelta

    @classmethod
    def of(cls, config, environ=None, wall_interval: timedelta | None = None) -> ProbeSchedule:
        """The schedule for the `skynomad` connection's `config` (a `SkyNomadConfig`), when a task runs.

        :param wall_interval: the probe DAG's own ``schedule`` when it is known (its tasks pass
            it): the cloud then sees that pace, whatever the connection would ask for.
        """
        speed = float(config.speed) if config.cloud == "simulated" else 1.0
        return cls.at_speed(speed, environ, wall_interval)

    @classmethod
    def at_speed(cls, speed: float, environ=None, wall_interval: timedelta | None = None) -> ProbeSchedule:
        """The schedule of a cloud whose clock runs `speed` times the wall clock (1 on a real cloud)."""
        environ = os.environ if environ is None else environ
        minutes = _positive(environ, "SKYNOMAD_PROBE_INTERVAL_MINUTES", DEFAULT_INTERVAL_MINUTES)
        wall = max(timedelta(minutes=minutes / speed), MIN_WALL_INTERVAL if speed > 1.0 else timedelta(0))
        wall = wall if wall_interval is None else wall_interval
        cloud_hours = wall.total_seconds() * speed / 3600.0
        floor_hours = max(DEFAULT_MAX_AGE_HOURS, 2.0 * cloud_hours)
        asked = environ.get("SKYNOMAD_MAX_MARKET_AGE_HOURS")
        max_age_hours = floor_hours if asked is None else _positive(environ, "SKYNOMAD_MAX_MARKET_AGE_HOURS", 0.0)
        # A probe DAG run rarely (a day of wall time on a fast simulated clock) would ask for data a
        # year old or more: the operator's own bound on `max_market_age` is the most it may ask.
        return cls(wall, cloud_hours, timedelta(hours=min(max_age_hours, MAX_HOURS)))

    @classmethod
    def declared(cls, skynomad_conn_id: str | None = None, environ=None) -> ProbeSchedule:
        """The schedule a DAG file may know when it is parsed: no connection lookup, no database.

        The connection's clock is read from its definition in the environment (`declared_speed`);
        a connection defined elsewhere is taken as a real cloud's (the probe DAG every
        ``SKYNOMAD_PROBE_INTERVAL_MINUTES`` of wall time), and the probe DAG's first task says so
        when that is not what the connection runs.
        """
        from airflow_provider_skynomad.config import DEFAULT_CONN_ID, declared_speed

        speed = declared_speed(skynomad_conn_id or DEFAULT_CONN_ID, environ)
        return cls.at_speed(1.0 if speed is None else speed, environ)

    @property
    def stale_after_hours(self) -> float:
        """A market older than this shows no spot capacity to the planner (`jobs/stale.py`)."""
        return max(STALE_AFTER_HOURS, self.max_market_age.total_seconds() / 3600.0)

    def words(self) -> str:
        """The probe DAG's pace in plain words, for a warning that the market data is late."""
        return (
            f"it runs every {_duration(self.wall_interval.total_seconds())} of wall time = "
            f"{self.cloud_interval_hours:g} h of the cloud's clock, so data up to {self.max_market_age_hours:g} h old "
            "is expected"
        )

    @property
    def max_market_age_hours(self) -> float:
        """`max_market_age` in cloud hours, the unit every freshness rule compares in."""
        return self.max_market_age.total_seconds() / 3600.0


def _positive(environ, name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise ValueError(f"{name} must be a positive number, got {raw!r}")
    return value


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 120 else f"{seconds:g} s"
