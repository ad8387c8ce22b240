"""The errors the job runtime raises to say *why* a job cannot go on.

Two are Airflow's ``AirflowFailException`` as well (the task fails at once, its retries unspent), so
they are defined here, where Airflow is imported, rather than in exceptions.py (which imports
nothing: the agent on an instance loads it); the others are re-exported from exceptions.py.
"""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_skynomad.exceptions import ControlLost as ControlLost
from airflow_provider_skynomad.exceptions import SkyNomadError
from airflow_provider_skynomad.exceptions import SkyNomadJobFailed as SkyNomadJobFailed


class SkyNomadInputError(SkyNomadError, AirflowFailException, ValueError):
    """The job cannot start as specified; nothing was launched and nothing was written.

    An `AirflowFailException`: a wrong input stays wrong, so the task fails at once instead of
    spending its retries on the same mistake.
    """


class SkyNomadDeadlineMissed(SkyNomadError, AirflowFailException):
    """The job finished after its deadline (`on_deadline_miss="fail"`): downstream must not run as if on time."""
