"""How often the probe DAG runs on the wall clock and on the cloud's clock, and how old market data may be
(jobs/probe_schedule.py): the three numbers a user meets must agree."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig
from airflow_provider_skynomad.jobs.probe_schedule import ProbeSchedule


def simulated(speed: float) -> SkyNomadConfig:
    return SkyNomadConfig(market_url="sqlite://", cloud="simulated", speed=speed)


def test_the_standalone_recipes_probe_dag_runs_at_a_pace_airflow_keeps_and_jobs_accept_its_data():
    schedule = ProbeSchedule.of(simulated(300.0), environ={})
    # 10 cloud minutes would be 2 s at 300x: Airflow runs the DAG every minute, 5 cloud hours apart.
    assert schedule.wall_interval == timedelta(seconds=60)
    assert schedule.cloud_interval_hours == pytest.approx(5.0)
    # A job starting just before the next round (a round takes ~30 s = 2.5 h) still accepts the data.
    assert schedule.max_market_age == timedelta(hours=10)
    assert schedule.stale_after_hours >= schedule.max_market_age_hours


def test_a_real_cloud_keeps_the_ten_minute_probe_dag_and_the_two_hour_age():
    schedule = ProbeSchedule.of(SkyNomadConfig(market_url="sqlite://", cloud="aws"), environ={})
    assert schedule.wall_interval == timedelta(minutes=10)
    assert schedule.max_market_age == timedelta(hours=2) and schedule.stale_after_hours == 3.0


def test_the_environment_sets_the_interval_on_the_clouds_clock_and_the_age():
    slow = ProbeSchedule.of(simulated(30.0), environ={"SKYNOMAD_PROBE_INTERVAL_MINUTES": "60"})
    assert slow.wall_interval == timedelta(minutes=2) and slow.cloud_interval_hours == pytest.approx(1.0)
    asked = ProbeSchedule.of(simulated(300.0), environ={"SKYNOMAD_MAX_MARKET_AGE_HOURS": "12"})
    assert asked.max_market_age == timedelta(hours=12)
    with pytest.raises(ValueError, match="SKYNOMAD_PROBE_INTERVAL_MINUTES must be a positive number"):
        ProbeSchedule.of(simulated(300.0), environ={"SKYNOMAD_PROBE_INTERVAL_MINUTES": "0"})


def test_a_probe_dag_run_a_day_apart_on_a_fast_clock_asks_for_no_more_than_a_year_of_age():
    """At 200x a day of wall time is 200 cloud days: the age limit stays one the operator takes."""
    from datetime import timedelta

    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig
    from airflow_provider_skynomad.jobs.params import MAX_HOURS
    from airflow_provider_skynomad.jobs.probe_schedule import ProbeSchedule

    config = SkyNomadConfig(market_url="sqlite://", speed=200.0)
    schedule = ProbeSchedule.of(config, {"SKYNOMAD_PROBE_INTERVAL_MINUTES": str(1440 * 200)})
    assert schedule.max_market_age == timedelta(hours=MAX_HOURS)


def test_the_late_data_warning_names_the_pace_on_both_clocks_and_the_age_expected():
    words = ProbeSchedule.of(simulated(300.0), environ={}).words()
    assert words == "it runs every 60 s of wall time = 5 h of the cloud's clock, so data up to 10 h old is expected"
    assert "every 10 min of wall time" in ProbeSchedule.at_speed(1.0, environ={}).words()


def test_a_wall_interval_the_probe_dag_declares_is_the_pace_the_cloud_sees():
    schedule = ProbeSchedule.at_speed(300.0, environ={}, wall_interval=timedelta(minutes=2))
    assert schedule.wall_interval == timedelta(minutes=2)
    assert schedule.cloud_interval_hours == pytest.approx(10.0)
    assert schedule.max_market_age == timedelta(hours=20)  # two rounds may pass before anyone should worry
