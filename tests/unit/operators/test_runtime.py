"""The job runtime's promises, each one a way it used to break: a missed deadline fails, progress is
what a checkpoint proves, a kill never launches, bad arguments fail at once, and the live status
and the forecasts hold up across worker visits."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_skynomad.clouds.base import GroupStatus, LaunchRequest
from airflow_provider_skynomad.jobs.errors import SkyNomadDeadlineMissed
from airflow_provider_skynomad.jobs.record import RECORD_KEY
from airflow_provider_skynomad.jobs.watch import Watch
from airflow_provider_skynomad.market.source import MarketSource
from airflow_provider_skynomad.market.store.table import MarketTable
from airflow_provider_skynomad.operators.skynomad import SkyNomadInputError
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies import lifetimes
from airflow_provider_skynomad.planner.registry import get_policy


def live_status(job_id: str) -> dict:
    from airflow_provider_skynomad.jobs.live import LiveStatusTable

    with LiveStatusTable() as board:
        return board.read([job_id])[job_id]


from .test_operator import FakeStore, _event, cloud, context_for, control, controlling, defer, latest, make_op, now  # noqa: F401


def test_a_missed_deadline_fails_the_task_and_says_so(cloud, caplog):  # noqa: F811
    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.hours = 10.5  # past the 10 h deadline
    with pytest.raises(SkyNomadDeadlineMissed, match="deadline MISSED") as info:
        control(store, _event("finished", 1, 10.5, 6.0))
    assert isinstance(info.value, AirflowFailException)  # no retries: a retry cannot make it on time
    record = store.get(RECORD_KEY)  # the worker keeps the final record in task state too
    assert record["finished"] and record["summary"]["deadline_met"] is False
    assert live_status(record["job_id"])["deadline_met"] is False


def test_a_missed_deadline_can_be_only_a_warning(cloud):  # noqa: F811
    store = FakeStore()
    defer(make_op(on_deadline_miss="warn"), context_for(store))
    cloud.hours = 10.5
    summary = control(store, _event("finished", 1, 10.5, 6.0), on_deadline_miss="warn")
    assert summary["deadline_met"] is False


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"command": "python train.py"}, "list of arguments.*bash"),
        ({"command": ["no-such-binary-for-skynomad"]}, "not on PATH"),
        ({"instances": 2.5}, "whole number"),
        ({"decision_step_minutes": float("nan")}, "decision_step_minutes"),
        ({"decision_step_minutes": float("inf")}, "decision_step_minutes"),
        ({"market_lookback_hours": float("inf")}, "market_lookback_hours"),
        ({"max_wall_seconds_per_step": -1}, "max_wall_seconds_per_step"),
        ({"env": {"BIG": "x" * 20000}}, "KiB"),
        ({"on_deadline_miss": "ignore"}, "on_deadline_miss"),
    ],
)
def test_bad_arguments_fail_at_once_before_anything_happens(cloud, kwargs, match):  # noqa: F811
    store = FakeStore()
    with pytest.raises(SkyNomadInputError, match=match) as info:
        make_op(**kwargs).execute(context_for(store))
    assert isinstance(info.value, AirflowFailException)  # input errors do not use the task's retries
    assert cloud.launches == [] and store.writes == 0


def test_what_the_cloud_check_finds_fails_the_task_naming_the_setting_before_any_launch(cloud, monkeypatch):  # noqa: F811
    asked = []

    def check(zones=None, instance_type=None):
        asked.append(sorted(zones))
        return [f"cloud_options.subnets has no subnet for {zones[0]}"]

    monkeypatch.setattr(cloud, "check", check, raising=False)
    store = FakeStore()
    with pytest.raises(SkyNomadInputError, match="cannot run this job yet: cloud_options.subnets has no subnet for"):
        make_op().execute(context_for(store))
    assert asked and asked[0]  # asked about the zones the job would use
    assert cloud.launches == [] and store.writes == 0


def test_the_summary_says_what_the_probe_dag_spent_on_the_jobs_markets_while_it_ran(cloud, now):  # noqa: F811
    from airflow_provider_skynomad.market.store.signals import ProbeSpend, SignalTable

    store = FakeStore()
    defer(make_op(), context_for(store))
    zone = latest(store)["group"]["zone"]
    other = "me-central9-z"  # a market outside the job's choice
    assert other not in store.get(RECORD_KEY)["zones"]

    def spent(at_hours, where, usd):
        at = (now + pd.Timedelta(hours=at_hours)).to_pydatetime()
        return ProbeSpend(at, "gcp", where.rsplit("-", 1)[0], where, "a3-highgpu-8g", 1, 1, usd)

    with SignalTable() as table:
        table.record_probes(
            [
                spent(1.0, zone, 0.25),  # the job's market, while it ran: counted
                spent(2.0, zone, 0.5),
                spent(-3.0, zone, 4.0),  # before the job started
                spent(1.5, other, 8.0),  # a market the job did not consider
            ]
        )
    cloud.hours = 6.5
    summary = control(store, _event("finished", 1, 6.5, 6.0))
    assert summary["probing_usd"] == 0.75
    assert summary["cost_usd"]["total"] < 1000  # reported beside the job's own cost, not added to it


def test_a_decision_keeps_the_options_it_weighed_for_the_job_page(cloud):  # noqa: F811
    store = FakeStore()
    defer(make_op(), context_for(store))
    (decided,) = [t for t in store.get(RECORD_KEY)["timeline"] if t["event"] == "decide"]
    options = decided["options"]
    assert 2 <= len(options) <= 6
    first = options[0]
    assert first["rank"] == 1 and first["mode"] == "spot"
    assert first["market"].split(":")[0] == latest(store)["group"]["zone"]  # what was launched
    assert {"value_usd_per_hour", "useful_share", "price_usd_per_hour", "utility_usd_per_hour"} <= set(first)


def test_on_kill_never_launches_a_pending_request(cloud, monkeypatch):  # noqa: F811
    store = FakeStore()
    real_launch = cloud.launch

    def die_before_sending(request):
        raise SystemExit("worker killed")  # the request was written down, never sent

    monkeypatch.setattr(cloud, "launch", die_before_sending)
    op = make_op()
    with pytest.raises(SystemExit):
        op.execute(context_for(store))
    monkeypatch.setattr(cloud, "launch", real_launch)
    op.on_kill()
    assert cloud.launches == [] and cloud.groups == {}  # nothing was started by the kill


def test_on_kill_terminates_a_pending_launch_that_exists(cloud, monkeypatch):  # noqa: F811
    store = FakeStore()
    real_launch = cloud.launch

    def launch_then_die(request):
        real_launch(request)
        raise SystemExit("worker killed")

    monkeypatch.setattr(cloud, "launch", launch_then_die)
    op = make_op()
    with pytest.raises(SystemExit):
        op.execute(context_for(store))
    op.on_kill()
    token = cloud.launches[0].client_token
    assert token in cloud.terminated and len(cloud.launches) == 1


def test_between_events_the_controller_publishes_where_the_job_stands(cloud):  # noqa: F811
    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.hours = 2.0
    cloud.progress_fraction = 0.2
    with controlling(store) as controller:
        look = controller.step()
        controller.publish()
    assert look.outcome is None
    status = live_status(latest(store)["job_id"])
    assert status["progress_pct"] == pytest.approx(20.0)
    assert status["zone"] == cloud.launches[0].zone and status["state"] == "running" and status["mode"] == "spot"
    assert status["slack_hours"] == pytest.approx(10.0 - 2.0 - 4.8 - 0.2, abs=0.01)
    assert status["spend_usd"] > 0 and len(cloud.launches) == 1  # nothing changed but the status


def test_a_periodic_checkpoint_interval_reaches_the_job_the_planner_sees(cloud):  # noqa: F811
    store = FakeStore()
    defer(make_op(checkpoint_interval_hours=0.5), context_for(store))
    job = store.get(RECORD_KEY)["job"]
    assert job["checkpoint_interval_hours"] == 0.5 and job["final_checkpoint_on_notice"] is False
    store = FakeStore()
    defer(make_op(), context_for(store))
    assert store.get(RECORD_KEY)["job"]["checkpoint_interval_hours"] == 0.0  # today's model by default
    with pytest.raises(SkyNomadInputError, match="checkpoint_interval_hours"):
        defer(make_op(checkpoint_interval_hours=-1.0), context_for(FakeStore()))


def test_preemption_before_any_checkpoint_restarts_elsewhere_without_a_migration(cloud):  # noqa: F811
    store = FakeStore()
    defer(make_op(policy="eager-failover"), context_for(store))
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.PREEMPTED
    cloud.full.add(first.zone)
    cloud.progress_fraction = None  # the workload had written no checkpoint yet
    cloud.hours = 0.5
    record = control(store, _event("preempted", 1, 0.5, 0.0), policy="eager-failover")
    assert record["group"]["zone"] != first.zone
    assert record["migrations"] == 0 and record["egress_usd"] == 0.0 and cloud.copies == []
    assert record["state"]["progress_hours"] == 0.0 and record["state"]["checkpoint_market"] is None


def test_progress_is_what_a_checkpoint_proves_never_run_time(cloud):  # noqa: F811
    handle = cloud.launch(LaunchRequest("gcp", "us-central1", "us-central1-a", "a3-highgpu-1g", 1, True, "t-1"))
    cloud.progress_fraction = None  # three hours in, and no checkpoint written yet
    state = JobState(elapsed_hours=0.0, running=Option("us-central1-a", Mode.SPOT))
    watch = Watch(
        job=JobSpec(work_hours=3.0, deadline_hours=4.8), job_start_hours=0.0, base=state, group=handle,
        launch_delay_hours=0.2, seq=1,
    )  # fmt: skip
    assert watch.progress(cloud, elapsed=3.0) == 0.0
    cloud.progress_fraction = 0.5
    assert watch.progress(cloud, elapsed=3.0) == pytest.approx(1.5)


class _MarketDown:
    """A market source whose database does not answer (PostgreSQL down or restarting)."""

    def view(self, until):
        from sqlalchemy.exc import OperationalError

        raise OperationalError("SELECT ...", {}, Exception("server closed the connection unexpectedly"))


def _market_down():
    """A job's markets (`jobs.markets`) over that source."""
    from airflow_provider_skynomad.jobs.markets import JobMarkets
    from airflow_provider_skynomad.jobs.stale import StaleGuard

    return JobMarkets(job_id="", table=None, source=_MarketDown(), stale=StaleGuard())


