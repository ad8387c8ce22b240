"""SkyNomadOperator on a worker, driven directly: defer, events, retries, bad inputs, on_kill."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pandas as pd
import pytest
from airflow.sdk import DAG, AsyncCallback, DeadlineAlert, DeadlineReference
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_skynomad.clouds.base import GroupHandle, GroupStatus
from airflow_provider_skynomad.jobs.deadline import resolve_deadline_hours
from airflow_provider_skynomad.jobs.record import RECORD_KEY
from airflow_provider_skynomad.market.store.table import MarketTable
from airflow_provider_skynomad.operators.skynomad import SkyNomadInputError, SkyNomadOperator, on_deadline_missed
from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger
from tests.support.airflow_env import seed_market
from tests.support.fakes import FakeCloud


class FakeStore:
    """Stands in for context["task_state_store"] (same get/set signature); survives 'crashes'."""

    def __init__(self):
        self.data = {}
        self.writes = 0

    def get(self, key, default=None):
        value = self.data.get(key)
        return json.loads(value) if value is not None else default

    def set(self, key, value, *, retention=None):
        self.data[key] = json.dumps(value)  # must be JSON, like the real store
        self.writes += 1


class FakeTI:
    dag_id, run_id, task_id, map_index = "dag", "manual__1", "job", -1

    def __init__(self, try_number=1, max_tries=None):
        self.try_number, self.max_tries = try_number, max_tries
        self.id = f"0190a7e2-0000-7000-8000-00000000000{try_number}"  # Airflow's id of the try
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def context_for(store, try_number=1, started=None, max_tries=None):
    started = started or datetime.now(UTC)
    run = SimpleNamespace(start_date=started, run_after=started, logical_date=started)
    return {"ti": FakeTI(try_number, max_tries), "dag_run": run, "task_state_store": store}


@pytest.fixture
def now(gcp_frame):
    return gcp_frame["observed_at"].min() + pd.Timedelta(hours=60)


@pytest.fixture
def cloud(skynomad_home, gcp_frame, now, monkeypatch):
    seed_market(gcp_frame, until=now + pd.Timedelta(seconds=1))
    fake = FakeCloud(now)
    monkeypatch.setattr("airflow_provider_skynomad.operators.skynomad.make_cloud", lambda config: fake)
    monkeypatch.setattr("airflow_provider_skynomad.hooks.skynomad.make_cloud", lambda config: fake)
    return fake


def make_op(**kwargs):
    params = dict(task_id="job", work_hours=6.0, deadline=timedelta(hours=10), decision_step_minutes=10)
    params.update(kwargs)
    with DAG("dag", schedule=None, start_date=datetime(2025, 1, 1)):
        return SkyNomadOperator(**params)


def defer(op, context) -> SkyNomadTrigger:
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    return info.value.trigger


def latest(store) -> dict | None:
    """The job's record as its controller left it (the job table), else the worker's (task state)."""
    from airflow_provider_skynomad.jobs.table import JobTable

    data = store.get(RECORD_KEY)
    if data is None:
        return None
    with JobTable() as jobs:
        stored = jobs.load(data["job_id"])
    return stored.record.to_dict() if stored else data


@contextlib.contextmanager
def controlling(store, try_number: int = 1, **op_kwargs):
    """The job's controller, as its trigger opens it (the job table's record, the same cloud)."""
    import logging

    from airflow_provider_skynomad.jobs.contract import ControllerArgs
    from airflow_provider_skynomad.jobs.controller import Controller

    op, context = make_op(**op_kwargs), context_for(store, try_number=try_number)
    runner = op._runner_for(context)
    args = ControllerArgs(latest(store)["job_id"], op.skynomad_conn_id, runner.params, runner.task)
    table = MarketTable(runner.config.market_url)
    table.create()
    try:
        yield Controller.open(args, runner.config, runner.cloud, table, logging.getLogger("test.controller"))
    finally:
        table.close()
        runner.close()


class _Found:
    """A look that found `event` (a `Watch` stand-in): what the controller's step acts on."""

    seen = None

    def __init__(self, event) -> None:
        self.event = event

    def step(self, cloud, markets, policy):
        return self.event, ""


