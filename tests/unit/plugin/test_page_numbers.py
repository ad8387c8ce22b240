"""The job page's figures say the job on the basis its summary reports it (issue 32, "One set of numbers")."""

from __future__ import annotations

from airflow_provider_skynomad.plugin.facts import job_facts


def _record(**extra) -> dict:
    segment = {
        "market": "m",
        "zone": "europe-west1-c",
        "region": "europe-west1",
        "mode": "spot",
        "start_hours": 0.0,
        "usd_per_hour": 2.0,
        "launch_delay_hours": 0.2,
        "instance_ids": ["i-1"],
        "end_hours": 2.3,
        "end": "finished",
    }
    return {
        "job_id": "j",
        "policy": "skynomad",
        "finished": True,
        "deadline_hours": 10.0,
        "job": {"work_hours": 2.18, "cold_start_hours": 0.2, "deadline_hours": 10.0},
        "state": {"progress_hours": 2.18},
        "segments": [segment],
        "timeline": [],
        **extra,
    }


def test_checkpointed_progress_is_said_on_the_measured_work_the_summary_reports_and_names_the_declared():
    summary = {"work_hours": 2.0, "measured_work_hours": 2.088, "elapsed_hours": 2.3, "cost_usd": {"total": 4.6}}
    facts = job_facts(_record(summary=summary))
    assert round(facts.work_hours, 3) == 2.088
    assert round(facts.progress_hours, 3) == 2.088
    assert facts.declared_work_hours == 2.0


def test_a_job_at_its_declared_work_shows_the_declared_work_only():
    summary = {"work_hours": 2.0, "elapsed_hours": 2.3, "cost_usd": {"total": 4.6}}
    facts = job_facts(_record(summary=summary))
    assert facts.work_hours == 2.0
    assert round(facts.progress_hours, 3) == 2.0
    assert facts.declared_work_hours is None


def test_a_running_job_s_progress_is_on_its_measured_work_not_the_planning_bound():
    pace = {"declared_work_hours": 2.0, "productive_hours": 1.05, "fraction": 0.5, "checkpoints": 2}
    record = _record(finished=False, pace=pace, state={"progress_hours": 1.09})
    record["segments"][0].update(end_hours=None, end=None)
    facts = job_facts(record, {"elapsed_hours": 1.3})
    assert round(facts.work_hours, 3) == 2.1
    assert round(facts.progress_hours, 3) == 1.05
    assert facts.declared_work_hours == 2.0


def test_the_progress_curve_drops_at_a_preemption_to_the_share_the_log_says_was_checkpointed():
    from airflow_provider_skynomad.jobs.narrate import say

    record = _record(finished=False, state={"progress_hours": 0.7})
    first = dict(record["segments"][0], end_hours=2.0, end="preempted")
    again = dict(record["segments"][0], start_hours=2.1, end_hours=None, end=None)
    record["segments"] = [first, again]
    preempted = {"at_hours": 2.0, "event": "preempted", "zone": "europe-west1-c", "progress": "35%"}
    record["timeline"] = [preempted]
    facts = job_facts(record, {"elapsed_hours": 2.2})
    at_preemption = [p for h, p in facts.progress_points if h == 2.0]
    assert round(at_preemption[-1] / facts.work_hours, 2) == 0.35
    assert round(facts.progress_points[-1][1] / facts.work_hours, 2) == 0.35  # still warming up there
    assert say(preempted) == "[t=2.00 h] preempted in europe-west1-c with 35% of the work checkpointed"
