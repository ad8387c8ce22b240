"""The invariants a run must keep under any fault (issue 16, item 4), as plain functions.

Each takes what a run left behind — the simulated cloud's launch record (`SimulatedCloud.launches`),
the jobs' outcomes and the market table — and raises AssertionError naming what broke and for
which job. `check_all` runs every one; a test or a harness (e.g. the Celery run) calls it after
each fault.

A job's *outcome* is plain data: the operator's summary for a job that finished (it has
``job_id`` and ``deadline_met``), or ``{"job_id": ..., "error": "<the failure's message>"}`` for a
job that failed. A lost job is one with neither.
"""

from __future__ import annotations

import re

import pandas as pd

# A move launches the new group before it stops the old one (so a move that fails never leaves
# the job with nothing): the two overlap for the calls in between, which take as long as the box
# is slow. The controller makes a move within one decision step and counts that step's length
# into the next step's lag (triggers/skynomad.py: `late = ... + took`), so the job's own longest
# measured lag (`lag_hours_max`) bounds its moves' overlaps on this box, in this run. The summary
# rounds it to 4 decimals: half of that unit is the only tolerance added.
LAG_ROUNDING_HOURS = 0.00005
BILL_TOLERANCE_USD = 0.02  # the summary rounds each part to cents
KEY = ["zone", "instance_type", "observed_at"]


def launches_of(cloud, job_id: str | None = None) -> list[dict]:
    """The cloud's launch record (see `SimulatedCloud.launches`)."""
    return list(cloud.launches(job_id))


def no_job_lost(outcomes: list[dict], started: int | None = None) -> None:
    """Every job started ended in success or in a failure that names its cause in words."""
    if started is not None and len(outcomes) != started:
        raise AssertionError(f"job lost: {started} runs started, {len(outcomes)} outcomes recorded")
    for outcome in outcomes:
        job = outcome.get("job_id", "?")
        if "deadline_met" in outcome:
            continue
        error = str(outcome.get("error") or "")
        if not error:
            raise AssertionError(f"job lost: {job} neither finished nor failed with a cause: {outcome}")
        if "Traceback" in error or not re.search(r"[a-z]{3,} [a-z]{2,} [a-z]{2,}", error):
            raise AssertionError(f"job {job} failed without a cause in plain words: {error[:300]!r}")


def move_overlap_hours(outcome: dict) -> float:
    """How long a move of this job may keep two groups alive: the longest lag its controller
    measured (see `LAG_ROUNDING_HOURS`); 0 when it measured none (a job that never deferred made no move)."""
    return float(outcome.get("lag_hours_max") or 0.0) + LAG_ROUNDING_HOURS


def one_group_at_a_time(cloud, job_ids: list[str], overlap_hours: dict[str, float]) -> None:
    """Never two groups of one job alive at once, beyond a move's launch-then-stop overlap
    (`overlap_hours[job_id]`, from `move_overlap_hours`)."""
    for job_id in job_ids:
        allowed = overlap_hours.get(job_id, 0.0)
        launches = sorted(launches_of(cloud, job_id), key=lambda g: g["start_hours"])
        tokens = [g["client_token"] for g in launches if "client_token" in g]
        if len(tokens) != len(set(tokens)):
            raise AssertionError(f"job {job_id}: one client token started two groups: {sorted(tokens)}")
        for before, after in zip(launches, launches[1:], strict=False):
            end = before["end_hours"]
            if end is None or end > after["start_hours"] + allowed:
                raise AssertionError(
                    f"job {job_id}: two groups alive at once: {_group(before)} still alive "
                    f"{'to the end' if end is None else f'until {end:.3f} h'} when {_group(after)} started "
                    f"(a move may overlap up to {allowed:.4f} h here, the job's longest measured lag)"
                )


def nothing_left_running(cloud, job_ids: list[str] | None = None) -> None:
    """No group of these jobs (None: of any job) still alive after the runs ended."""
    alive = [g for g in launches_of(cloud) if g["end_hours"] is None and (job_ids is None or g["job_id"] in job_ids)]
    if alive:
        raise AssertionError(f"left running after the run: {[_group(g) for g in alive]}")


def feasible_deadlines_met(outcomes: list[dict]) -> None:
    """Every job that finished met its deadline (the runs checked are all feasible, T ≥ P + d)."""
    late = [o for o in outcomes if "deadline_met" in o and not o["deadline_met"]]
    if late:
        raise AssertionError(
            "deadline missed: "
            + "; ".join(f"{o['job_id']} took {o.get('elapsed_hours')} h of {o.get('deadline_hours')} h" for o in late)
        )


def bill_adds_up(cloud, outcomes: list[dict], tolerance_usd: float = BILL_TOLERANCE_USD) -> None:
    """Each finished job's reported cost is the sum of its parts and the cloud's own bill for it."""
    for outcome in outcomes:
        if "deadline_met" not in outcome:
            continue
        job = outcome["job_id"]
        cost = outcome["cost_usd"]
        parts = cost["spot"] + cost["on_demand"] + cost["egress"] + cost["probe"]
        if abs(parts - cost["total"]) > tolerance_usd:
            raise AssertionError(f"job {job}: cost parts {cost} add up to {parts:.2f}, not {cost['total']}")
        groups = sum(g["cost_usd"] for g in launches_of(cloud, job))
        reported = cost["spot"] + cost["on_demand"]
        if abs(groups - reported) > tolerance_usd * 2:
            raise AssertionError(f"job {job}: its groups cost {groups:.2f} USD, the summary says {reported:.2f}")
        bill = cloud.bill(tags={"skynomad-job": job})
        if abs(bill["total_usd"] - cost["total"]) > tolerance_usd * 4:
            raise AssertionError(f"job {job}: the cloud bills {bill['total_usd']:.2f} USD, the summary says {cost}")
        if any(g["cost_usd"] < 0 for g in launches_of(cloud, job)):
            raise AssertionError(f"job {job}: a group with a negative cost")


def market_rows_intact(table, written: pd.DataFrame | None = None) -> None:
    """No market row duplicated, and every row `written` (e.g. the seeded history) still there."""
    rows = table.read()
    duplicated = rows[rows.duplicated(KEY, keep=False)]
    if not duplicated.empty:
        raise AssertionError(f"market rows duplicated: {duplicated[KEY].head(5).to_dict('records')}")
    if written is not None and len(written):
        held = set(zip(rows["zone"], rows["instance_type"], rows["observed_at"], strict=True))
        missing = [k for k in zip(written["zone"], written["instance_type"], written["observed_at"], strict=True)]
        missing = [k for k in missing if k not in held]
        if missing:
            raise AssertionError(f"{len(missing)} market rows lost, e.g. {missing[:3]}")


def check_all(cloud, outcomes: list[dict], table=None, *, written=None, started=None) -> None:
    """Every invariant above, for the jobs in `outcomes` (and the whole market table)."""
    no_job_lost(outcomes, started)
    job_ids = [o["job_id"] for o in outcomes if o.get("job_id")]
    one_group_at_a_time(cloud, job_ids, {o["job_id"]: move_overlap_hours(o) for o in outcomes if o.get("job_id")})
    nothing_left_running(cloud, job_ids)
    feasible_deadlines_met(outcomes)
    bill_adds_up(cloud, outcomes)
    if table is not None:
        market_rows_intact(table, written)


def _group(g: dict) -> str:
    mode = "spot" if g["spot"] else "on-demand"
    return f"{mode} group {g['group_id']} in {g['zone']} ({g['start_hours']:.3f} h → {g['end_hours']})"
