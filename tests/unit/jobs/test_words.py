"""The plain words the worker and the controller's steps both say about a decision and a record."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_provider_skynomad.jobs.words import decision_words, percent_done, wanted_market
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option


def test_a_decision_is_said_in_plain_words():
    assert decision_words(Decision((Option("a", Mode.ON_DEMAND),))) == "on-demand keeps the deadline safe"
    assert decision_words(Decision((Option("a", Mode.SPOT),))) == "a better spot market"
    idle = decision_words(Decision((None,), wants="zone-b"))
    assert idle == "spot here is not worth its price now: going idle until spot in zone-b is worth taking"


def test_an_idle_job_waits_for_the_planners_claim_or_its_first_spot_choice():
    assert wanted_market(Decision((None,), wants="b")) == "b"
    assert wanted_market(Decision((Option("a", Mode.SPOT), None))) == "a"
    assert wanted_market(Decision((Option("a", Mode.ON_DEMAND),))) is None


def test_progress_is_said_as_a_share_of_the_work():
    record = SimpleNamespace(job=SimpleNamespace(work_hours=4.0))
    assert percent_done(record, 1.0) == "25%" and percent_done(record, None) is None