def control(store, event: dict, try_number: int = 1, late_hours: float = 0.0, **op_kwargs):
    """One look's finding acted on by the job's controller, as its trigger does; when that ended the
    job, the outcome reported by a worker, as Airflow does. The task's result (its summary) when the
    job ended, else the job's record as the controller left it. `late_hours`: how late the
    controller's step started (a busy triggerer), as the trigger measures it."""
    from airflow_provider_skynomad.jobs.events import JobEvent
    from airflow_provider_skynomad.planner.actions import Decision

    with controlling(store, try_number, **op_kwargs) as controller:
        if late_hours:
            controller.steps.learn_lag(late_hours, late_hours * controller.steps.run.config.wall_seconds_per_cloud_hour)
        decision = event.get("decision")
        look = {k: v for k, v in event.items() if k in JobEvent.__dataclass_fields__}
        found = JobEvent(**{**look, "decision": Decision.from_dict(decision) if decision else None})
        controller.watch = _Found(found)  # the look found `event`: the controller's step acts on it
        outcome = controller.step().outcome
    if outcome is None:
        return latest(store)
    return make_op(**op_kwargs).execute_complete(context_for(store, try_number=try_number), outcome.to_dict())


def market_rows() -> int:
    table = MarketTable()
    try:
        return len(table.read())
    finally:
        table.close()


# -- deferral ----------------------------------------------------------------------------------


def test_execute_launches_then_defers_with_a_serialisable_trigger(cloud):
    store = FakeStore()
    trigger = defer(make_op(), context_for(store))
    assert len(cloud.launches) == 1
    path, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs
    rebuilt = SkyNomadTrigger(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)
    assert set(kwargs) == {"job_id", "conn_id", "params", "task", "min_event_seconds"}  # the contract, once
    record = store.get(RECORD_KEY)
    # The controller's record (job table) is the worker's at the hand-off; the task state keeps it too.
    assert latest(store) == record and record["job_id"] == kwargs["job_id"]
    assert record["group"]["zone"] == cloud.launches[0].zone and record["seq"] == 1
    # Instances are tagged with the job; the workload's env carries no secrets, only the cold start.
    tags = cloud.launches[0].tags
    assert tags["skynomad-job"] == record["job_id"] and tags["skynomad-dag"] == "dag"
    assert set(cloud.launches[0].env) == {"SKYNOMAD_COLD_START_HOURS"}


def test_retry_after_a_crash_reconnects_instead_of_launching_again(cloud):
    store = FakeStore()
    defer(make_op(), context_for(store))
    group = latest(store)["group"]
    # The worker dies; the retry (a new operator object) finds the record and re-defers.
    second = defer(make_op(), context_for(store, try_number=2))
    assert len(cloud.launches) == 1
    assert second.args.job_id == latest(store)["job_id"] and latest(store)["group"] == group


def test_a_clear_starts_a_new_job_and_ends_the_last_one_while_a_retry_reconnects(cloud):
    store = FakeStore()
    first = defer(make_op(retries=1), context_for(store, max_tries=1))
    first_group = latest(store)["group"]
    retry = defer(make_op(retries=1), context_for(store, try_number=2, max_tries=1))
    assert len(cloud.launches) == 1 and retry.args.job_id == first.args.job_id
    assert latest(store)["group"] == first_group
    old_job = store.get(RECORD_KEY)["job_id"]
    # Cleared after try 2: Airflow sets max_tries to 2 + retries; try 3 is a new job.
    cleared = defer(make_op(retries=1), context_for(store, try_number=3, max_tries=3))
    record = store.get(RECORD_KEY)
    assert record["job_id"] != old_job and record["job_id"].split("-")[:2] == old_job.split("-")[:2]
    assert len(cloud.launches) == 2 and cloud.launches[1].tags["skynomad-job"] == record["job_id"]
    assert cloud.poll(GroupHandle.from_dict(first_group)) is GroupStatus.TERMINATED
    assert cleared.args.job_id == record["job_id"] and record["group"]["client_token"].startswith(record["job_id"])


def test_a_cleared_try_that_cannot_start_a_new_job_leaves_the_last_one_as_it_was(cloud):
    store = FakeStore()
    defer(make_op(retries=1), context_for(store, max_tries=1))
    old = store.get(RECORD_KEY)
    cloud.hours = 5.0  # the market table is now older than max_market_age: no new job may start
    with pytest.raises(SkyNomadInputError, match="stale"):
        make_op(retries=1).execute(context_for(store, try_number=2, max_tries=2))
    assert store.get(RECORD_KEY) == old and len(cloud.launches) == 1
    assert cloud.poll(GroupHandle.from_dict(old["group"])) is GroupStatus.RUNNING


