"""What users and clouds wrote reaches the pages as text, never as markup, and one bad job cannot take a page down.

A user allowed to write one DAG's task state (Airflow's public task-state-store route) writes the job
record and live status the pages read; the market table holds what clouds and whoever can reach its
database wrote. So every string those can carry (and every DAG, run and task id, and the workload's
stderr tail) is replaced by a payload that names its field, and each page is parsed as a browser
parses it: the payloads must come out as text, never as a tag or an event handler.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pandas as pd
import pytest

from tests.support.plugin_seed import (
    finished_record,
    insert_task,
    market_frame,
    own_job_id,
    running_record,
    seed_market,
    write_state,
)

from .conftest import as_user

PAYLOAD = '<script>alert("{0}")</script>"><img src=x onerror=alert("{0}")>'
ID_PAYLOAD = '"><img src=x onerror=alert(1)>'  # a path segment holds no "/": the ids without </script>
DAG = "xss" + ID_PAYLOAD
TASK = "train" + ID_PAYLOAD
LIVE = ("skynomad_fine_tune", "bad_status_run", "fine_tune")  # a running job whose status has slack_hours "x"


def payload(where: str) -> str:
    return PAYLOAD.format(where)


def hostile(value, where: str, numbers: bool = False, keep: tuple[str, ...] = ()):
    """`value` with every string leaf (and number, when `numbers`) replaced by the payload naming its path;
    the values under the keys in `keep` stay as they are."""
    if isinstance(value, dict):
        return {k: v if k in keep else hostile(v, f"{where}.{k}", numbers, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [hostile(v, f"{where}.{i}", numbers, keep) for i, v in enumerate(value)]
    if isinstance(value, str) or (numbers and isinstance(value, int | float) and not isinstance(value, bool)):
        return payload(where)
    return value


def hostile_job(numbers: bool = False, keep: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """(record, status) of a job with a payload in every field, the stderr tail and an option's rank included."""
    record = finished_record()
    record["finished"] = False
    record.pop("summary")
    decision = next(t for t in record["timeline"] if t.get("options"))
    decision["options"][0]["rank"] = "RANK"
    record["timeline"] += [
        {"at_hours": 9.0, "event": "failed", "reason": "group failed", "detail": "STDERR"},
        {"at_hours": 9.1, "event": "workload output", "stderr_tail": ["STDERR"], payload("a key"): 1},
        {"at_hours": 9.2, "event": "cloud api", "mode": "spot", "zone": "z", "error": "ERROR"},
    ]
    _, status = running_record()
    return hostile(record, "record", numbers, keep), hostile(status, "status", numbers, keep)


class Parsed(HTMLParser):
    """The tags and the text of a page, as a browser reads them (character references decoded)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list]] = []
        self.chunks: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.chunks.append(data)

    @property
    def text(self) -> str:
        return " ".join(self.chunks)


def inert_text(html: str) -> str:
    """The page's text, after checking that no payload became a tag, an event handler or a script URL."""
    parsed = Parsed(html)
    for tag, attrs in parsed.tags:
        assert tag not in ("script", "img", "iframe", "object", "embed"), f"<{tag} {attrs}> in the page"
        for name, value in attrs:
            assert not name.startswith("on"), f"<{tag} {name}={value!r}> in the page"
            assert not (value or "").strip().lower().startswith("javascript:"), f"<{tag} {name}={value!r}>"
    assert "<script>alert(" not in html and "<img src=x" not in html
    return parsed.text


def deadline_verdicts(html: str) -> list[str]:
    """The deadline cell ("met" or "missed") of every dashboard row that has one: finished, readable rows."""
    return re.findall(r'<td class="(?:good|bad)">(met|missed)</td>', html)


def job_url(dag_id, run_id, task_id):
    return f"/skynomad/job/{dag_id}/{run_id}/{task_id}"


