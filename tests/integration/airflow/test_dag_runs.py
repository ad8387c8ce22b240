"""Whole DAG runs through Airflow (``dag.test()``: real task runner, task state store, inline trigger)
on the embedded simulated cloud, whose workload really trains, checkpoints and resumes."""

from __future__ import annotations

import importlib.util
import json
import time
from types import SimpleNamespace

import pandas as pd
import pytest

from airflow_provider_skynomad.cli.demo import model_is_bit_identical, run_dag_test, task_result

from .conftest import DAGS_FOLDER, seed_market

# `make test` runs the suite on two xdist workers; the tests that start Airflow's services or a whole
# cloud end to end share one, so no two of them load the two cores at once.
pytestmark = pytest.mark.xdist_group("services")

SPEED = 600.0  # 1 simulated hour per 6 s: slow enough that the workload's start-up stays inside the cold start
# The drought's 1.5 h of us-east4 spot start when the test reads the clock, before `dag.test()` loads the
# fine-tune DAG and its task starts: 10 s of wall time beside a CPU burner, 1.7 cloud hours at 600×, and
# the job then found us-east4 already dry. At 200× the window is 27 s of wall time and that start-up is
# half an hour of it.
DROUGHT_SPEED = 200.0
TRACE_START_HOURS = 89.5  # a stretch of the GCP H100 week where us-east4 spot capacity comes and goes


def load_dag(name: str):
    spec = importlib.util.spec_from_file_location(f"test_dag_{name}", DAGS_FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


@pytest.fixture
def simulated(request, airflow_db, skynomad_home, gcp_frame, monkeypatch):
    """The simulated cloud at `SPEED` (a test may ask for another with ``@pytest.mark.parametrize(..., indirect)``)."""
    speed = getattr(request, "param", SPEED)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SKYNOMAD_DEFAULT",
        json.dumps(
            {
                "conn_type": "skynomad",
                "extra": {"cloud": "simulated", "speed": speed, "cloud_options": {"trace_start": TRACE_START_HOURS}},
            }
        ),
    )
    start = gcp_frame["observed_at"].min() + pd.Timedelta(hours=TRACE_START_HOURS)
    seed_market(gcp_frame, until=start)
    return SimpleNamespace(home=skynomad_home, trace_start=start, speed=speed)


@pytest.fixture
def us_east4_drought(airflow_db, skynomad_home, gcp_frame, tmp_path, monkeypatch):
    """The real week, replayed from a copy the test reshapes once the probe DAG has run (`dry_us_east4`)."""
    from airflow_provider_skynomad.market.observations import write_observations

    trace = tmp_path / "gcp-week.csv"
    write_observations(gcp_frame, trace)
    extra = {"cloud": "simulated", "speed": DROUGHT_SPEED, "trace_path": str(trace)}
    extra["cloud_options"] = {"trace_start": TRACE_START_HOURS}
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps({"conn_type": "skynomad", "extra": extra}))
    start = gcp_frame["observed_at"].min() + pd.Timedelta(hours=TRACE_START_HOURS)
    seed_market(gcp_frame, until=start)
    return SimpleNamespace(home=skynomad_home, trace_start=start, trace=trace, frame=gcp_frame)


def dry_us_east4(simulated, now_hours: float) -> pd.DataFrame:
    """From `now_hours` of the cloud's clock: us-east4 (the cheapest region) has spot for 1.5 h, then
    none for six hours. The job starts there, is preempted, and leaving is the only sensible plan.

    Relative to the clock, not to the trace: the probe DAG before the job takes seconds of wall
    time, an hour of cloud time on a loaded box. On the week as it is, us-east4-a comes back within
    the hour of its preemption, and waiting for it or moving is the planner's close call.
    """
    from airflow_provider_skynomad.market.observations import write_observations

    frame = simulated.frame.copy()
    hours = (frame["observed_at"] - simulated.trace_start).dt.total_seconds() / 3600.0
    east4 = frame["zone"].str.startswith("us-east4-")
    frame.loc[east4 & hours.between(now_hours - 1.0, now_hours + 1.5, inclusive="left"), "available"] = 16
    frame.loc[east4 & hours.between(now_hours + 1.5, now_hours + 7.5), "available"] = 0
    write_observations(frame, simulated.trace)  # a new file version: every process replays it from now on
    return frame


def attach_cloud(home):
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud

    return SimulatedCloud.attach(home / "cloud")


