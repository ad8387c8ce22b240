"""The errors the job runtime raises to say *why* a job cannot go on."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowFailException


class SkyNomadInputError(AirflowFailException, ValueError):
    """The job cannot start as specified; nothing was launched and nothing was written.

    An `AirflowFailException`: a wrong input stays wrong, so the task fails at once instead of
    spending its retries on the same mistake.
    """


class SkyNomadJobFailed(RuntimeError):
    """The job's workload or group failed (the message carries the workload's last error lines)."""


class SkyNomadDeadlineMissed(AirflowFailException):
    """The job finished after its deadline (`on_deadline_miss="fail"`): downstream must not run as if on time."""


class ControlLost(RuntimeError):
    """Another copy of the job's controller wrote its record since this one read it: this copy stops."""