def test_a_market_table_that_does_not_answer_leaves_the_group_then_fails_the_job_naming_it(cloud):  # noqa: F811
    from airflow_provider_skynomad.jobs.watch import MAX_API_STEPS

    handle = cloud.launch(LaunchRequest("gcp", "us-central1", "us-central1-a", "a3-highgpu-1g", 1, True, "t-1"))
    state = JobState(elapsed_hours=0.0, running=Option("us-central1-a", Mode.SPOT))
    watch = Watch(
        job=JobSpec(work_hours=3.0, deadline_hours=4.8), job_start_hours=0.0, base=state, group=handle,
        launch_delay_hours=0.2, seq=1,
    )  # fmt: skip
    policy = get_policy("skynomad")
    for _ in range(MAX_API_STEPS - 1):
        event, words = watch.step(cloud, _market_down(), policy)
        assert event is None and "market table did not answer" in words and "left as it is" in words
    assert cloud.terminated == []  # a healthy group is not given up because markets could not be read
    event, words = watch.step(cloud, _market_down(), policy)
    assert event is not None and event.kind == "failed"
    assert "market table did not answer (server closed the connection unexpectedly)" in event.reason


def test_the_forecaster_fits_once_per_refit_interval_across_polls_and_deferrals(cloud, now):  # noqa: F811
    """Every poll builds a new view, every deferral a new policy: the fit is shared by content."""
    table = MarketTable()
    table.create()
    job = JobSpec(work_hours=6.0, deadline_hours=10.0)
    since = now - pd.Timedelta(hours=48)
    zones = ["us-central1-a", "us-east4-a", "europe-west1-c"]
    lifetimes._SHARED.clear()  # earlier tests of this process fitted the same history
    before = lifetimes.FITS["count"]
    steps, step_hours = 0, 1 / 6
    for _deferral in range(4):  # four trigger runs, a fresh policy and market source each
        policy = get_policy("skynomad")
        source = MarketSource(table, zones, None, since, step_hours, 1)
        for _ in range(3):
            until = now + pd.Timedelta(hours=steps * step_hours) + pd.Timedelta(seconds=1)
            view = source.view(until)
            policy.decide(job, JobState(elapsed_hours=steps * step_hours), view, steps * step_hours)
            steps += 1
    table.close()
    fits = lifetimes.FITS["count"] - before
    # 12 decision steps of 10 minutes over one unchanged table: one refit interval (1 h), one fit.
    assert fits == 1, fits


