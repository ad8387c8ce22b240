"""A finished job's summary (jobs/summary.py): the cost on one named basis, the cloud's bill when it
has one, and the lines the task log shows."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_skynomad.jobs.record import JOB_TAG, JobRecord, Segment
from airflow_provider_skynomad.jobs.summary import (
    CLOUD_BILL,
    ESTIMATE,
    all_on_demand_usd,
    cost_line,
    deadline_line,
    format_timeline,
    hours_line,
    job_bill,
    summarize,
)
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd


def record(**fields) -> JobRecord:
    """A job of 4 h work and a 10 h deadline: 1 h spot at $2/h (preempted), then on-demand at $9/h from 1.2 h."""
    made = JobRecord(
        job_id="sn-sum000000000001",
        job=JobSpec(work_hours=4.0, deadline_hours=10.0, cold_start_hours=0.2),
        job_start_hours=0.0,
        deadline_hours=10.0,
        zones=["a", "b"],
        instance_types=None,
        policy="skynomad",
        state=JobState(elapsed_hours=2.0, progress_hours=1.5, running=Option("b:m", Mode.ON_DEMAND)),
        all_on_demand_usd=38.0,
        **fields,
    )
    made.open_segment(Segment("a:m", "a", "r", "spot", 0.0, 2.0, 0.2, ["i-1"]))
    made.close_segment(1.0, SegmentEnd.PREEMPTED)
    made.open_segment(Segment("b:m", "b", "r", "on-demand", 1.2, 9.0, 0.2, ["i-2"]))
    return made


def test_without_a_bill_the_cost_is_the_recorded_stretches_at_their_launch_prices_labelled_an_estimate():
    job = record(egress_usd=0.5, probe_usd=0.25)
    summary = summarize(job, elapsed_hours=3.2)
    assert summary["cost_basis"] == ESTIMATE
    assert (summary["spot_hours"], summary["on_demand_hours"]) == (1.0, 2.0)
    assert summary["cost_usd"] == {"spot": 2.0, "on_demand": 18.0, "egress": 0.5, "probe": 0.25, "total": 20.75}
    assert [z["end"] for z in summary["zones_timeline"]] == ["preempted", "running"]
    assert summary["zones_timeline"][-1]["end_hours"] == 3.2  # the open stretch runs to now
    assert cost_line(summary).startswith("estimated cost $20.75 at launch-time market prices")
    assert hours_line(summary) == "spot 1.00 h, on-demand 2.00 h recorded"


def test_with_the_clouds_bill_its_figures_are_the_cost_and_the_hours_are_billed():
    bill = {"spot_hours": 1.5, "on_demand_hours": 2.5, "spot_usd": 3.0, "on_demand_usd": 22.5, "egress_usd": 1.0,
            "probe_usd": 0.5}  # fmt: skip
    summary = summarize(record(), elapsed_hours=3.2, cloud_bill=bill)
    assert summary["cost_basis"] == CLOUD_BILL
    assert summary["cost_usd"]["total"] == 27.0 and summary["spot_hours"] == 1.5
    assert cost_line(summary).startswith("cost $27.00 from the cloud's bill for this job")
    assert hours_line(summary).endswith("billed")


def test_the_deadline_is_met_only_by_a_finished_job_within_it():
    finished = record(finished=True)
    assert summarize(finished, elapsed_hours=10.0)["deadline_met"] is True
    assert summarize(finished, elapsed_hours=10.01)["deadline_met"] is False
    assert summarize(record(), elapsed_hours=3.0)["deadline_met"] is False
    late = summarize(finished, elapsed_hours=10.5)
    assert deadline_line(late) == "finished at 10.50 h of 10.00 h: deadline MISSED"


def test_a_downstream_reserve_is_named_beside_the_jobs_own_deadline():
    summary = summarize(record(finished=True, dag_deadline_hours=12.0), elapsed_hours=9.0)
    assert summary["dag_deadline_hours"] == 12.0
    assert deadline_line(summary) == (
        "finished at 9.00 h of 10.00 h: deadline met (the DAG's deadline is 12.00 h; the rest is kept for "
        "downstream tasks)"
    )
    assert "dag_deadline_hours" not in summarize(record(), elapsed_hours=9.0)


def test_the_lag_quantiles_are_by_nearest_rank_and_zero_when_none_was_measured():
    assert summarize(record(), 3.0)["lag_hours_p50"] == 0.0
    summary = summarize(record(lags_hours=[0.04, 0.01, 0.03, 0.02]), 3.0)
    assert (summary["lag_hours_p50"], summary["lag_hours_p99"], summary["lag_hours_max"]) == (0.02, 0.04, 0.04)


def test_all_on_demand_is_the_declared_figure_until_the_checkpoints_measure_the_work():
    job = record(on_demand_usd_per_hour=9.0)
    assert all_on_demand_usd(job) == 38.0  # no pace measured yet


def test_the_bill_is_asked_by_the_jobs_tag_and_a_cloud_that_cannot_bill_gives_none(caplog):
    class Billing:
        def bill(self, tags):
            return {"asked": tags}

    class NoBill:
        def bill(self, tags):
            raise NotImplementedError("this cloud reports no bill")

    log = logging.getLogger("test.summary")
    assert job_bill(Billing(), "sn-1", log) == {"asked": {JOB_TAG: "sn-1"}}
    with caplog.at_level(logging.WARNING, logger="test.summary"):
        assert job_bill(NoBill(), "sn-1", log) is None
    assert "reporting the estimate instead" in caplog.text


def test_the_timeline_for_the_log_hides_a_decisions_numbers_and_ends_with_the_verdict():
    job = record(finished=True)
    job.note(0.0, NoteKind.DECIDE, reason="V=1.2 U=0.3", options=3, choice="a:m spot")
    job.note(1.0, NoteKind.PREEMPTED, zone="a")
    summary = summarize(job, elapsed_hours=5.0)
    text = format_timeline(job, summary)
    lines = text.splitlines()
    assert lines[0] == "SkyNomad job sn-sum000000000001 (skynomad): timeline in cloud hours since start"
    assert "choice=a:m spot" in text and "V=1.2" not in text and "options=" not in text
    assert "zone=a" in lines[2]
    assert lines[-1] == f"  {deadline_line(summary)}"
    assert "probe DAG spent" not in text
    assert "probe DAG spent $1.50" in format_timeline(job, {**summary, "probing_usd": 1.5})


@pytest.mark.parametrize("elapsed", [0.5, 1.1])
def test_a_stretch_never_counts_negative_hours(elapsed):
    """Before the on-demand group's start (1.2 h) its open stretch adds nothing."""
    summary = summarize(record(), elapsed_hours=elapsed)
    assert summary["on_demand_hours"] == 0.0 and summary["cost_usd"]["on_demand"] == 0.0


@pytest.mark.parametrize(
    ("measured", "words"),
    [
        (7.37, "work measured 7.37 h, declared 6.00 h (23 % slower than declared)"),
        (6.2, "work measured 6.20 h, declared 6.00 h (about as declared)"),
        (5.1, "work measured 5.10 h, declared 6.00 h (15 % faster than declared)"),
    ],
)
def test_the_log_ends_with_the_work_as_last_measured_the_figure_the_job_page_shows(measured, words):
    """The recipe's 25 %-slower pipeline said "17 % slower" at 18 % done and never again (a pace is
    said again only once it moves 10 %), while its job page said 7.37 h measured of 6.00 h declared:
    the log's last word on the work is now the summary's measured figure."""
    job = record(finished=True)
    summary = {**summarize(job, elapsed_hours=5.0), "work_hours": 6.0, "measured_work_hours": measured}
    lines = format_timeline(job, summary).splitlines()
    assert f"  {words}" in lines
    assert lines.index(f"  {words}") < len(lines) - 1  # the verdict stays last


def test_no_work_line_when_no_pace_was_measured():
    job = record(finished=True)
    summary = summarize(job, elapsed_hours=5.0)
    assert "measured_work_hours" not in summary
    assert "work measured" not in format_timeline(job, summary)