def test_probe_then_fine_tune_with_preemption_and_migration(us_east4_drought, tmp_path):
    simulated = us_east4_drought
    started = time.monotonic()
    state, _ = run_dag_test(load_dag("skynomad_probe"))
    assert state == "success"
    from airflow_provider_skynomad.market.store.table import MarketTable

    table = MarketTable()
    probed = table.read(since=simulated.trace_start)
    table.close()
    # one fresh row per zone of the trace, from the mapped per-region tasks
    assert sorted(probed["zone"]) == sorted(set(probed["zone"])) and len(probed) == 13
    # From here on the market table fills as a probe DAG running every 10 minutes would fill it: the
    # trace's rows, each visible once the cloud clock passes it (a view never shows the future).
    # Without them every zone but the job's own is stale after 3 h (jobs/stale.py) and shows no spot.
    frame = dry_us_east4(simulated, attach_cloud(simulated.home).now_hours())
    future = simulated.trace_start + pd.Timedelta(hours=14)
    seed_market(frame, until=future, hours=14)

    dag = load_dag("skynomad_fine_tune")
    state, run_id = run_dag_test(dag, run_conf={"work_hours": 6.0})
    summary = task_result(dag.dag_id, run_id, "fine_tune")
    assert state == "success", summary
    assert summary["preemptions"] >= 1, summary
    assert summary["migrations"] >= 1, summary
    assert summary["deadline_met"] is True and summary["elapsed_hours"] <= summary["deadline_hours"]
    assert summary["deadline_hours"] == pytest.approx(10.0, abs=0.2)  # from the DAG's DeadlineAlert
    assert summary["cost_usd"]["total"] < summary["all_on_demand_cost_usd"]
    assert model_is_bit_identical(summary, tmp_path)
    # Nothing is left running or billed.
    cloud = attach_cloud(simulated.home)
    groups = cloud.groups(tags={"skynomad-job": summary["job_id"]})
    assert groups and all(g["status"] != "running" for g in groups)
    # One group per stretch the job reports: no duplicate launch. A stretch ends in a preemption or a move;
    # after the preemption the planner may move again when a cheaper zone comes back (on a busy box the
    # job reaches later hours of the week, where it does), so the stretches are counted, not assumed.
    stretches = summary["zones_timeline"]
    assert len(groups) == len(stretches) >= summary["preemptions"] + 1, (groups, stretches)
    # The reported cost is the simulated cloud's own bill for this job, and only this job's.
    bill = cloud.bill(tags={"skynomad-job": summary["job_id"]})
    assert summary["cost_basis"] == "cloud_bill"
    assert summary["cost_usd"] == {
        "spot": round(bill["spot_usd"], 2),
        "on_demand": round(bill["on_demand_usd"], 2),
        "egress": round(bill["egress_usd"], 2),
        "probe": round(bill["probe_usd"], 2),
        "total": round(bill["total_usd"], 2),
    }
    assert (summary["spot_hours"], summary["on_demand_hours"]) == (
        round(bill["spot_hours"], 3),
        round(bill["on_demand_hours"], 3),
    )
    assert len(bill["egress"]) == summary["migrations"]  # every move's checkpoint copy, billed to the job
    assert cloud.bill()["probes"] >= bill["probes"] + 13  # the probe DAG's probes are not the job's
    print(f"probe + fine-tune wall time {time.monotonic() - started:.1f}s")


def test_retry_after_a_worker_crash_does_not_launch_a_second_group(simulated):
    from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator  # noqa: F401

    dag = load_dag("skynomad_crash_retry")
    state, run_id = run_dag_test(dag)
    summary = task_result(dag.dag_id, run_id, "job")
    assert state == "success", summary
    cloud = attach_cloud(simulated.home)
    groups = cloud.groups(tags={"skynomad-job": summary["job_id"]})
    # on-demand never preempts: exactly one group for the whole job, across the crash and the retry
    assert len(groups) == 1, groups
    assert groups[0]["status"] == "succeeded"
    assert summary["deadline_met"] is True
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run_id)
        ).one()
    assert ti.try_number == 2  # the first try really died after its launch


def test_existing_pipeline_extract_train_evaluate(simulated):
    state, _ = run_dag_test(load_dag("skynomad_probe"))
    assert state == "success"
    dag = load_dag("skynomad_existing_pipeline")
    state, run_id = run_dag_test(dag, run_conf={"work_hours": 2.0, "total_steps": 20})
    assert state == "success"
    evaluation = task_result(dag.dag_id, run_id, "evaluate")
    assert evaluation["accuracy"] > 0.5 and evaluation["cost_usd"] > 0