@pytest.fixture(scope="module")
def hostile_jobs(seeded):
    """Task instances whose ids, records and statuses hold payloads, and one whose status is not numbers."""
    jobs = {
        "strings": hostile_job(keep=("event",)),  # every narrated event, with payloads in its fields
        "everything": hostile_job(),  # event names, modes and segment ends too
        "numbers": hostile_job(numbers=True),  # not one number left: the page says it cannot read the record
    }
    for variant, (record, status) in jobs.items():
        key = (DAG, variant + ID_PAYLOAD, TASK)
        # The task's own job (the pages show no other), its id ending in a payload.
        own = own_job_id(*key).rsplit("-", 1)[0]
        record["job_id"], status["job_id"] = f"{own}-{payload('record.job_id')}", f"{own}-{payload('status.job_id')}"
        insert_task(*key, "deferred")
        write_state(*key, record, status)
    record, status = running_record(own_job_id(*LIVE))
    insert_task(*LIVE, "deferred")
    write_state(*LIVE, record, {**status, "slack_hours": "x"})
    return jobs


@pytest.mark.parametrize("variant", ["strings", "everything", "numbers"])
def test_every_field_of_a_job_reaches_its_page_as_text(client, hostile_jobs, variant):
    response = client.get(job_url(DAG, variant + ID_PAYLOAD, TASK), **as_user("admin"))
    assert response.status_code == 200, response.text[-2000:]
    text = inert_text(response.text)
    assert f"{DAG} / {variant}{ID_PAYLOAD} / {TASK}" in text  # the title, from the ids in the path
    if variant == "numbers":
        assert "could not be shown" in text
        return
    shown = ["record.job_id", "record.policy", "record.segments.0.zone"]
    if variant == "strings":
        options = "record.timeline.5.options.0"
        shown += [f"{options}.rank", f"{options}.market", "record.timeline.5.reason", "record.timeline.6.why"]
        shown += ["record.timeline.8.reason", "record.timeline.9.stderr_tail.0", "record.timeline.10.error"]
    for where in shown:
        assert payload(where) in text, where
    assert variant != "strings" or payload("a key") in text


def test_the_pages_render_ids_notes_and_stderr_that_a_path_could_not_carry_as_text():
    """What the routes cannot be reached with (a "/" in an id) still reaches the renderer as text."""
    from airflow_provider_skynomad.plugin.facts import job_facts
    from airflow_provider_skynomad.plugin.pages import job_page

    record, status = hostile_job(keep=("event",))
    text = inert_text(job_page(payload("title"), payload("ti_state"), job_facts(record, status), payload("note")))
    for where in ("title", "ti_state", "note", "record.timeline.9.stderr_tail.0"):
        assert payload(where) in text, where
    text = inert_text(job_page(payload("title"), payload("ti_state"), None, payload("note")))
    assert all(payload(where) in text for where in ("title", "ti_state", "note"))


def test_the_dashboard_shows_hostile_jobs_as_text(client, hostile_jobs):
    response = client.get("/skynomad/jobs", **as_user("admin"))
    assert response.status_code == 200, response.text[-2000:]
    text = inert_text(response.text)
    assert DAG in text and TASK in text and "strings" + ID_PAYLOAD in text
    assert payload("status.zone") in text


def test_a_dashboard_row_that_cannot_be_read_shows_as_such_and_the_page_stands(client, hostile_jobs):
    """A live status with slack_hours "x" (or a record without numbers) spoils its own row, nobody's page."""
    for user in ("admin", "viewer"):
        response = client.get("/skynomad/jobs", **as_user(user))
        assert response.status_code == 200, response.text[-2000:]
        text = " ".join(inert_text(response.text).split())
        assert "finished_run" in text and "running_run" in text and "bad_status_run" in text
        assert "this row could not be shown: status.slack_hours is 'x', not a number" in text
        # The totals count the rows that could be read, met or missed as each row says; other tests' finished
        # jobs share the database, and on a busy box one of theirs may have missed its deadline.
        met = re.search(r"deadlines met (\d+) of (\d+)", text)
        verdicts = deadline_verdicts(response.text)
        assert met and (int(met.group(1)), int(met.group(2))) == (verdicts.count("met"), len(verdicts)), text[:2000]
        assert int(met.group(1)) >= 1, text[:2000]
        seeded_row = re.search(r">finished_run</a>.*?</tr>", response.text, re.S)
        assert seeded_row and deadline_verdicts(seeded_row.group(0)) == ["met"], text[:2000]
    html = client.get("/skynomad/jobs", **as_user("admin")).text
    assert html.count("this row could not be shown") == 2  # bad_status_run and the "numbers" job