def test_crash_in_the_middle_of_a_launch_is_finished_with_the_same_client_token(cloud, monkeypatch):
    store = FakeStore()
    real_launch = cloud.launch

    def launch_then_die(request):
        real_launch(request)  # the cloud starts the group ...
        raise SystemExit("worker killed")  # ... and the worker dies before recording it

    monkeypatch.setattr(cloud, "launch", launch_then_die)
    with pytest.raises(SystemExit):
        make_op().execute(context_for(store))
    assert store.get(RECORD_KEY)["pending"] is not None
    monkeypatch.setattr(cloud, "launch", real_launch)
    trigger = defer(make_op(), context_for(store, try_number=2))
    assert len(cloud.launches) == 1 and len(cloud.groups) == 1  # same token: same group
    assert trigger.args.job_id == latest(store)["job_id"]
    assert latest(store)["group"]["client_token"] == cloud.launches[0].client_token
    assert store.get(RECORD_KEY)["pending"] is None


# -- events ------------------------------------------------------------------------------------


def _event(kind, seq, elapsed, progress, decision=None):
    return {
        "kind": kind,
        "seq": seq,
        "elapsed_hours": elapsed,
        "progress_hours": progress,
        "status": None,
        "decision": decision,
        "reason": "",
    }


def test_repeated_event_is_ignored(cloud):
    store = FakeStore()
    op = make_op()
    defer(op, context_for(store))
    handle = next(iter(cloud.groups.values()))
    cloud.status[handle.client_token] = GroupStatus.PREEMPTED
    cloud.hours = 1.0
    control(store, _event("preempted", 1, 1.0, 0.8))
    launches = len(cloud.launches)
    again = control(store, _event("preempted", 1, 1.0, 0.8))
    assert len(cloud.launches) == launches  # the duplicate did nothing
    assert again["seq"] == latest(store)["seq"] == 2


def test_preemption_relaunches_elsewhere_and_moves_the_checkpoint(cloud):
    # eager-failover always moves after a preemption (SkyNomad may rather wait for the zone).
    store = FakeStore()
    defer(make_op(policy="eager-failover"), context_for(store))
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.PREEMPTED
    cloud.full.add(first.zone)  # the zone that preempted us has no capacity now
    cloud.hours = 2.0
    cloud.progress_fraction = 0.3
    record = control(store, _event("preempted", 1, 2.0, 1.8), policy="eager-failover")
    assert record["preemptions"] == 1
    new_zone = record["group"]["zone"]
    assert new_zone != first.zone
    assert cloud.copies and cloud.copies[-1][:2] == (first.zone, new_zone)
    assert cloud.cost_tags[-1]["skynomad-job"] == record["job_id"]  # the cloud can bill the copy to the job
    assert record["migrations"] == 1 and record["egress_usd"] > 0
    assert record["segments"][0]["end"] == "preempted"


def _on_demand_elsewhere(zone: str) -> tuple[str, dict]:
    """A zone other than `zone`, and a decision (as the trigger sends it) to go on-demand there."""
    target = "us-central1-a" if zone != "us-central1-a" else "us-east4-a"
    return target, {"try_in_order": [{"market": target, "mode": "on-demand"}], "probes": [], "reason": "test"}


def test_replan_event_carries_out_the_decision(cloud):
    store = FakeStore()
    defer(make_op(), context_for(store))
    old = cloud.launches[0]
    target, decision = _on_demand_elsewhere(old.zone)
    cloud.hours = 3.0
    assert control(store, _event("replan", 1, 3.0, 2.5, decision))["group"]["zone"] == target
    assert old.client_token in cloud.terminated  # the old group goes after the new one launched
    assert cloud.copies[-1][:2] == (old.zone, target)


def test_a_late_step_acts_at_the_true_time_and_teaches_the_safety_net_the_lag(cloud):
    store = FakeStore()
    defer(make_op(), context_for(store))
    old = cloud.launches[0]
    target, decision = _on_demand_elsewhere(old.zone)
    cloud.hours = 3.75  # the look was at 3.0 h; a stalled triggerer acted 0.75 cloud hours later
    record = control(store, _event("deadline_pressure", 1, 3.0, 2.5, decision), late_hours=0.75)
    assert record["job"]["reaction_hours"] == pytest.approx(0.75)  # the next look plans with it
    assert record["segments"][-1]["start_hours"] == pytest.approx(3.75)  # launched now, not when seen
    assert record["segments"][0]["end_hours"] == pytest.approx(3.75)
    assert any(item["event"] == "reaction lag" for item in record["timeline"])
    # A quicker step later does not shrink the margin: the slowest lag seen is the one to survive.
    cloud.hours = 4.0
    control(store, _event("replan", 2, 3.95, 3.0, decision), late_hours=0.05)
    assert latest(store)["job"]["reaction_hours"] == pytest.approx(0.75)
    cloud.hours = 6.5
    summary = control(store, _event("finished", 3, 6.5, 6.0))
    assert summary["reaction_hours"] == pytest.approx(0.75)  # the user sees the lag the job planned with