def test_deadline_reserve_for_downstream_tasks_is_taken_off_the_dags_deadline(cloud):  # noqa: F811
    from datetime import datetime

    from airflow.sdk import DAG, AsyncCallback, DeadlineAlert, DeadlineReference

    from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator, on_deadline_missed

    with DAG(
        "reserved",
        schedule=None,
        start_date=datetime(2025, 1, 1),
        deadline=DeadlineAlert(
            reference=DeadlineReference.DAGRUN_QUEUED_AT,
            interval=timedelta(hours=10),
            callback=AsyncCallback(on_deadline_missed),
        ),
    ):
        op = SkyNomadOperator(task_id="job", work_hours=6.0, downstream_reserve=timedelta(seconds=2))
    store = FakeStore()
    defer(op, context_for(store))
    record = store.get(RECORD_KEY)
    # the default connection's simulated clock runs 3600× : 2 wall seconds downstream are 2 cloud hours
    assert record["dag_deadline_hours"] == pytest.approx(10.0, abs=0.05)
    assert record["deadline_hours"] == pytest.approx(8.0, abs=0.05)


def _first_event(trigger) -> dict:
    """The trigger's event as soon as the job ends: the trigger is rebuilt from what it serializes (as
    the triggerer builds it) without the worker's first-event hold, 9 s of waiting for a first try
    (the hold is tested beside: test_a_retry_holds_its_first_trigger_event_longer, and in
    tests/unit/triggers/test_trigger.py)."""
    import asyncio

    from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger

    trigger = SkyNomadTrigger(**{**trigger.serialize()[1], "min_event_seconds": 0.0})

    async def first():
        return await asyncio.wait_for(anext(trigger.run()), 20)

    return asyncio.run(first()).payload


