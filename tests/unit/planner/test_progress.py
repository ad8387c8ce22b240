"""Value of progress V(t, p) (docs/planner.md) and the uniform line."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.progress import (
    MAX_VALUE_MULTIPLE,
    behind_uniform_line,
    supply_price,
    value_of_progress,
)

C_OD = 8.0
STEP = 1 / 6

job_params = st.tuples(
    st.floats(1.0, 50.0),  # P
    st.floats(1.05, 2.0),  # T/P
    st.floats(0.1, 0.3),  # d
)


def V(job: JobSpec, t: float, p: float, c_od: float = C_OD, step: float = STEP) -> float:
    return value_of_progress(job, JobState(elapsed_hours=t, progress_hours=p), c_od, step)


@settings(max_examples=200, deadline=None)
@given(job_params, st.floats(0.0, 0.99))
def test_on_schedule_value_is_the_cheapest_on_demand_price(params, share):
    P, ratio, d = params
    job = JobSpec(P, P * ratio, d)
    t = share * job.deadline_hours
    assert V(job, t, P * t / job.deadline_hours) == pytest.approx(C_OD, rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(job_params, st.floats(0.01, 0.95), st.floats(0.05, 0.95))
def test_behind_is_worth_more_and_ahead_less_than_on_demand(params, share, fraction):
    P, ratio, d = params
    job = JobSpec(P, P * ratio, d)
    t = share * job.deadline_hours
    on_line = P * t / job.deadline_hours
    behind = on_line * fraction
    ahead = on_line + (P - on_line) * fraction
    assert V(job, t, behind) > C_OD
    assert 0 < V(job, t, ahead) < C_OD


@settings(max_examples=200, deadline=None)
@given(job_params, st.floats(0.0, 0.98), st.floats(0.0, 0.98), st.floats(0.0, 0.01))
def test_value_grows_with_time_and_shrinks_with_progress(params, a, b, eps):
    P, ratio, d = params
    job = JobSpec(P, P * ratio, d)
    T = job.deadline_hours
    t, p = a * T, b * P
    assert V(job, t + eps * T, p) >= V(job, t, p) - 1e-9
    assert V(job, t, p + eps * P) <= V(job, t, p) + 1e-9


def test_value_is_finite_at_the_start_and_with_no_progress():
    job = JobSpec(10.0, 12.0, 0.2)
    assert V(job, 0.0, 0.0) == pytest.approx(C_OD)
    assert math.isfinite(V(job, 0.0, 3.0)) and V(job, 0.0, 3.0) < C_OD
    for t in (STEP, 1.0, 6.0, 11.9):
        value = V(job, t, 0.0)
        assert math.isfinite(value) and C_OD < value <= MAX_VALUE_MULTIPLE * C_OD


def test_value_at_the_ends():
    job = JobSpec(10.0, 12.0, 0.2)
    assert V(job, 5.0, 10.0) == 0.0  # done: progress is worth nothing more
    assert V(job, 12.0, 5.0) == MAX_VALUE_MULTIPLE * C_OD  # out of time: capped, not infinite
    assert V(job, 13.0, 5.0) == MAX_VALUE_MULTIPLE * C_OD
    assert V(job, 11.99, 0.5) == MAX_VALUE_MULTIPLE * C_OD


def test_value_scales_with_the_on_demand_price():
    job = JobSpec(10.0, 15.0, 0.2)
    assert V(job, 3.0, 1.0, c_od=2 * C_OD) == pytest.approx(2 * V(job, 3.0, 1.0))


def test_uniform_line():
    job = JobSpec(10.0, 20.0, 0.2)
    assert not behind_uniform_line(job, JobState(elapsed_hours=0.0, progress_hours=0.0))
    assert behind_uniform_line(job, JobState(elapsed_hours=4.0, progress_hours=1.9))
    assert not behind_uniform_line(job, JobState(elapsed_hours=4.0, progress_hours=2.0))
    assert behind_uniform_line(job, JobState(elapsed_hours=4.0, progress_hours=2.0), lead_hours=0.4)
    assert not behind_uniform_line(job, JobState(elapsed_hours=4.0, progress_hours=2.2), lead_hours=0.4)


# --------------------------------------------------------------------------- supply price (V's reference)

PRICES = np.array([2.0, 2.4, 3.0])


def test_supply_price_is_the_cheapest_market_when_it_alone_covers_the_work():
    # 10 h of work in 40 h needs capacity a quarter of the time; the cheapest is up 90 % of it.
    assert supply_price(PRICES, np.array([0.9, 1.0, 1.0]), 10.0, 40.0, 8.0) == 2.0


def test_supply_price_takes_dearer_markets_as_the_need_grows():
    shares = np.array([0.5, 0.5, 0.5])
    assert supply_price(PRICES, shares, 10.0, 40.0, 8.0) == 2.0  # need 0.25 ≤ 0.5
    assert supply_price(PRICES, shares, 28.0, 40.0, 8.0) == 2.4  # need 0.7 ≤ 1 − 0.5²
    assert supply_price(PRICES, shares, 35.0, 40.0, 8.0) == 3.0  # need 0.875 ≤ 1 − 0.5³
    assert supply_price(PRICES, shares, 39.0, 40.0, 8.0) == 8.0  # spot cannot cover: on-demand


def test_supply_price_ignores_markets_dearer_than_the_ceiling_and_order_of_input():
    prices = np.array([9.0, 2.4, 2.0])
    assert supply_price(prices, np.array([1.0, 0.5, 0.5]), 35.0, 40.0, 8.0) == 8.0
    assert supply_price(prices, np.array([1.0, 0.5, 0.5]), 10.0, 40.0, 8.0) == 2.0
    assert supply_price(prices, np.array([1.0, 0.5, 0.5]), 1.0, 0.0, 8.0) == 8.0  # no time left


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.5, 10.0), st.floats(0.0, 1.0)), min_size=1, max_size=8),
    st.floats(0.1, 50.0),
    st.floats(0.1, 60.0),
    st.floats(0.0, 20.0),
)
def test_supply_price_rises_with_work_and_falls_with_time(markets, work, left, more):
    prices, shares = (np.array(column) for column in zip(*markets, strict=True))
    price = supply_price(prices, shares, work, left, 8.0)
    assert price == 8.0 or (price in prices and price < 8.0)  # a spot price below on-demand, or on-demand
    assert supply_price(prices, shares, work + more, left, 8.0) >= price
    assert supply_price(prices, shares, work, left + more, 8.0) <= price
