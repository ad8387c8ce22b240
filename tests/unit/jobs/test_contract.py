"""What the worker hands the trigger and the one answer it gets back (jobs/contract.py): plain data across,
typed again on arrival, and a job id another task wrote refused by name."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from airflow_provider_skynomad.jobs import contract
from airflow_provider_skynomad.jobs.contract import (
    MIN_EVENT_SECONDS,
    ControllerArgs,
    Outcome,
    OutcomeKind,
    TaskIdentity,
    first_event_hold_seconds,
    shown_id,
)
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.params import JobParams

TASK = TaskIdentity("dag", "manual__1", "train", -1, 1, 2, "0190a7e2-0000-7000-8000-000000000001")


def test_a_task_owns_the_jobs_it_starts_and_no_other_tasks():
    assert TASK.job_id.startswith(f"{TASK.key}-") and TASK.owns(TASK.job_id)
    other = TaskIdentity("dag", "manual__1", "evaluate", -1, 1, 2, TASK.try_id)
    assert not TASK.owns(other.job_id) and not TASK.owns(None) and not TASK.owns(5)
    retry = TaskIdentity("dag", "manual__1", "train", -1, 2, 2, "0190a7e2-0000-7000-8000-000000000002")
    assert retry.job_id != TASK.job_id and TASK.owns(retry.job_id)  # a new try's job is still this task's


def test_a_job_id_of_another_task_is_refused_naming_where_it_was_found():
    assert TASK.check_owns(TASK.job_id, "the task state") == TASK.job_id
    other = TaskIdentity("dag", "manual__1", "evaluate", -1, 1, 2, TASK.try_id).job_id
    with pytest.raises(SkyNomadInputError, match="the task state names SkyNomad job .* not this task's job"):
        TASK.check_owns(other, "the task state")


def test_an_id_found_where_others_write_is_quoted_short():
    assert shown_id("sn-1") == "'sn-1'"
    long = shown_id("x" * 500)
    assert len(long) == 80 and long.endswith("...")


def test_the_outcome_crosses_as_json_and_a_malformed_one_is_named():
    outcome = Outcome(OutcomeKind.DEADLINE_MISSED, "sn-1", "finished at 11 h of 10 h")
    assert Outcome.from_dict(json.loads(json.dumps(outcome.to_dict()))) == outcome
    assert Outcome.from_dict({"kind": "finished"}) == Outcome(OutcomeKind.FINISHED, "", "")
    for bad in ({}, {"kind": "exploded"}, {"kind": ["finished"]}):
        with pytest.raises(ValueError, match="not a SkyNomad job outcome"):
            Outcome.from_dict(bad)


def test_the_triggers_arguments_are_plain_json_and_come_back_equal():
    params = JobParams(
        work_hours=6.0, command=("python", "train.py"), env={"A": "1"}, instances=2, cold_start_hours=0.2,
        checkpoint_gb=50.0, policy="skynomad", policy_params={}, decision_step_minutes=10.0,
        market_lookback_hours=72.0, max_market_age=timedelta(hours=2), zones=["us-central1-a"],
    )  # fmt: skip
    args = ControllerArgs(job_id=TASK.job_id, conn_id="skynomad_default", params=params, task=TASK)
    kwargs = json.loads(json.dumps(args.to_kwargs()))
    assert set(kwargs) == {"job_id", "conn_id", "params", "task", "min_event_seconds"}
    assert ControllerArgs.from_kwargs(kwargs) == args
    older = {k: v for k, v in kwargs.items() if k != "min_event_seconds"}  # a trigger written without it
    assert ControllerArgs.from_kwargs(older).min_event_seconds == MIN_EVENT_SECONDS


def test_the_first_events_hold_grows_with_the_try_up_to_a_limit(monkeypatch):
    monkeypatch.setattr(contract, "supervised_in_process", lambda: False)
    first, second = first_event_hold_seconds(1), first_event_hold_seconds(2)
    assert second - first == pytest.approx(MIN_EVENT_SECONDS)
    assert first_event_hold_seconds(9) == first_event_hold_seconds(4) > first_event_hold_seconds(3)
    assert first_event_hold_seconds(0) == first
    assert first >= 2 * MIN_EVENT_SECONDS  # the exit and the scheduler's loop, past the supervisor's wait


def test_in_dag_test_only_the_short_hold_per_try_is_kept(monkeypatch):
    monkeypatch.setattr(contract, "supervised_in_process", lambda: True)
    assert [first_event_hold_seconds(n) for n in (1, 2, 5)] == [MIN_EVENT_SECONDS, 2 * MIN_EVENT_SECONDS, 8.0]