def test_finished_event_returns_a_small_summary(cloud, caplog):
    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.hours = 6.5
    summary = control(store, _event("finished", 1, 6.5, 6.0))
    assert summary["deadline_met"] is True
    assert summary["zones_timeline"][0]["end"] == "finished"
    assert summary["cost_usd"]["total"] > 0 and summary["all_on_demand_cost_usd"] > summary["cost_usd"]["total"]
    # The fake cloud cannot bill: the cost is the estimate from launch-time prices, and says so.
    assert summary["cost_basis"] == "estimate"
    assert summary["spot_hours"] + summary["on_demand_hours"] == pytest.approx(6.5)
    record = latest(store)
    (segment,) = record["segments"]
    estimate = 6.5 * segment["usd_per_hour"] + record["egress_usd"] + record["probe_usd"]
    assert summary["cost_usd"]["total"] == pytest.approx(estimate, abs=0.01)
    assert {"spot_hours", "on_demand_hours", "migrations", "preemptions"} <= set(summary)
    assert len(json.dumps(summary)) < 4000
    assert not cloud.running()
    # A retry after the task finished (e.g. a crash while reporting) returns the same summary, no launch.
    assert make_op().execute(context_for(store, try_number=2)) == summary
    assert len(cloud.launches) == 1


def test_summary_cost_is_the_clouds_own_bill_for_the_job(cloud, monkeypatch):
    asked = []
    bill = {
        "spot_usd": 7.004,
        "on_demand_usd": 1.5,
        "egress_usd": 0.5,
        "probe_usd": 0.25,
        "total_usd": 9.254,
        "spot_hours": 5.25,
        "on_demand_hours": 1.0,
        "probes": 3,
        "groups": [],
        "egress": [],
    }

    def billed(tags=None):
        asked.append(tags)
        return bill

    monkeypatch.setattr(cloud, "bill", billed, raising=False)
    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.hours = 6.5
    summary = control(store, _event("finished", 1, 6.5, 6.0))
    assert asked == [{"skynomad-job": summary["job_id"]}]
    assert summary["cost_basis"] == "cloud_bill"
    assert summary["cost_usd"] == {"spot": 7.0, "on_demand": 1.5, "egress": 0.5, "probe": 0.25, "total": 9.25}
    assert (summary["spot_hours"], summary["on_demand_hours"]) == (5.25, 1.0)  # the bill's, not the 6.5 h recorded
    assert "cloud_bill_usd" not in summary  # one figure, not two


def test_a_bill_that_cannot_be_read_falls_back_to_the_estimate(cloud, monkeypatch):
    def broken(tags=None):
        raise OSError("state file locked")

    monkeypatch.setattr(cloud, "bill", broken, raising=False)
    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.hours = 6.5
    summary = control(store, _event("finished", 1, 6.5, 6.0))
    assert summary["cost_basis"] == "estimate" and summary["cost_usd"]["total"] > 0
    assert summary["deadline_met"] is True


def test_on_kill_terminates_the_group(cloud):
    store = FakeStore()
    op = make_op()
    defer(op, context_for(store))
    op.on_kill()
    assert cloud.launches[0].client_token in cloud.terminated


# -- validation: clear error, nothing launched, nothing written -----------------------------------


def _refused(op, cloud, store, match):
    rows = market_rows()
    with pytest.raises(SkyNomadInputError, match=match):
        op.execute(context_for(store))
    assert cloud.launches == [] and store.writes == 0 and market_rows() == rows


def test_deadline_in_the_past(cloud):
    past = datetime(2020, 1, 1, tzinfo=UTC)
    _refused(make_op(deadline=past), cloud, FakeStore(), "already past")


def test_deadline_shorter_than_work_plus_cold_start(cloud):
    _refused(make_op(deadline=timedelta(hours=6.1)), cloud, FakeStore(), "shorter than work")


def test_unknown_zone(cloud):
    _refused(make_op(zones=["us-central1-a", "mars-north1-a"]), cloud, FakeStore(), "unknown zone.*mars-north1-a")


def test_empty_market_table(skynomad_home, now, monkeypatch):
    fake = FakeCloud(now)
    monkeypatch.setattr("airflow_provider_skynomad.operators.skynomad.make_cloud", lambda config: fake)
    _refused(make_op(), fake, FakeStore(), "empty.*skynomad_probe")


