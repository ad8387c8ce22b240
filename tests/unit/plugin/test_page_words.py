"""The plugin pages' words: a count of one is singular."""

from __future__ import annotations

from airflow_provider_skynomad.plugin.pages import dashboard_page
from tests.support.plugin_seed import empty_markets_page


def test_the_dashboard_says_1_day_not_1_days():
    html = dashboard_page([], days=1, job_href=lambda *a: "")
    assert "the last 1 day that you may read" in html
    assert ">1 day</a>" in html and ">7 days</a>" in html
    assert "1 days" not in html


def test_the_markets_page_says_1_day_not_1_days():
    html = empty_markets_page("sqlite://", days=1)
    assert "The last 1 day of the market table" in html
    assert "1 days" not in html


def test_a_switch_to_the_on_demand_net_in_the_same_zone_is_not_called_a_move():
    """Deadline pressure put the job on on-demand where it ran: the chart says so, not "moved away"."""
    from airflow_provider_skynomad.jobs.record import Segment
    from airflow_provider_skynomad.plugin.facts import job_facts
    from tests.support.plugin_seed import running_record

    record, status = running_record("sn-net000000000001", zone="us-east4-a")
    record["segments"][0].update(end_hours=3.0, end="migrated")
    net = Segment("m", "us-east4-a", "us-east4", "on-demand", 3.0, 10.3, 0.2, ["i-11"])
    record["segments"].append(net.__dict__)
    record["timeline"].append({"at_hours": 3.0, "event": "deadline pressure", "why": ""})
    # The launch that replaced the group names the segment it ended, and that the deadline caused it.
    launch = {"zone": "us-east4-a", "mode": "on-demand", "usd_per_h": 10.3}
    record["timeline"].append(
        {"at_hours": 3.0, "event": "launch", **launch, "ends_segment": 0, "cause": "deadline pressure"}
    )
    (marker,) = job_facts(record, status).markers
    assert marker["why"] == "switched to on-demand to stay on time"
