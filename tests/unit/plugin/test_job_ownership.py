"""The job page shows only its own task's job (issue 31, break 2).

A viewer may write the task state of a DAG they may edit (Airflow's public task-state route), here
``skynomad_fine_tune``; the victim's job runs in ``secret_dag``, whose page the viewer is refused.
Writing the victim's job id (and a connection id) into their own task's state must not show them the
victim's zone, marker or figures, and a page view must not create tables in any database.

The attacker's task instances run 30 days ago, so the dashboard's default week (other tests'
totals) does not list them.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.plugin_seed import HIDDEN, insert_task, own_job_id, running_record, write_state

from .conftest import CONN_ID, as_user

VICTIM_ZONE = "asia-south2-b"  # where the hidden job runs (plugin_seed.seed_jobs)
LONG_AGO = datetime.now(UTC) - timedelta(days=30)
_minutes = itertools.count()


def long_ago() -> datetime:
    """30 days ago, a minute apart per task instance (one DAG run per logical date)."""
    return LONG_AGO - timedelta(minutes=next(_minutes))


def job_url(dag_id, run_id, task_id):
    return f"/skynomad/job/{dag_id}/{run_id}/{task_id}"


def text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def attacker_task(run_id: str, record: dict | None, status: dict | None) -> tuple[str, str, str]:
    key = ("skynomad_fine_tune", run_id, "fine_tune")
    insert_task(*key, "deferred", when=long_ago())
    write_state(*key, record, status)
    return key


def add_sqlite_connection(conn_id: str, path) -> None:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        extra = json.dumps({"market_url": f"sqlite:///{path}", "cloud": "simulated"})
        session.add(Connection(conn_id=conn_id, conn_type="skynomad", extra=extra))


def tables(path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {name for (name,) in db.execute("select name from sqlite_master where type = 'table'")}


def test_break_2_a_task_whose_state_names_another_job_shows_an_error_not_that_job(client, seeded):
    assert client.get(job_url(*HIDDEN), **as_user("viewer")).status_code == 403
    victim_id = own_job_id(*HIDDEN)
    record, status = running_record(victim_id, VICTIM_ZONE)
    key = attacker_task("copied_victim_run", record, {**status, "conn_id": CONN_ID})
    response = client.get(job_url(*key), **as_user("viewer"))
    assert response.status_code == 200
    page = text(response.text)
    assert f"this task's state names job '{victim_id}', which is not this task's job" in page
    assert VICTIM_ZONE not in page and "running for" not in page


def test_break_2_a_status_naming_another_job_does_not_bring_that_job_s_live_status(client, seeded):
    """The attacker's own record, and a status naming the victim's job and the victim's connection:
    the victim's live row (in that connection's database) must not reach the attacker's page."""
    from tests.support.live_rows import publish_held

    victim_id = own_job_id(*HIDDEN)
    _, victim_status = running_record(victim_id, VICTIM_ZONE)
    publish_held(seeded["market_url"], victim_id, {**victim_status, "elapsed_hours": 7.77, "spend_usd": 77.7})
    key = ("skynomad_fine_tune", "pointed_status_run", "fine_tune")
    record, status = running_record(own_job_id(*key))
    attacker_task(key[1], record, {**status, "job_id": victim_id, "conn_id": CONN_ID})
    page = text(client.get(job_url(*key), **as_user("viewer")).text)
    assert "which is not this task's job" in page
    assert VICTIM_ZONE not in page and "$77.70" not in page and "7.77 h" not in page
    dashboard = text(client.get("/skynomad/jobs", params={"days": 60}, **as_user("viewer")).text)
    assert "pointed_status_run" in dashboard and "which is not this task's job" in dashboard
    assert VICTIM_ZONE not in dashboard


def test_break_2_a_connection_named_in_task_state_is_never_read_nor_written(client, seeded, tmp_path):
    """The page reads the connection the DAG declares for the task, never the one task state names:
    a third database (a connection the viewer may not read) gets no tables from a page view."""
    third = tmp_path / "third.db"
    with sqlite3.connect(third) as db:
        db.execute("create table unrelated (x integer)")
    add_sqlite_connection("skynomad_third", third)
    key = ("skynomad_fine_tune", "third_conn_run", "fine_tune")
    record, status = running_record(own_job_id(*key))
    attacker_task(key[1], record, {**status, "conn_id": "skynomad_third"})
    response = client.get(job_url(*key), **as_user("viewer"))
    assert response.status_code == 200 and "running for 4.50 h" in text(response.text)
    assert tables(third) == {"unrelated"}


@pytest.mark.parametrize("exists", [True, False])
def test_break_2_a_page_view_creates_no_table_in_the_declared_database(client, seeded, tmp_path, exists):
    """A DAG's declared connection whose database has no job tables (no job wrote there yet): the page
    shows the task state's copy and leaves the database as it found it (no tables; no file made)."""
    from tests.support.plugin_seed import declare_dag

    conn_id, path = f"skynomad_fresh_{exists}", tmp_path / "fresh.db"
    if exists:
        with sqlite3.connect(path) as db:
            db.execute("create table unrelated (x integer)")
    add_sqlite_connection(conn_id, path)
    dag_id = f"fresh_dag_{exists}"
    declare_dag(dag_id, ("fine_tune",), conn_id)
    key = (dag_id, "fresh_run", "fine_tune")
    record, status = running_record(own_job_id(*key))
    insert_task(*key, "deferred", when=long_ago())
    write_state(*key, record, {**status, "conn_id": conn_id})
    response = client.get(job_url(*key), **as_user("admin"))
    assert response.status_code == 200 and "running for 4.50 h" in text(response.text)
    assert tables(path) == {"unrelated"} if exists else not path.exists()


def test_a_markets_page_view_creates_no_live_status_or_spend_table(client, seeded, tmp_path):
    """The markets page reads what jobs and probes published beside the market table; where nothing
    was published yet it shows nothing held and no spend, and leaves the database as it found it."""
    from tests.support.plugin_seed import simulated_cloud_market

    url, extra = simulated_cloud_market(tmp_path)
    before = tables(tmp_path / "market.db")
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        session.add(Connection(conn_id="skynomad_untouched", conn_type="skynomad", extra=json.dumps(extra)))
    response = client.get("/skynomad/markets", params={"conn_id": "skynomad_untouched"}, **as_user("admin"))
    assert response.status_code == 200 and ": 3 markets." in response.text
    assert "job_live_status" not in before and tables(tmp_path / "market.db") == before