# A quarter of a cloud hour for the slow start at 300×: the same cloud hours as 1.5 s at 600×, while the
# wall-time jitter of a box running the suite on both cores (process start-ups, the triggerer's loop) costs
# half as much.
SLOW_RESUME_SPEED = 300.0
# A resume that held up a reaction would add its whole delay to that reaction's lag; the trigger's own lag
# on a loaded box (a cloud call stalled for seconds of wall time) adds up to half a cloud hour at 300×. A
# resume as slow as a worker slot on a saturated pool (an hour of cloud time, 12 s here) stands clear of
# that, and delays only the final report, never the job's clock.
RESUME_DELAY_HOURS = 1.0


@pytest.mark.parametrize("simulated", [SLOW_RESUME_SPEED], indirect=True)
def test_slow_resumes_and_a_slow_start_still_meet_a_tight_deadline(simulated, monkeypatch):
    """Resumes delayed artificially and a workload that checkpoints late: the deadline holds, and
    the slow resumes are not the job's lag (its trigger acts without them)."""
    monkeypatch.setenv("SKYNOMAD_TEST_DELAY_SECONDS", repr(0.25 * 3600 / simulated.speed))
    monkeypatch.setenv("SKYNOMAD_TEST_RESUME_DELAY_SECONDS", repr(RESUME_DELAY_HOURS * 3600 / simulated.speed))
    dag = load_dag("skynomad_slow_resume")
    state, run_id = run_dag_test(dag)
    summary = task_result(dag.dag_id, run_id, "job")
    assert state == "success", summary or _where_the_job_stood(simulated)  # on_deadline_miss="fail"
    assert summary["deadline_met"] is True and summary["elapsed_hours"] <= summary["deadline_hours"]
    # The trigger controls the job: a slow resume delays only the final report, never a reaction.
    assert summary["lag_hours_max"] < RESUME_DELAY_HOURS, summary
    # The trigger published where the job stood, to its end (jobs/live.py).
    from airflow_provider_skynomad.jobs.live import LiveStatusTable

    table = LiveStatusTable()
    try:
        (live,) = table.read([summary["job_id"]]).values()
    finally:
        table.close()
    assert live["state"] == "finished" and live["elapsed_hours"] == pytest.approx(summary["elapsed_hours"], abs=1e-3), (
        live
    )
    cloud = attach_cloud(simulated.home)
    assert all(g["status"] != "running" for g in cloud.groups(tags={"skynomad-job": summary["job_id"]}))


def test_the_fine_tune_dags_alert_fires_on_the_jobs_clock(simulated):
    """One number for the job's deadline and the DAG's alert: at 600x, 10 simulated hours are 60 wall
    seconds, and the alert allows two minutes for Airflow's own part (tests/unit/operators/test_deadline_alert.py)."""
    from datetime import timedelta

    from airflow_provider_skynomad.operators.skynomad import AIRFLOW_ALLOWANCE

    dag = load_dag("skynomad_fine_tune")
    (alert,) = dag.deadline
    assert dag.get_task("fine_tune").deadline == timedelta(hours=10)
    assert alert.interval == timedelta(hours=10) / SPEED + AIRFLOW_ALLOWANCE


def test_a_run_made_again_under_its_old_run_id_trains_again_from_the_start(simulated):
    """`dag.test()` for a logical date that has a run deletes that run (its task state with it) and
    makes it again under the same run id, as a user deleting a run and triggering it again does.
    The new run's job has its own id and checkpoint folder and trains the whole job, instead of
    restoring the last run's final checkpoint and "finishing" at once."""
    from datetime import UTC, datetime

    dag = load_dag("skynomad_same_zone")
    when = datetime.now(UTC).replace(microsecond=0)
    state, run_id = run_dag_test(dag, logical_date=when, run_after=when)
    first = task_result(dag.dag_id, run_id, "train")
    assert state == "success", first
    state, again = run_dag_test(dag, logical_date=when, run_after=when)
    second = task_result(dag.dag_id, run_id, "train")
    assert (state, again) == ("success", run_id), second
    assert second["job_id"] != first["job_id"] and second["output_dir"] != first["output_dir"]
    assert second["elapsed_hours"] >= second["work_hours"], second  # trained again, not restored
    cloud = attach_cloud(simulated.home)
    (relaunch,) = cloud.groups(tags={"skynomad-job": second["job_id"]})
    assert relaunch["status"] == "succeeded"


def _where_the_job_stood(simulated) -> dict:
    """What a failed task leaves to read (it pushes no result): its trigger's last status and its groups."""
    from airflow_provider_skynomad.jobs.live import LiveStatusTable, job_live_status

    table = LiveStatusTable()
    try:
        table._ensure()
        with table.engine.connect() as conn:
            live = [json.loads(row.status) for row in conn.execute(job_live_status.select())]
    finally:
        table.close()
    return {"live": live, "groups": attach_cloud(simulated.home).groups()}