def test_under_deadline_pressure_the_controller_puts_up_the_net_at_once(cloud):  # noqa: F811
    """No worker slot needed: the controller launches on-demand the step it sees the pressure, and
    the worker comes back only to report the end."""
    store = FakeStore()
    defer(make_op(), context_for(store))
    first = cloud.launches[0]
    cloud.hours = 4.9  # 5 h of 6 h left, ~5 h to the deadline: one more spot step is no longer safe
    cloud.progress_fraction = 1.0 / 6.0
    with controlling(store) as controller:
        assert controller.step().outcome is None
        net = cloud.launches[-1]
        assert not net.spot and first.client_token in cloud.terminated  # the old group went at once
        assert net.zone == first.zone or cloud.copies[-1][:2] == (first.zone, net.zone)
        launches = len(cloud.launches)
        cloud.hours = 9.9  # the net finishes in time (5 h of work + its cold start after 4.9 h)
        cloud.status[net.client_token] = GroupStatus.SUCCEEDED
        outcome = controller.step().outcome
    assert outcome.kind.value == "finished"
    summary = make_op().execute_complete(context_for(store), outcome.to_dict())
    record = store.get(RECORD_KEY)  # the worker's report keeps the final record in task state
    assert len(cloud.launches) == launches  # the worker launched nothing
    assert record["segments"][0]["end"] == "migrated" and record["segments"][0]["end_hours"] == pytest.approx(4.9)
    assert record["segments"][-1]["mode"] == "on-demand" and record["segments"][-1]["start_hours"] == 4.9
    assert record["on_safety_net"] and any(n["event"] == "deadline pressure" for n in record["timeline"])
    assert summary["deadline_met"] is True


