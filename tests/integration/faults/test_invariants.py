"""The invariant checks themselves: each one fails on the breach it names (no Airflow, no cloud)."""

from __future__ import annotations

import pandas as pd
import pytest

from .invariants import (
    bill_adds_up,
    check_all,
    feasible_deadlines_met,
    market_rows_intact,
    move_overlap_hours,
    no_job_lost,
    nothing_left_running,
    one_group_at_a_time,
)


def launch(job="j1", token="j1-1", start=0.0, end=1.0, cost=2.0, spot=True, zone="us-central1-a"):
    return {
        "group_id": token,
        "job_id": job,
        "client_token": token,
        "zone": zone,
        "instance_type": "a3-highgpu-1g",
        "spot": spot,
        "gang_size": 1,
        "status": "terminated" if end is not None else "running",
        "start_hours": start,
        "end_hours": end,
        "end_reason": "terminated" if end is not None else None,
        "cost_usd": cost,
    }


class Record:
    """Stands in for SimulatedCloud: its launches and its bill."""

    def __init__(self, launches, billed=None):
        self._launches = launches
        self.billed = billed

    def launches(self, job_id=None):
        return [g for g in self._launches if job_id is None or g["job_id"] == job_id]

    def bill(self, tags=None):
        job = (tags or {}).get("skynomad-job")
        total = sum(g["cost_usd"] for g in self.launches(job)) if self.billed is None else self.billed
        return {"total_usd": total}


def summary(job="j1", total=2.0, met=True):
    return {
        "job_id": job,
        "deadline_met": met,
        "elapsed_hours": 1.0,
        "deadline_hours": 3.0,
        "cost_usd": {"spot": total, "on_demand": 0.0, "egress": 0.0, "probe": 0.0, "total": total},
    }


def test_a_clean_run_passes_every_check():
    cloud = Record([launch(), launch(token="j1-2", start=1.0, end=2.0, cost=1.0)])
    check_all(cloud, [summary(total=3.0)], started=1)


def test_a_job_without_an_outcome_or_with_a_bare_error_is_lost():
    with pytest.raises(AssertionError, match="2 runs started, 1 outcomes"):
        no_job_lost([summary()], started=2)
    with pytest.raises(AssertionError, match="neither finished nor failed"):
        no_job_lost([{"job_id": "j1", "error": ""}])
    with pytest.raises(AssertionError, match="plain words"):
        no_job_lost([{"job_id": "j1", "error": "KeyError: 'x'"}])
    no_job_lost([{"job_id": "j1", "error": "the cloud API did not answer a launch in us-east4-a"}])


def test_two_groups_alive_at_once_beyond_a_moves_overlap_are_caught():
    overlap = {"j1": move_overlap_hours({"job_id": "j1", "lag_hours_max": 0.05})}  # the run's measured lag
    one_group_at_a_time(Record([launch(end=1.01), launch(token="j1-2", start=1.0)]), ["j1"], overlap)  # a move
    with pytest.raises(AssertionError, match="two groups alive at once"):
        one_group_at_a_time(Record([launch(end=2.0), launch(token="j1-2", start=1.0)]), ["j1"], overlap)
    with pytest.raises(AssertionError, match="two groups alive at once"):
        one_group_at_a_time(Record([launch(end=None), launch(token="j1-2", start=1.0)]), ["j1"], overlap)
    with pytest.raises(AssertionError, match="one client token started two groups"):
        one_group_at_a_time(Record([launch(), launch(start=1.0, end=2.0)]), ["j1"], overlap)


def test_a_moves_overlap_is_allowed_up_to_the_jobs_own_measured_lag():
    move = Record([launch(end=1.08), launch(token="j1-2", start=1.0)])  # 0.08 h of two groups
    one_group_at_a_time(move, ["j1"], {"j1": move_overlap_hours({"job_id": "j1", "lag_hours_max": 0.1})})
    with pytest.raises(AssertionError, match=r"two groups alive at once.*up to 0\.0201 h"):
        one_group_at_a_time(move, ["j1"], {"j1": move_overlap_hours({"job_id": "j1", "lag_hours_max": 0.02})})
    with pytest.raises(AssertionError, match="two groups alive at once"):  # nothing measured: no overlap allowed
        one_group_at_a_time(move, ["j1"], {"j1": move_overlap_hours({"job_id": "j1", "error": "failed early"})})


def test_a_group_left_running_is_named():
    with pytest.raises(AssertionError, match="left running.*us-east4-a"):
        nothing_left_running(Record([launch(end=None, zone="us-east4-a")]))
    nothing_left_running(Record([launch(job="j2", end=None)]), ["j1"])  # another job's group


def test_a_missed_deadline_fails():
    with pytest.raises(AssertionError, match="deadline missed: j1"):
        feasible_deadlines_met([summary(met=False)])


def test_a_bill_that_does_not_add_up_fails():
    with pytest.raises(AssertionError, match="its groups cost 2.00 USD, the summary says 5.00"):
        bill_adds_up(Record([launch()]), [summary(total=5.0)])
    with pytest.raises(AssertionError, match="the cloud bills 9.00"):
        bill_adds_up(Record([launch()], billed=9.0), [summary()])
    broken = summary()
    broken["cost_usd"]["total"] = 3.0
    with pytest.raises(AssertionError, match="add up to 2.00, not 3.0"):
        bill_adds_up(Record([launch()]), [broken])


class Table:
    def __init__(self, rows):
        self.rows = rows

    def read(self):
        return self.rows


def test_market_rows_lost_or_duplicated_are_caught():
    at = pd.Timestamp("2025-10-04T00:00:00Z")
    rows = pd.DataFrame({"zone": ["a", "b"], "instance_type": ["t", "t"], "observed_at": [at, at], "available": [1, 1]})
    market_rows_intact(Table(rows), rows)
    with pytest.raises(AssertionError, match="duplicated"):
        market_rows_intact(Table(pd.concat([rows, rows.iloc[:1]])))
    with pytest.raises(AssertionError, match="1 market rows lost"):
        market_rows_intact(Table(rows.iloc[:1]), rows)
