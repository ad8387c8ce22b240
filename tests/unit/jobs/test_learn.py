"""What the controller learns and plans with: the deadline aimed a guard early, a lag said only
when it is news (the pace and the warm-up are covered by test_pace and test_runtime)."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.jobs.learn import GUARD_LAGS, MARGIN_STEPS, guard_hours


def test_the_guard_is_a_lag_and_half_a_step():
    assert guard_hours(1 / 6, 0.0) == pytest.approx(MARGIN_STEPS / 6)
    assert guard_hours(1 / 6, 0.3) == pytest.approx(GUARD_LAGS * 0.3 + MARGIN_STEPS / 6)


def test_a_lag_is_planned_with_at_once_and_said_only_when_it_is_news(started):
    job = started()
    steps = job.controller().steps
    record = steps.record
    steps.learn_lag(0.001, 0.1)  # under a minute of cloud time: planned with, not said
    assert record.job.reaction_hours == pytest.approx(0.001)
    assert not [n for n in record.timeline if n["event"] == "reaction lag"]
    steps.learn_lag(0.2, 2.4)
    steps.learn_lag(0.25, 3.0)  # not half again the last said
    said = [n for n in record.timeline if n["event"] == "reaction lag"]
    assert [n["hours"] for n in said] == [0.2] and record.job.reaction_hours == pytest.approx(0.25)
    assert job.record().job.reaction_hours == pytest.approx(0.2)  # written when it was said
