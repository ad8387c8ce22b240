"""The plugin's pages from a seeded market table and a finished and a running job, and who may see them.

The app is called as the api-server mounts it, with conftest.py's stand-in auth manager; the real
auth manager and api-server are in test_browser.py.
"""

from __future__ import annotations

import re

import pytest

from tests.support.plugin_seed import DEADLINE_HOURS, FINISHED, FINISHED_COST_USD, FINISHED_ZONES, HIDDEN, RUNNING

from .conftest import CONN_ID, MARKER_PASSWORD, as_user


def job_url(dag_id, run_id, task_id):
    return f"/skynomad/job/{dag_id}/{run_id}/{task_id}"


def text_of(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_the_job_page_of_a_finished_run_shows_its_zones_cost_deadline_and_why_it_moved(client):
    response = client.get(job_url(*FINISHED), **as_user("viewer"))
    assert response.status_code == 200, response.text
    html = response.text
    for zone in FINISHED_ZONES:
        assert zone in html
    assert f"${FINISHED_COST_USD:,.2f}" in html
    assert f"{DEADLINE_HOURS:.2f} h" in html and "deadline met" in text_of(html)
    assert 'class="chart gantt"' in html and "preempted" in html and "us-west1-a preempted 2 times in 1 h" in html
    assert "latest safe on-demand finish" in html and "uniform progress" in html and "all on-demand" in html
    assert "V=11.80" in html  # the last decisions' numbers
    weighed = " ".join(text_of(html).split())  # and the options that decision weighed, the one tried first marked
    assert "1 on-demand in europe-west1-c:a3-highgpu-8g 3.73" in weighed
    assert "spot in us-west1-a:a3-highgpu-8g -1.20" in weighed
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert 'http-equiv="refresh"' not in html  # final: no reloading


def test_the_job_page_of_a_running_job_is_live(client):
    html = client.get(job_url(*RUNNING), **as_user("viewer")).text
    assert "running for 4.50 h of 16.00 h" in html and "slack" in html and "deferred" in html
    assert "us-west1-a" in html and "$10.35" in html  # spend so far from the live status
    assert "latest safe switch to on-demand" in html and "would miss the deadline" in html
    assert 'http-equiv="refresh"' in html  # reloads itself while the task is deferred
    assert "$102.45" not in html  # no "saving" against on-demand before the job ends


def test_a_running_job_s_page_shows_what_its_trigger_saw_after_the_last_worker_visit(client, seeded):
    """A full worker pool delays the worker's visits, not the page: the trigger's newer look at the
    same job (jobs/live.py, in the connection's market database) is laid over the task state's."""
    from tests.support.live_rows import forge
    from tests.support.plugin_seed import insert_task, own_job_id, running_record, write_state

    key = ("skynomad_fine_tune", "busy_pool_run", "train")
    record, status = running_record(own_job_id(*key))
    insert_task(*key, "deferred")
    write_state(*key, record, status)
    later = {**status, "elapsed_hours": 6.25, "progress_pct": 55.0, "slack_hours": 3.1, "spend_usd": 14.4}
    forge(seeded["market_url"], own_job_id(*key), later)  # as its controller publishes it
    html = text_of(client.get(job_url(*key), **as_user("viewer")).text)
    assert "running for 6.25 h of 16.00 h" in html and "$14.40" in html and "55%" in html, html[-4000:]


def test_a_running_job_s_page_shows_the_moves_its_controller_made_since_the_hand_off(client, seeded):
    """The trigger controls the job and writes only the job table: the page's timeline and chart
    come from there while the job runs, not from the task state the worker wrote at the hand-off."""
    from airflow_provider_skynomad.jobs.record import JobRecord, Segment, task_key_of
    from airflow_provider_skynomad.jobs.table import JobTable
    from tests.support.plugin_seed import insert_task, own_job_id, running_record, write_state

    key = ("skynomad_fine_tune", "controlled_run", "train")
    record, status = running_record(own_job_id(*key))
    insert_task(*key, "deferred")
    write_state(*key, record, status)
    later = JobRecord.from_dict(record)
    later.segments[-1].close(2.0, "preempted")
    later.note(2.0, "preempted", zone="us-west1-a", progress="20%")
    later.segments.append(Segment("m2", "europe-west4-a", "europe-west4", "on-demand", 2.0, 10.3, 0.2, ["i-10"]))
    later.note(2.0, "launch", mode="on-demand", zone="europe-west4-a", usd_per_h=10.3)
    with JobTable(seeded["market_url"]) as table:
        table.put(later, owner="trigger-test", task_key=task_key_of(later.job_id))
    html = client.get(job_url(*key), **as_user("viewer")).text
    assert "europe-west4-a" in html and "preempted" in html, text_of(html)[-3000:]


def test_the_ui_url_template_of_an_unmapped_task_means_map_index_minus_one(client):
    for suffix in ("?map_index={MAP_INDEX}", "?map_index=", "?map_index=-1"):
        response = client.get(job_url(*FINISHED) + suffix, **as_user("viewer"))
        assert response.status_code == 200 and "deadline met" in text_of(response.text), suffix


def test_a_task_that_failed_before_starting_a_job_says_so(client, seeded):
    """An input error (say an impossible deadline) fails the task before any record is written: the
    job tab says nothing was launched and points to the log, not "has not started a job (yet)"."""
    from tests.support.plugin_seed import insert_task

    insert_task("skynomad_fine_tune", "refused_run", "fine_tune", "failed")
    text = " ".join(
        text_of(client.get(job_url("skynomad_fine_tune", "refused_run", "fine_tune"), **as_user("viewer")).text).split()
    )
    assert "failed before it started a job" in text and "nothing was launched" in text and "log" in text
    assert "(yet)" not in text


def test_a_task_without_a_record_and_an_unknown_task(client):
    assert client.get(job_url("skynomad_fine_tune", "nope", "fine_tune"), **as_user("admin")).status_code == 404


def test_the_dashboard_lists_the_jobs_a_user_may_read_with_totals(client):
    admin = client.get("/skynomad/jobs", **as_user("admin")).text
    viewer = client.get("/skynomad/jobs", **as_user("viewer")).text
    assert "finished_run" in admin and "running_run" in admin and "hidden_run" in admin
    assert "finished_run" in viewer and "running_run" in viewer
    assert "hidden_run" not in viewer and "secret_dag" not in viewer and "asia-south2-b" not in viewer
    assert "deadlines met" in viewer and "saved against on-demand" in viewer and "Preemptions per zone" in viewer
    assert "/skynomad/job/skynomad_fine_tune/finished_run/fine_tune" in viewer


def test_the_markets_page_draws_the_heatmap_and_the_table_and_never_the_password(client, seeded):
    response = client.get("/skynomad/markets", params={"conn_id": CONN_ID, "days": 3}, **as_user("admin"))
    assert response.status_code == 200, response.text
    html = response.text
    assert 'id="availability-heatmap"' in html and html.count('class="cell"') > 6
    assert "Prices (USD per instance-hour)" in html and "<polyline" in html
    for zone in FINISHED_ZONES:
        assert zone in html
    assert "forecast lifetime" in html and "fresh" in html
    assert MARKER_PASSWORD not in html
    assert 'id="trigger-probe"' in html  # the admin may run the probe DAG
    assert 'id="trigger-probe"' not in client.get("/skynomad/markets", **as_user("viewer")).text


def test_the_markets_page_of_the_simulated_cloud_is_on_its_replayed_clock(client, tmp_path):
    """The simulated cloud stamps its probes with its trace's time (2025, `speed` times faster), not the
    wall clock: the page's window and the probe ages are read on that clock, or a running demo's
    markets page is empty and every market stale; the imported trace's rows after that clock's now
    are not shown as observed."""
    import json

    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from tests.support.plugin_seed import simulated_cloud_market

    _, extra = simulated_cloud_market(tmp_path)
    with create_session() as session:
        session.add(
            Connection(
                conn_id="skynomad_sim_clock",
                conn_type="skynomad",
                extra=json.dumps(extra),
            )
        )
    html = client.get("/skynomad/markets", params={"conn_id": "skynomad_sim_clock", "days": 3}, **as_user("admin")).text
    assert ": 3 markets." in html and html.count('class="cell"') > 6
    for zone in FINISHED_ZONES:
        assert zone in html
    assert "fresh" in html and "stale" not in text_of(html).split("older than")[-1]
    assert "0.17 h ago" in html and "zone3" not in html  # nothing from after the clock's now


def test_the_markets_page_shows_what_the_deployments_running_jobs_hold(client, tmp_path):
    """Two running jobs publish their groups in one zone of the market database: the page says so
    in that zone's row (a finished job holds nothing, and no other row claims anything)."""
    import json

    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from tests.support.live_rows import forge
    from tests.support.plugin_seed import simulated_cloud_market

    url, extra = simulated_cloud_market(tmp_path)
    with create_session() as session:
        session.add(Connection(conn_id="skynomad_fleet", conn_type="skynomad", extra=json.dumps(extra)))
    for job_id, state in (("a", "running"), ("b", "running"), ("c", "finished")):
        status = {"job_id": job_id, "state": state, "zone": FINISHED_ZONES[0], "market": FINISHED_ZONES[0]}
        forge(url, job_id, {**status, "mode": "spot", "instances": 2, "launched_at_cloud_hours": 1.0})
    html = client.get("/skynomad/markets", params={"conn_id": "skynomad_fleet", "days": 3}, **as_user("admin")).text
    assert "your jobs" in html
    row = next(r for r in html.split("<tr>") if f"<td>{FINISHED_ZONES[0]}</td>" in r)
    assert "4 in 2 jobs" in row
    assert html.count(" in 2 jobs") == 1 and " in 1 job<" not in html


def test_money_lost_against_on_demand_reads_with_the_sign_in_front():
    """A job that cost more than all on-demand shows "-$0.89" saved, not "$-0.89"."""
    from airflow_provider_skynomad.plugin.render import usd

    assert usd(-0.89) == "-$0.89" and usd(1234.5) == "$1,234.50" and usd(0.0) == "$0.00" and usd(None) == "–"


def test_the_markets_page_reads_only_skynomad_connections_the_user_may_read(client, seeded):
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        if session.query(Connection).filter_by(conn_id="other_db").first() is None:
            session.add(Connection(conn_id="other_db", conn_type="postgres", host="db.internal", password="pw-12345"))
    assert client.get("/skynomad/markets", params={"conn_id": CONN_ID}, **as_user("viewer")).status_code == 403
    response = client.get("/skynomad/markets", params={"conn_id": "other_db"}, **as_user("admin"))
    assert response.status_code == 400 and "pw-12345" not in response.text


def test_no_page_renders_the_connection_password(client):
    for url in (job_url(*FINISHED), job_url(*RUNNING), "/skynomad/jobs", f"/skynomad/markets?conn_id={CONN_ID}"):
        response = client.get(url, **as_user("admin"))
        assert response.status_code == 200
        assert MARKER_PASSWORD not in response.text


def test_a_market_url_with_a_password_is_named_without_it(seeded):
    from types import SimpleNamespace

    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig
    from airflow_provider_skynomad.market.store.table import MarketTable
    from tests.support.plugin_seed import empty_markets_page

    conn = SimpleNamespace(
        conn_type="skynomad",
        host="db.internal",
        login="market",
        password=MARKER_PASSWORD,
        port=5432,
        schema="m",
        extra="{}",
        extra_dejson={},
    )
    table = MarketTable(SkyNomadConfig.from_connection(conn).market_url)  # no connection is made
    html = empty_markets_page(table.display_url)
    table.close()
    assert "db.internal" in html and MARKER_PASSWORD not in html


@pytest.mark.parametrize(
    "url", [job_url(*FINISHED), "/skynomad/jobs", "/skynomad/markets", "/skynomad/openapi.json", "/skynomad/docs"]
)
def test_without_a_session_every_page_is_refused(client, url):
    response = client.get(url)
    assert response.status_code in (401, 403, 404), url
    assert response.status_code != 200
    assert client.get(url, headers={"Cookie": "_token=forged"}).status_code in (403, 404)


def test_a_user_cannot_open_the_job_page_of_a_dag_they_may_not_read(client):
    assert client.get(job_url(*HIDDEN), **as_user("viewer")).status_code == 403
    assert client.get(job_url(*HIDDEN), **as_user("admin")).status_code == 200


def test_only_users_who_may_run_the_probe_dag_can_trigger_it(client):
    assert client.post("/skynomad/probe").status_code == 401
    assert client.post("/skynomad/probe", **as_user("viewer")).status_code == 403
    admin = as_user("admin")["headers"]  # from the markets page: browsers send its origin with the form
    response = client.post("/skynomad/probe", follow_redirects=False, headers={**admin, "Origin": "http://testserver"})
    assert response.status_code == 303 and "markets?probe=" in response.headers["location"]
