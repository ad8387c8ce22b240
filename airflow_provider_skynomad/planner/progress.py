"""How far along the job is compared with the time it has: the value of progress and the uniform line."""

from __future__ import annotations

import numpy as np

from airflow_provider_skynomad.planner.job import JobSpec, JobState

MAX_VALUE_MULTIPLE = 10.0  # V is capped at this many times C_od: past it every option is "worth it" anyway


def value_of_progress(
    job: JobSpec, state: JobState, cheapest_on_demand_usd_per_hour: float, step_hours: float
) -> float:
    """V(t, p) = C_od · t/(T − t) · (P − p)/p, in USD per hour of progress (docs/planner.md).

    On schedule (p/P = t/T) V equals C_od; behind it exceeds C_od so on-demand becomes worth
    its price; ahead it drops below C_od and the planner gets picky. One decision step δ is
    added to t and the matching δ·P/T to p, which keeps V = C_od at t = p = 0 and finite
    right after a restart, without changing it once the job is under way.
    """
    t, p = state.elapsed_hours, state.progress_hours
    T, P = job.deadline_hours, job.work_hours
    if p >= P:
        return 0.0
    cap = MAX_VALUE_MULTIPLE * cheapest_on_demand_usd_per_hour
    if T - t <= 0:
        return cap
    delta = step_hours
    value = cheapest_on_demand_usd_per_hour * (t + delta) / (T - t) * (P - p) / (p + delta * P / T)
    return min(value, cap)


def slack_urgency(job: JobSpec, state: JobState, prior_overhead: float = 0.05, prior_hours: float = 4.0) -> float:
    """How likely the remaining slack runs out, in [0, 1]: (expected overhead of the rest ÷ slack left)².

    Overhead per progress hour (cold starts, waiting) is learnt from the job itself, (t − p)/p,
    shrunk toward `prior_overhead` with `prior_hours` of pseudo-progress. Squared because slack
    rarely binds until the expected need approaches what is left.
    """
    t, p = state.elapsed_hours, state.progress_hours
    slack = job.deadline_hours - t - (job.work_hours - p) - job.cold_start_hours
    if slack <= 0:
        return 1.0
    overhead = (max(t - p, 0.0) + prior_overhead * prior_hours) / (p + prior_hours)
    return min(1.0, overhead * (job.work_hours - p) / slack) ** 2


def market_value(barrier_usd_per_hour: float, reference_usd_per_hour: float, urgency: float) -> float:
    """V between the market's price and the log barrier: what an hour of progress will cost to buy later.

    With slack to spare (urgency 0), progress bought later costs the reference (cheapest recent
    spot) price, so pausing only pays when something cheaper is coming. As slack runs short
    (urgency 1) it becomes the paper's log-barrier V, which exceeds C_od when behind schedule.
    """
    return reference_usd_per_hour + (barrier_usd_per_hour - reference_usd_per_hour) * urgency


def behind_uniform_line(job: JobSpec, state: JobState, lead_hours: float = 0.0) -> bool:
    """p < P·(t + lead)/T: progress trails the straight line from (0, 0) to (T, P)."""
    return state.progress_hours < job.work_hours * (state.elapsed_hours + lead_hours) / job.deadline_hours


def supply_price(
    cost_per_progress_hour: np.ndarray,
    up_share: np.ndarray,
    remaining_work_hours: float,
    hours_left: float,
    ceiling_usd_per_hour: float,
) -> float:
    """The dearest spot price the job must accept to finish by the deadline: what progress will cost later.

    Markets join cheapest first until the chance that one of them has capacity (long-run up
    shares, markets independent) covers the share of the time left that the remaining work
    needs. Waiting pays only for markets up to that price: a job with little work left can
    hold out for the cheapest market through its outages, one with little time left must take
    whatever runs. When spot cannot cover the work, on-demand (the ceiling) sets the price.
    """
    if hours_left <= 0:
        return ceiling_usd_per_hour
    need = remaining_work_hours / hours_left
    none_up = 1.0
    for i in np.argsort(cost_per_progress_hour, kind="stable"):
        price = float(cost_per_progress_hour[i])
        if not price < ceiling_usd_per_hour:
            break
        none_up *= 1.0 - float(up_share[i])
        if 1.0 - none_up >= need:
            return price
    return ceiling_usd_per_hour
