"""The errors the job runtime raises (jobs/errors.py): which fail the task at once, and one root for all."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_skynomad import exceptions
from airflow_provider_skynomad.jobs.errors import (
    ControlLost,
    SkyNomadDeadlineMissed,
    SkyNomadInputError,
    SkyNomadJobFailed,
)


def test_a_wrong_input_fails_the_task_at_once_and_is_still_a_value_error():
    error = SkyNomadInputError("work_hours must be a number")
    assert isinstance(error, AirflowFailException) and isinstance(error, ValueError)
    assert isinstance(error, exceptions.SkyNomadError)


def test_a_missed_deadline_fails_the_task_at_once():
    assert issubclass(SkyNomadDeadlineMissed, AirflowFailException)
    assert issubclass(SkyNomadDeadlineMissed, exceptions.SkyNomadError)


def test_the_errors_the_agent_shares_are_the_same_classes_as_in_exceptions():
    assert ControlLost is exceptions.ControlLost and SkyNomadJobFailed is exceptions.SkyNomadJobFailed
    assert not issubclass(SkyNomadJobFailed, AirflowFailException)  # exceptions.py imports no Airflow