def test_what_the_controller_launched_is_what_a_worker_retry_reconnects_to(cloud):  # noqa: F811
    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.hours = 4.9
    cloud.progress_fraction = 1.0 / 6.0
    with controlling(store) as controller:
        controller.step()  # the controller put up the net; then the task was retried
    net = cloud.launches[-1]
    again = defer(make_op(), context_for(store, try_number=2))
    assert again.args.job_id == latest(store)["job_id"]
    assert latest(store)["group"]["client_token"] == net.client_token and len(cloud.launches) == 2


def test_a_late_preemption_is_relaunched_on_demand_and_recorded_as_a_preemption(cloud):  # noqa: F811
    store = FakeStore()
    defer(make_op(), context_for(store))
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.PREEMPTED
    cloud.hours = 4.9  # too late to wait for spot: only on-demand now still makes it
    cloud.progress_fraction = 1.0 / 6.0
    with controlling(store) as controller:
        assert controller.step().outcome is None
    record = latest(store)
    assert record["preemptions"] == 1 and record["state"]["running"]["mode"] == "on-demand"
    assert record["segments"][0]["end"] == "preempted" and record["segments"][-1]["mode"] == "on-demand"
    assert record["segments"][-1]["start_hours"] == pytest.approx(4.9)  # the same step, not a worker later


def test_a_slow_start_is_measured_from_the_first_checkpoint_and_planned_with(cloud):  # noqa: F811
    handle = cloud.launch(LaunchRequest("gcp", "us-central1", "us-central1-a", "a3-highgpu-1g", 1, True, "t-9"))
    state = JobState(progress_hours=0.5, running=Option("us-central1-a", Mode.SPOT), running_since_hours=1.0)
    watch = Watch(
        job=JobSpec(work_hours=3.0, deadline_hours=6.0), job_start_hours=0.0, base=state, group=handle,
        launch_delay_hours=0.2, seq=1, progress_at_launch=0.5,
    )  # fmt: skip
    watch._measure_warmup(1.2, 0.5)  # still starting
    assert watch.warmup_hours is None
    watch._measure_warmup(1.4, 0.6)  # first checkpoint landed between 1.2 and 1.4 h: 0.1 h of work done
    assert watch.warmup_hours == pytest.approx(0.2)

    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.hours = 1.0
    target, decision = "us-east4-a", {"try_in_order": [{"market": "us-east4-a", "mode": "on-demand"}]}
    record = control(store, {**_event("replan", 1, 1.0, 0.3, decision), "warmup_hours": 0.45})
    assert record["job"]["cold_start_hours"] == pytest.approx(0.45)  # the planner's cold start
    assert record["warmups_hours"] == [0.45]  # measured once per group
    assert cloud.launches[-1].zone == target
    assert cloud.launches[-1].env["SKYNOMAD_COLD_START_HOURS"] == "0.2"  # the cloud still gets the declared one


def test_the_connection_config_never_shows_its_password():
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig

    config = SkyNomadConfig(market_url="postgresql://skynomad:s3cret-pw@db.example:5432/markets")
    assert "s3cret-pw" not in repr(config) and "s3cret-pw" not in str(config)
    assert "db.example" in repr(config)


