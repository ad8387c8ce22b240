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


def _paces(declared: float, observations):
    """The pace after each (productive hours, share) observation, in order."""
    from airflow_provider_skynomad.planner.pace import Pace

    pace, out = Pace(declared), []
    for hours, share in observations:
        pace = pace.observed(hours, share)
        out.append(pace)
    return out


def test_a_pace_is_told_as_a_number_only_once_the_checkpoints_back_it():
    """One observation over a few per cent of the work is no measurement to say: the planner may plan
    with its bound, the words wait for a second checkpoint over a tenth of the work."""
    from airflow_provider_skynomad.jobs.learn import PACE_TOLD_CHECKPOINTS, PACE_TOLD_SHARE, told_ratio

    first, second = _paces(6.0, [(0.5, 0.5 / 6.0 / 0.65), (0.75, 0.75 / 6.0 / 0.65)])
    assert first.faster_than_declared() is not None  # the estimator alone would say it
    assert first.checkpoints < PACE_TOLD_CHECKPOINTS or first.fraction < PACE_TOLD_SHARE
    assert told_ratio(first) is None
    assert told_ratio(second) == pytest.approx(0.65)
    (slow,) = _paces(4.0, [(0.5, 0.5 / 5.0)])
    assert told_ratio(slow) is None  # 2.5 % of the work: not yet, but the bound already plans with it
    assert slow.work_hours_bound > 4.0
    assert told_ratio(_paces(4.0, [(0.5, 0.1), (0.75, 0.15)])[-1]) == pytest.approx(1.25)
    assert told_ratio(_paces(4.0, [(0.5, 0.125), (0.75, 0.1875)])[-1]) is None  # as declared: nothing


def test_a_pace_said_then_put_back_at_the_declared_one_is_said_about_as_declared(started, caplog):
    import logging

    job = started(work_hours=6.0)
    steps = job.controller().steps
    early, *_, late = _paces(6.0, [(0.5, 0.5 / 6.0 / 0.8), (0.75, 0.75 / 6.0 / 0.8), (2.0, 0.37), (4.0, 0.6667)])
    with caplog.at_level(logging.INFO, logger="test.jobs"):
        steps.learn_pace(1.0, early)  # one checkpoint: nothing said
        steps.learn_pace(1.25, _paces(6.0, [(0.5, 0.5 / 6.0 / 0.8), (0.75, 0.75 / 6.0 / 0.8)])[-1], 0.16)
        steps.learn_pace(4.5, late, 0.6667)
    said = [n for n in steps.record.timeline if n["event"] == "pace"]
    assert [n["ratio"] for n in said] == [0.8, 1.0], said
    lines = [
        r.getMessage() for r in caplog.records if "declared" in r.getMessage() and "workload runs" in r.getMessage()
    ]
    assert "runs 20 % faster than declared" in lines[0]
    assert "the workload runs about as declared after all: about 2.0 h of work left" in lines[-1], lines
