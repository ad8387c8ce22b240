"""How far along the job is compared with the time it has: the value of progress and the uniform line."""

from __future__ import annotations

from .job import JobSpec, JobState

MAX_VALUE_MULTIPLE = 10.0  # V is capped at this many times C_od: past it every option is "worth it" anyway


def value_of_progress(job: JobSpec, state: JobState, cheapest_on_demand_usd_per_hour: float, step_hours: float) -> float:
    """V(t, p) = C_od · t/(T − t) · (P − p)/p, in USD per hour of progress (DESIGN §2).

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


def slack_value(
    job: JobSpec, state: JobState, cheapest_on_demand_usd_per_hour: float, reference_usd_per_hour: float
) -> float:
    """Value of progress anchored at the market: what an hour of progress will cost to buy later.

    With the job's whole initial slack left, progress bought later costs the reference (cheapest
    recent spot) price; as the slack share of the remaining time shrinks below the job's initial
    share, more of the remaining work will have to be bought on-demand, so V rises linearly to C_od.
    """
    T, P = job.deadline_hours, job.work_hours
    left = T - state.elapsed_hours
    if left <= 0:
        return cheapest_on_demand_usd_per_hour
    initial = max(1e-9, (T - P - job.cold_start_hours) / T)
    slack = (left - (P - state.progress_hours) - job.cold_start_hours) / left
    urgency = min(1.0, max(0.0, 1.0 - slack / initial))
    reference = min(reference_usd_per_hour, cheapest_on_demand_usd_per_hour)
    return reference + (cheapest_on_demand_usd_per_hour - reference) * urgency


def behind_uniform_line(job: JobSpec, state: JobState, lead_hours: float = 0.0) -> bool:
    """p < P·(t + lead)/T: progress trails the straight line from (0, 0) to (T, P)."""
    return state.progress_hours < job.work_hours * (state.elapsed_hours + lead_hours) / job.deadline_hours