def test_console_links_are_one_per_group_and_none_for_simulated_groups(cloud):  # noqa: F811
    from types import SimpleNamespace

    from airflow_provider_skynomad.clouds.base import GroupHandle
    from airflow_provider_skynomad.links.skynomad import XCOM_KEY, persist_group_links

    groups = [GroupHandle("gcp", z, (f"i-{z}",), True, f"t-{z}", "job", z[:-2]) for z in ("us-east4-a", "us-east4-b")]
    record = SimpleNamespace(groups_used=groups)
    context = context_for(FakeStore())
    persist_group_links(context, SimpleNamespace(record=record, cloud=cloud))  # a cloud with no console
    assert context["ti"].xcom[XCOM_KEY] == []  # stored empty: the UI asks, and a missing XCom logs an error
    cloud.console_url = lambda handle: f"https://console.example/{handle.instance_ids[0]}"
    persist_group_links(context, SimpleNamespace(record=record, cloud=cloud))
    links = context["ti"].xcom[XCOM_KEY]
    assert [link["url"] for link in links] == [
        "https://console.example/i-us-east4-a",
        "https://console.example/i-us-east4-b",
    ]


def test_own_observations_are_recorded_under_the_exact_market(skynomad_home, gcp_frame, now, monkeypatch):  # noqa: F811
    """A zone with two instance types: the job's preemption is an observation of its own type only."""
    from tests.support.airflow_env import seed_market
    from tests.support.fakes import FakeCloud

    frame = gcp_frame[gcp_frame["zone"] == "us-central1-a"].copy()
    other = frame.copy()
    other["instance_type"] = "a3-highgpu-2g"
    both = pd.concat([frame, other], ignore_index=True)
    seed_market(both, until=now + pd.Timedelta(seconds=1))
    fake = FakeCloud(now)
    monkeypatch.setattr("airflow_provider_skynomad.operators.skynomad.make_cloud", lambda config: fake)
    store = FakeStore()
    defer(make_op(instance_types=["a3-highgpu-2g"], policy="eager-failover"), context_for(store))
    assert fake.launches[0].instance_type == "a3-highgpu-2g"
    fake.status[fake.launches[0].client_token] = GroupStatus.PREEMPTED
    fake.hours = 1.0
    control(store, _event("preempted", 1, 1.0, 0.0), instance_types=["a3-highgpu-2g"], policy="eager-failover")
    table = MarketTable()
    rows = table.read(since=now)
    table.close()
    own = rows[rows["available"] == 0]
    assert set(own["instance_type"]) == {"a3-highgpu-2g"}  # never recorded under the zone's first type
    assert set(own["accelerator"]) == set(frame["accelerator"])  # named as the table names the market


def test_a_failed_workload_fails_the_task_with_its_last_error_lines(cloud):  # noqa: F811
    from airflow_provider_skynomad.jobs.errors import SkyNomadJobFailed

    store = FakeStore()
    trigger = defer(make_op(), context_for(store))
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.FAILED
    cloud.failure_detail = lambda handle: "Traceback (most recent call last):\nValueError: bad learning rate"
    event = _first_event(trigger)  # the trigger controls the job to its end, and says how it ended
    assert event["kind"] == "failed" and "bad learning rate" in event["message"]
    with pytest.raises(SkyNomadJobFailed, match="(?s)failed.*last lines.*bad learning rate"):
        make_op().execute_complete(context_for(store), event)
    assert first.client_token in cloud.terminated  # nothing left running


def test_the_summary_reports_the_controller_lags_it_measured(cloud):  # noqa: F811
    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.progress_fraction = 0.1
    decision = {"try_in_order": [{"market": cloud.launches[0].zone, "mode": "spot"}]}  # stay
    for seq, late in enumerate([0.1, 0.3, 0.05], start=1):
        cloud.hours = seq
        control(store, _event("replan", seq, seq, 0.5, decision), late_hours=late)
    cloud.hours = 6.6
    summary = control(store, _event("finished", 4, 6.5, 6.0))
    assert summary["lag_hours_p50"] == pytest.approx(0.1) and summary["lag_hours_max"] == pytest.approx(0.3)
    assert summary["reaction_hours"] == pytest.approx(0.3)  # the slowest is the one planned with