@pytest.mark.parametrize(
    ("record", "status", "why"),
    [
        (None, {"slack_hours": "x"}, "status.slack_hours is 'x', not a number"),
        (["a", "list"], None, "the record is ['a', 'list'], not an object"),
        ({"segments": [{"zone": "z"}]}, None, "record.segments.0 has no zone or no start_hours"),
        ({"timeline": "soon"}, None, "record.timeline is 'soon', not a list"),
        (
            {"summary": {"cost_usd": {"total": 1}, "deadline_met": "yes"}},
            None,
            "record.summary.deadline_met is 'yes', not true or false",
        ),
        ({"job": {"work_hours": float("nan")}}, None, "record.job.work_hours is nan, not a number"),
    ],
)
def test_each_dashboard_row_renders_alone(record, status, why):
    from airflow_provider_skynomad.plugin.jobs import Job
    from airflow_provider_skynomad.plugin.pages import dashboard_page

    good = finished_record()
    if record is None:
        record, _ = running_record()
    jobs = [
        Job("d", "bad", "t", -1, "deferred", None, record, status),
        Job("d", "good", "t", -1, "success", None, good),
    ]
    text = " ".join(inert_text(dashboard_page(jobs, 7, lambda job: f"job/{job.run_id}")).split())
    assert f"bad t this row could not be shown: {why}" in text
    assert (
        "good t success" in text and "$61.37" in text and "SkyNomad tasks 2" in text and "deadlines met 1 of 1" in text
    )


def test_the_job_page_of_a_status_that_cannot_be_read_says_what_is_wrong(client, hostile_jobs):
    response = client.get(job_url(*LIVE), **as_user("viewer"))
    assert response.status_code == 200
    text = " ".join(inert_text(response.text).split())
    assert "could not be shown: status.slack_hours is 'x', not a number" in text


def test_the_markets_page_shows_hostile_market_rows_as_text(client, seeded, tmp_path):
    """Zones, clouds, regions and instance types as the market table holds them (so a page that used
    them as markup would run whatever a probe, an import or a database user wrote there)."""
    from airflow_provider_skynomad.market.store.table import MarketTable

    frame = market_frame(markets=2, days=0.5)
    frame["instance_type"] = frame["zone"].map({z: payload(f"type {i}") for i, z in enumerate(frame["zone"].unique())})
    frame["zone"] = frame["zone"].map({z: payload(f"zone {i}") for i, z in enumerate(frame["zone"].unique())})
    frame["region"], frame["cloud"] = payload("region"), "gcp"
    url = f"sqlite:///{tmp_path / 'market.db'}"
    seed_market(url, frame)
    assert len(MarketTable(url).read()) == len(frame)  # stored as written
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        extra = json.dumps({"market_url": url, "cloud": "simulated"})
        session.add(Connection(conn_id="skynomad_hostile", conn_type="skynomad", extra=extra))
    response = client.get("/skynomad/markets", params={"conn_id": "skynomad_hostile"}, **as_user("admin"))
    assert response.status_code == 200, response.text[-2000:]
    text = inert_text(response.text)
    assert payload("zone 0") in text and payload("type 1") in text


def test_the_markets_page_renders_every_field_as_text():
    """The renderer alone, with a payload in every string it is given (the table's URL and the probe
    message included)."""
    import numpy as np

    from airflow_provider_skynomad.plugin.overview import Heatmap, MarketRow
    from airflow_provider_skynomad.plugin.pages import markets_page

    row = MarketRow(
        payload("market"), payload("cloud"), payload("zone"), payload("type"), 1, 2, 2.5, 9.0, 3.0, 0.4, True
    )
    t0 = pd.Timestamp("2025-10-04T00:00:00Z")
    heat = Heatmap([payload("heat row")], [t0, t0 + pd.Timedelta(hours=1)], 1.0, np.array([[0.5, np.nan]]))
    prices = pd.DataFrame(
        {
            "market": [payload("price market")] * 2,
            "observed_at": [t0, t0 + pd.Timedelta(hours=1)],
            "spot_price": [2.0, 2.5],
            "on_demand_price": [9.0, 9.0],
        }
    )
    prices["bucket_time"] = prices["observed_at"]
    html = markets_page(
        [row],
        heat,
        prices,
        [(payload("day"), 1.5)],
        days=1,
        max_age_hours=2,
        source=payload("source"),
        can_probe=True,
        probe_message=payload("message"),
    )
    text = inert_text(html)
    for where in ("market", "cloud", "heat row", "price market", "day", "source", "message"):
        assert payload(where) in text, where
