"""`declared_speed`: the clock of a connection as the environment defines it, read without Airflow."""

from __future__ import annotations

import json

import pytest

from airflow_provider_skynomad.config import declared_speed
from airflow_provider_skynomad.exceptions import SkyNomadConfigError
from airflow_provider_skynomad.jobs.probe_schedule import ProbeSchedule


def conn(conn_type="skynomad", **extra) -> dict:
    return {"AIRFLOW_CONN_SKYNOMAD_DEFAULT": json.dumps({"conn_type": conn_type, "extra": extra})}


def test_the_simulated_speed_comes_from_the_json_or_uri_definition():
    assert declared_speed(environ=conn(cloud="simulated", speed=300)) == 300.0
    assert declared_speed(environ=conn()) == 3600.0  # the simulated cloud's default speed
    uri = {"AIRFLOW_CONN_SKYNOMAD_FAST": "skynomad://?cloud=simulated&speed=120"}
    assert declared_speed("skynomad_fast", environ=uri) == 120.0
    wrapped = {"AIRFLOW_CONN_SKYNOMAD_DEFAULT": 'skynomad://?__extra__={"speed": 60}'}
    assert declared_speed(environ=wrapped) == 60.0


def test_a_real_cloud_runs_the_wall_clock_and_an_undefined_connection_is_unknown():
    assert declared_speed(environ=conn(cloud="aws")) == 1.0
    assert declared_speed(environ=conn("skynomad_gcp")) == 1.0
    assert declared_speed(environ=conn(cloud_connections="a,b")) == 1.0
    assert declared_speed(environ={}) is None


def test_a_bad_speed_is_one_clear_error_at_parse_time():
    with pytest.raises(SkyNomadConfigError, match="speed must be a number"):
        declared_speed(environ=conn(speed="fast"))
    with pytest.raises(SkyNomadConfigError, match="speed must be a finite number > 0"):
        declared_speed(environ=conn(speed=0))


def test_the_declared_probe_schedule_is_the_one_the_connection_asks_for():
    for environ in (conn(speed=300), conn(speed=30), conn(cloud="aws")):
        speed = declared_speed(environ=environ)
        assert ProbeSchedule.declared(environ=environ) == ProbeSchedule.at_speed(speed, environ)
    assert ProbeSchedule.declared(environ=conn(speed=300)).wall_interval.total_seconds() == 60
    assert ProbeSchedule.declared(environ={}).wall_interval.total_seconds() == 600  # a real cloud's 10 minutes