def test_once_on_the_safety_net_the_job_stays_on_demand_to_the_end(cloud, monkeypatch):  # noqa: F811
    """After the net went up the planner may find spot tempting again; the job does not leave on-demand."""
    from airflow_provider_skynomad.planner.actions import Decision

    class BackToSpot:
        def decide(self, job, state, view, at_hours):
            return Decision(try_in_order=(Option("us-east4-a", Mode.SPOT),), reason="spot looks cheap again")

    store = FakeStore()
    defer(make_op(), context_for(store))
    cloud.hours = 4.9
    cloud.progress_fraction = 1.0 / 6.0
    with controlling(store) as controller:
        controller.step()  # the net goes up
        assert controller.watch.on_safety_net and latest(store)["on_safety_net"]
        launches = len(cloud.launches)
        controller.policy = BackToSpot()
        cloud.hours = 5.0
        controller.step()
    assert len(cloud.launches) == launches  # stays on on-demand


def test_a_decision_carried_out_long_after_the_trigger_made_it_is_made_again(cloud):  # noqa: F811
    """The trigger chose a spot launch while it was safe; Airflow resumed the task hours later (a
    saturated pool, a restarted scheduler). Carried out then, the launch would miss the deadline:
    the worker decides again on what is true now and takes on-demand."""
    from airflow_provider_skynomad.planner.actions import Decision

    store = FakeStore()
    defer(make_op(), context_for(store))
    first = cloud.launches[0]
    other = "us-east4-b" if first.zone != "us-east4-b" else "us-central1-a"
    stale = Decision(try_in_order=(Option(other, Mode.SPOT),), reason="spot there was cheap and safe at 1 h")
    cloud.progress_fraction = 0.0
    cloud.hours = 4.0  # 6 h of work left, 6 h to the deadline: only on-demand, now, can make it
    control(store, _event("replan", 1, 1.0, 0.0, decision=stale.to_dict()))
    assert cloud.launches[-1].spot is False, cloud.launches


def test_a_move_after_a_refused_relaunch_says_so_and_never_calls_a_dearer_zone_cheaper(cloud):  # noqa: F811
    """Preempted in the cheapest zone, the job tries it again, meets no capacity and moves to a
    dearer one: the move's reason is the refused zone, not a price gap read the wrong way round."""
    from airflow_provider_skynomad.planner.actions import Decision

    store = FakeStore()
    defer(make_op(), context_for(store))
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.PREEMPTED
    cloud.full.add(first.zone)
    cloud.hours, cloud.progress_fraction = 1.0, 0.2
    dearer = "us-east5-a"
    retry = Decision(try_in_order=(Option(first.zone, Mode.SPOT), Option(dearer, Mode.SPOT)), reason="test")
    record = control(store, _event("preempted", 1, 1.0, 1.2, decision=retry.to_dict()))
    moves = [n for n in record["timeline"] if n["event"] == "migrate"]
    assert [m["zone"] for m in moves] == [dearer] and moves[0]["from"] == first.zone
    assert moves[0]["why"] == f"{first.zone} has no spot capacity", moves[0]


def _preempted_after_an_hour(cloud):  # noqa: F811
    """An eager-failover job on spot, its group preempted an hour in (20 % done), its zone full:
    (store, the lost launch)."""
    store = FakeStore()
    defer(make_op(policy="eager-failover"), context_for(store))
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.PREEMPTED
    cloud.full.add(first.zone)
    cloud.hours, cloud.progress_fraction = 1.0, 0.2
    return store, first