def test_stale_market_table(cloud):
    cloud.hours = 5.0  # the newest observation is now five hours old
    _refused(make_op(), cloud, FakeStore(), "stale")


def test_malformed_trace_for_the_simulated_cloud(skynomad_home, tmp_path, monkeypatch):
    bad = tmp_path / "bad.csv"
    bad.write_text("observed_at,cloud,region,zone\n2025-10-04T00:00:00Z,gcp,us-central1,us-central1-a\n")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SKYNOMAD_BAD",
        json.dumps({"conn_type": "skynomad", "extra": {"cloud": "simulated", "trace_path": str(bad)}}),
    )
    store = FakeStore()
    with pytest.raises(SkyNomadInputError, match="bad.csv.*missing columns"):
        make_op(skynomad_conn_id="skynomad_bad").execute(context_for(store))
    assert store.writes == 0
    assert not list((skynomad_home / "cloud").glob("groups/*"))


def test_unknown_policy(cloud):
    _refused(make_op(policy="cheapest-please"), cloud, FakeStore(), "unknown policy")


# -- deadlines -----------------------------------------------------------------------------------


def _config():
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig

    return SkyNomadConfig(market_url="sqlite://")


def test_deadline_from_the_dags_deadline_alert(cloud):
    with DAG(
        "alerted",
        schedule=None,
        start_date=datetime(2025, 1, 1),
        deadline=DeadlineAlert(
            reference=DeadlineReference.DAGRUN_QUEUED_AT,
            interval=timedelta(hours=9),
            callback=AsyncCallback(on_deadline_missed),
        ),
    ) as dag:
        op = SkyNomadOperator(task_id="job", work_hours=6.0)
    started = datetime.now(UTC) - timedelta(minutes=30)
    hours = resolve_deadline_hours(None, dag, context_for(FakeStore(), started=started), _config(), cloud)
    assert hours == pytest.approx(8.5, abs=0.01)
    defer(op, context_for(FakeStore()))


def test_the_deadline_callback_names_the_run_from_airflows_plain_data_context(caplog):
    """Airflow 3.3 gives a triggerer callback the run as the REST API's plain data (a dict), not an
    object: the warning names the DAG, the run, the deadline and the run's state from it."""
    import asyncio
    import logging

    context = {
        "dag_run": {"dag_id": "skynomad_fine_tune", "dag_run_id": "manual__2026-12-01T23:11:15", "state": "running"},
        "deadline": {"id": "0199", "deadline_time": "2026-12-01T23:13:16+00:00"},
    }
    with caplog.at_level(logging.WARNING):
        asyncio.run(on_deadline_missed(context=context))
    (message,) = [r.getMessage() for r in caplog.records if "DeadlineAlert" in r.getMessage()]
    assert "skynomad_fine_tune" in message and "manual__2026-12-01T23:11:15" in message
    assert "2026-12-01T23:13:16" in message and "running" in message and "?" not in message


def test_no_deadline_at_all_is_an_error(cloud):
    with DAG("plain", schedule=None, start_date=datetime(2025, 1, 1)) as dag:
        op = SkyNomadOperator(task_id="job", work_hours=6.0)
    with pytest.raises(SkyNomadInputError, match="no deadline"):
        resolve_deadline_hours(None, dag, context_for(FakeStore()), _config(), cloud)
    _refused(op, cloud, FakeStore(), "no deadline")


def test_absolute_deadline_on_the_simulated_clock(cloud, now):
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig

    config = SkyNomadConfig(market_url="sqlite://", cloud="simulated")
    deadline = (now + pd.Timedelta(hours=12)).to_pydatetime()
    assert resolve_deadline_hours(deadline, None, {}, config, cloud) == pytest.approx(12.0)


@pytest.mark.parametrize(
    "deadline",
    [timedelta(days=999_999_999), timedelta(days=367), 1e30, float("inf"), "9999-12-31T00:00:00Z"],
    ids=["999999999-days", "367-days", "1e30-hours", "infinite-hours", "year-9999"],
)
def test_break_7_a_deadline_beyond_a_year_is_refused_like_work_beyond_a_year(cloud, deadline):
    """Issue 31: a deadline of 999,999,999 days launched; work of as long was refused."""
    _refused(make_op(deadline=deadline), cloud, FakeStore(), "deadline .* at most a year")
    _refused(make_op(work_hours=24.0 * 367, deadline=timedelta(days=1)), cloud, FakeStore(), "work_hours")
