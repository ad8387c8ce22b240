"""The job page says the deadline and where the job stands against it on its first load: met or MISSED once it
ended, on track or AT RISK while it runs, even before the trigger's first live publish (record, no status)."""

from __future__ import annotations

import copy
import re

from tests.support.plugin_seed import DEADLINE_HOURS, finished_record, running_record

from .test_hostile_fields import inert_text


def _page(record: dict, status: dict | None, ti_state: str = "deferred") -> str:
    from airflow_provider_skynomad.plugin.facts import job_facts
    from airflow_provider_skynomad.plugin.pages import job_page

    html = job_page("d / r / t", ti_state, job_facts(record, status), "")
    return " ".join(inert_text(html).split())


def test_before_the_first_live_publish_the_page_says_the_slack_the_status_will_say():
    from airflow_provider_skynomad.plugin.facts import job_facts

    record, status = running_record()  # 4.5 h in, 4 of 10 h done on spot, deadline 16 h: slack 5.3 h
    assert job_facts(record, None).slack_hours == job_facts(record, status).slack_hours == status["slack_hours"]
    first = _page(record, None)
    assert "running for 4.50 h of 16.00 h, slack 5.30 h" in first
    assert "deadline 16.00 h: on track" in first
    assert "deadline 16.00 h: on track" in _page(record, status)


def test_a_job_that_even_on_demand_cannot_bring_in_on_time_is_at_risk_on_the_first_load():
    record, _ = running_record()
    record = copy.deepcopy(record)
    record["state"].update(elapsed_hours=14.0, progress_hours=1.0)  # 9 h of work left, 2 h to the deadline
    text = _page(record, None)
    assert "deadline 16.00 h: AT RISK" in text
    assert "slack -7.20 h: deadline at risk, even on-demand from now would finish after it" in text


def test_on_demand_pays_no_start_up_again():
    from airflow_provider_skynomad.plugin.facts import job_facts

    record, _ = running_record()
    record = copy.deepcopy(record)
    record["state"]["running"]["mode"] = "on-demand"
    assert round(job_facts(record, None).slack_hours, 3) == 5.5  # 16 - 4.5 - 6, no cold start


def test_a_finished_job_says_met_or_missed_beside_its_deadline():
    met = _page(finished_record(), None, "success")
    assert f"deadline {DEADLINE_HOURS:.2f} h: met" in met
    record = finished_record()
    record["summary"] = {**record["summary"], "deadline_met": False}
    assert f"deadline {DEADLINE_HOURS:.2f} h: MISSED" in _page(record, None, "failed")


def test_a_tab_opened_before_the_job_s_record_reloads_itself_until_it_is_there():
    from airflow_provider_skynomad.plugin.pages import job_page

    for state in ("queued", "running", "deferred", "up_for_retry", None):
        html = job_page("d / r / t", state, None, "This task has no SkyNomad job record (yet).")
        assert 'http-equiv="refresh"' in html and "reloads every 10 s" in html, state
    for state in ("success", "failed", "upstream_failed", "skipped"):
        html = job_page("d / r / t", state, None, "This task failed before it started a job.")
        assert 'http-equiv="refresh"' not in html and "reloads" not in html, state


def test_the_dashboard_says_on_track_or_at_risk_for_a_running_job_and_met_for_a_finished_one():
    from airflow_provider_skynomad.plugin.jobs import Job
    from airflow_provider_skynomad.plugin.pages import dashboard_page

    record, status = running_record()
    late = copy.deepcopy(record)
    late["state"].update(elapsed_hours=14.0, progress_hours=1.0)
    jobs = [
        Job("d", "r1", "t", -1, "deferred", None, record, None),  # before the first publish
        Job("d", "r2", "t", -1, "deferred", None, late, None),
        Job("d", "r3", "t", -1, "success", None, finished_record()),
    ]
    text = " ".join(inert_text(dashboard_page(jobs, 7, lambda job: f"job/{job.run_id}")).split())
    assert re.search(r"r1 t deferred .* 5\.30 h \$[\d.,]+ – on track d r2", text), text
    assert re.search(r"r2 t deferred .* -7\.20 h \$[\d.,]+ – at risk d r3", text), text
    assert "$61.37 $29.32 met" in text and "deadlines met 1 of 1" in text


def test_a_new_on_demand_group_s_start_up_is_counted_before_and_after_the_first_publish():
    from airflow_provider_skynomad.plugin.facts import job_facts

    record, _ = running_record()
    record = copy.deepcopy(record)
    record["state"]["running"]["mode"] = "on-demand"
    record["state"].update(elapsed_hours=4.4, running_since_hours=4.4, warmup_left_hours=0.25)  # just launched
    assert round(job_facts(record, None).slack_hours, 3) == 5.35  # 16 - 4.4 - 6 - 0.25 of start-up to pay
    record["timeline"].append({"at_hours": 4.5, "event": "stay", "zone": "us-west1-a"})  # 0.1 h later
    assert round(job_facts(record, None).slack_hours, 3) == 5.35  # 16 - 4.5 - 6 - 0.15 left