def test_a_preempted_job_is_relaunched_on_spot_by_the_controller_without_a_worker(cloud):  # noqa: F811
    """Early in the job, with slack to spare: the controller relaunches on spot the step it sees the
    preemption (no worker slot needed, however full the pool), the checkpoint copied first."""
    store, first = _preempted_after_an_hour(cloud)
    with controlling(store, policy="eager-failover") as controller:
        assert controller.step().outcome is None
        assert not controller.watch.on_safety_net  # a spot relaunch is no safety net
    relaunch = cloud.launches[-1]
    assert relaunch.spot and relaunch.zone != first.zone
    assert cloud.copies[-1][:2] == (first.zone, relaunch.zone)  # the checkpoint went with it
    record = latest(store)
    assert record["preemptions"] == 1 and record["migrations"] == 1 and not record["on_safety_net"]
    assert record["segments"][0]["end"] == "preempted" and record["segments"][-1]["mode"] == "spot"
    assert record["group"]["client_token"] == relaunch.client_token
    assert not any(n["event"] == "deadline pressure" for n in record["timeline"])
    events = [n["event"] for n in record["timeline"]]
    assert events.index("preempted") < events.index("migrate")  # the timeline in the order it happened


def test_a_relaunch_preempted_in_its_turn_is_recorded_then_decided_again(cloud):  # noqa: F811
    store, first = _preempted_after_an_hour(cloud)
    with controlling(store, policy="eager-failover") as controller:
        controller.step()
        relaunch = cloud.launches[-1]
        cloud.status[relaunch.client_token] = GroupStatus.PREEMPTED  # lost too
        cloud.full.add(relaunch.zone)
        cloud.hours = 1.6
        controller.step()
    record = latest(store)
    assert record["preemptions"] == 2
    assert [s["end"] for s in record["segments"][:2]] == ["preempted", "preempted"]
    third = cloud.launches[-1]
    assert third.zone not in (first.zone, relaunch.zone)
    assert record["group"]["client_token"] == third.client_token


def test_a_spot_relaunch_is_what_a_worker_retry_reconnects_to_as_spot(cloud):  # noqa: F811
    store, first = _preempted_after_an_hour(cloud)
    with controlling(store, policy="eager-failover") as controller:
        controller.step()  # relaunched; then the task was retried
    relaunch = cloud.launches[-1]
    again = defer(make_op(policy="eager-failover"), context_for(store, try_number=2))
    record = latest(store)
    assert again.args.job_id == record["job_id"]
    assert record["group"]["client_token"] == relaunch.client_token and len(cloud.launches) == 2
    assert record["state"]["running"]["mode"] == "spot" and not record["on_safety_net"]


def test_a_retry_holds_its_first_trigger_event_longer(cloud, monkeypatch):  # noqa: F811
    """A try may be lost to Airflow re-queueing a task whose trigger fired before the scheduler read
    the deferring process's exit (apache/airflow#72716). The supervisor notices that exit up to its
    `[workers] min_heartbeat_interval` late, so the worker's hold covers that wait plus 4 s (the
    exit, the scheduler's loop); a slow box makes the race likelier, so each retry waits longer."""
    store = FakeStore()
    first = defer(make_op(), context_for(store))
    again = defer(make_op(), context_for(store, try_number=2))
    assert first.args.min_event_seconds == 9.0 and again.args.min_event_seconds == 11.0  # Airflow's 5 s wait
    assert again.serialize()[1]["min_event_seconds"] == 11.0
    monkeypatch.setenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "10")
    assert defer(make_op(), context_for(store)).args.min_event_seconds == 14.0


def test_under_dag_test_the_first_event_hold_stays_short(cloud, monkeypatch):  # noqa: F811
    """`dag.test()` runs task and trigger in one process: no exit to record, no scheduler to race,
    and at 600x a 9 s hold would be 1.5 cloud hours in which the job could not react."""
    from airflow.sdk.execution_time import supervisor, task_runner

    monkeypatch.setattr(
        task_runner,
        "SUPERVISOR_COMMS",
        supervisor.InProcessSupervisorComms.__new__(supervisor.InProcessSupervisorComms),
        raising=False,
    )
    store = FakeStore()
    assert defer(make_op(), context_for(store)).args.min_event_seconds == 2.0
    assert defer(make_op(), context_for(store, try_number=2)).args.min_event_seconds == 4.0
