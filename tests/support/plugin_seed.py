"""Seed data for the plugin's tests and benchmark: a market table, SkyNomad task instances and their task state.

Job records are built with the runtime's own types (JobRecord, Segment, summarize, live_status) so
the pages read exactly what a worker writes. Task instances and DAG runs are inserted as rows in a
migrated metadata database (the api-server only reads them); the task state goes through Airflow's
state backend, as a worker's writes do.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

FINISHED = ("skynomad_fine_tune", "finished_run", "fine_tune")
RUNNING = ("skynomad_fine_tune", "running_run", "fine_tune")
HIDDEN = ("secret_dag", "hidden_run", "fine_tune")  # a DAG the restricted test user may not read
FINISHED_ZONES = ("us-central1-a", "us-west1-a", "europe-west1-c")
FINISHED_COST_USD = 61.37
DEADLINE_HOURS = 12.0


def h100_rows(zone: str, times, available, spot_price=2.0, on_demand_price=11.06) -> pd.DataFrame:
    """One GCP H100 market's observations in the market-observation format, one row per time."""
    return pd.DataFrame(
        {
            "observed_at": times,
            "cloud": "gcp",
            "region": zone.rsplit("-", 1)[0],
            "zone": zone,
            "instance_type": "a3-highgpu-1g",
            "accelerator": "H100",
            "accelerator_count": 1,
            "requested": 1,
            "available": available,
            "spot_price": spot_price,
            "on_demand_price": on_demand_price,
        }
    )


def market_frame(markets: int = 6, days: float = 2.0, step_minutes: int = 10, seed: int = 7) -> pd.DataFrame:
    """Observations in the market-observation format: `markets` zones, one row per step, capacity on and off."""
    rng = np.random.default_rng(seed)
    end = pd.Timestamp(datetime.now(UTC)).floor("min")
    times = pd.date_range(end=end, periods=int(days * 24 * 60 / step_minutes), freq=f"{step_minutes}min")
    frames = []
    for i in range(markets):
        region = f"region{i // 3}"
        zone = FINISHED_ZONES[i] if i < len(FINISHED_ZONES) else f"{region}-zone{i}"
        spells = np.cumsum(rng.exponential(6.0 + i, size=len(times)) > 5.0 + i) % 2
        spot = 2.0 + 0.3 * i + 0.2 * np.sin(np.arange(len(times)) / 30.0 + i)
        frames.append(h100_rows(zone, times, spells.astype(int), spot.round(4)))
    frame = pd.concat(frames, ignore_index=True)
    frame["observed_at"] = frame["observed_at"].astype("datetime64[us, UTC]")
    return frame


def seed_market(url: str, frame: pd.DataFrame) -> int:
    from airflow_provider_skynomad.market.store.table import MarketTable

    table = MarketTable(url)
    try:
        table.create()
        return table.append(frame)
    finally:
        table.close()


def own_job_id(dag_id: str, run_id: str, task_id: str, try_id: str = "1") -> str:
    """The id of a job the task instance started (what its worker writes; the pages show no other)."""
    from airflow_provider_skynomad.jobs.record import job_id_for

    return job_id_for(dag_id, run_id, task_id, -1, try_id)


def finished_record(job_id: str = "sn-finished0000001") -> dict:
    """A job that was preempted in us-central1-a, moved from us-west1-a and finished on-demand in europe-west1-c."""
    from airflow_provider_skynomad.jobs.record import JobRecord, Segment
    from airflow_provider_skynomad.jobs.summary import summarize
    from airflow_provider_skynomad.planner.actions import Mode, Option
    from airflow_provider_skynomad.planner.job import JobSpec, JobState

    job = JobSpec(work_hours=8.0, deadline_hours=DEADLINE_HOURS, cold_start_hours=0.2)
    record = JobRecord(
        job_id=job_id,
        job=job,
        job_start_hours=0.0,
        deadline_hours=DEADLINE_HOURS,
        zones=list(FINISHED_ZONES),
        instance_types=None,
        policy="skynomad",
        state=JobState(elapsed_hours=9.6, progress_hours=8.0, running=Option("europe-west1-c", Mode.ON_DEMAND)),
        all_on_demand_usd=90.69,
    )
    a, b, c = FINISHED_ZONES
    record.note(0.0, "start", work_h=8.0, deadline_h=DEADLINE_HOURS, zones=3, policy="skynomad")
    record.note(0.0, "decide", want=f"spot({a})", reason="V=9.10 $/h (barrier 4.00, reference 2.10), U_here=0.00")
    record.note(0.0, "launch", mode="spot", zone=a, usd_per_h=2.10)
    record.segments.append(Segment("m", a, "us-central1", "spot", 0.0, 2.10, 0.2, ["i-1"], 3.1, "preempted"))
    record.note(3.1, "preempted", zone=a, progress="35%")
    record.note(3.1, "launch", mode="spot", zone=b, usd_per_h=2.45)
    record.segments.append(Segment("m", b, "us-west1", "spot", 3.2, 2.45, 0.2, ["i-2"], 6.0, "migrated"))
    decided = record.note(
        6.0, "decide", want=f"on-demand({c})", reason="V=11.80 $/h (barrier 11.80, reference 2.40), U_here=-1.2"
    )
    decided["options"] = [  # what planner/explain.py `weighed` keeps: the best few, tried ones first
        {"market": f"{c}:a3-highgpu-8g", "mode": "on-demand", "value_usd_per_hour": 11.8, "useful_share": 0.97,
         "price_usd_per_hour": 7.4, "egress_usd_per_hour": 0.31, "stay_hours": 3.6, "utility_usd_per_hour": 3.73,
         "rank": 1},
        {"market": f"{b}:a3-highgpu-8g", "mode": "spot", "value_usd_per_hour": 11.8, "useful_share": 0.41,
         "price_usd_per_hour": 2.45, "egress_usd_per_hour": 0.0, "stay_hours": 0.4, "utility_usd_per_hour": -1.2,
         "rank": None},
    ]  # fmt: skip
    record.note(
        6.0,
        "migrate",
        zone=c,
        mode="on-demand",
        usd_per_h=11.06,
        **{"from": b},
        why="us-west1-a preempted 2 times in 1 h",
        ends_segment=1,  # the launch replaced the group of segment 1
    )
    record.segments.append(Segment("m", c, "europe-west1", "on-demand", 6.0, 11.06, 0.3, ["i-3"], 9.6, "finished"))
    record.note(9.6, "finished")
    record.preemptions, record.migrations, record.finished = 1, 1, True
    summary = summarize(record, 9.6)
    summary["cost_usd"]["total"] = FINISHED_COST_USD
    record.summary = summary
    return record.to_dict()


def running_record(job_id: str = "sn-running00000001", zone: str = "us-west1-a") -> tuple[dict, dict]:
    """(record, status) of a job that runs on spot in `zone`, 40 % done."""
    from airflow_provider_skynomad.clouds.base import GroupHandle
    from airflow_provider_skynomad.jobs.narrate import live_status
    from airflow_provider_skynomad.jobs.record import JobRecord, Segment
    from airflow_provider_skynomad.planner.actions import Mode, Option
    from airflow_provider_skynomad.planner.job import JobSpec, JobState

    job = JobSpec(work_hours=10.0, deadline_hours=16.0, cold_start_hours=0.2)
    record = JobRecord(
        job_id=job_id,
        job=job,
        job_start_hours=0.0,
        deadline_hours=16.0,
        zones=[zone, "us-central1-a"],
        instance_types=None,
        policy="skynomad",
        state=JobState(elapsed_hours=4.5, progress_hours=4.0, running=Option(zone, Mode.SPOT)),
        all_on_demand_usd=112.8,
        group=GroupHandle("simulated", zone, ("i-9",), True, "tok", job_id, zone.rsplit("-", 1)[0]),
    )
    record.note(0.0, "start", work_h=10.0, deadline_h=16.0, zones=2, policy="skynomad")
    record.note(0.0, "launch", mode="spot", zone=zone, usd_per_h=2.3)
    record.segments.append(Segment("m", zone, "us-west1", "spot", 0.0, 2.3, 0.2, ["i-9"]))
    return record.to_dict(), live_status(record, 4.5, 10.35)


def insert_dag(dag_id: str) -> None:
    """The DAG's row (auth managers list readable DAGs from it), unless a parsed DAG put it there already."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session

    with create_session() as session:
        if session.get(DagModel, dag_id) is not None:
            return
        if session.get(DagBundleModel, "dags-folder") is None:
            session.add(DagBundleModel(name="dags-folder"))
            session.flush()
        session.add(DagModel(dag_id=dag_id, bundle_name="dags-folder", is_paused=False, is_stale=False))


def declare_dag(dag_id: str, task_ids: tuple[str, ...], conn_id: str) -> None:
    """The DAG as the dag-processor serializes it: SkyNomad tasks on connection `conn_id` (the job
    pages read a task's job from the connection its DAG declares). Task instances inserted after
    this run with this version."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

    insert_dag(dag_id)
    with DAG(dag_id, schedule=None, start_date=datetime(2025, 1, 1)) as dag:
        for task_id in task_ids:
            SkyNomadOperator(task_id=task_id, work_hours=1.0, skynomad_conn_id=conn_id)
    with create_session() as session:
        SerializedDagModel.write_dag(LazyDeserializedDAG.from_dag(dag), bundle_name="dags-folder", session=session)


def insert_task(dag_id: str, run_id: str, task_id: str, state: str, *, when: datetime | None = None) -> None:
    """A DAG run and one SkyNomadOperator task instance, as rows (the api-server reads them, never runs them)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    insert_dag(dag_id)
    when = when or datetime.now(UTC) - timedelta(hours=2)
    with create_session() as session:
        version = _dag_version(session, dag_id)
        session.execute(
            insert(DagRun.__table__).values(
                dag_id=dag_id,
                run_id=run_id,
                run_type="manual",
                run_after=when,
                logical_date=when,
                start_date=when,
                state="success" if state == "success" else "running",
                clear_number=0,
                span_status="not_started",
                created_dag_version_id=version,
            )
        )
        session.execute(
            insert(TI.__table__).values(
                id=uuid.uuid4(),
                dag_id=dag_id,
                run_id=run_id,
                task_id=task_id,
                map_index=-1,
                try_number=1,
                max_tries=2,
                pool="default_pool",
                pool_slots=1,
                operator="SkyNomadOperator",
                state=state,
                start_date=when,
                span_status="not_started",
                dag_version_id=version,
            )
        )


def _dag_version(session, dag_id: str):
    """The parsed DAG's latest version when the DAG was serialized (the UI's task pages need it), else None."""
    from airflow.models.dag_version import DagVersion
    from sqlalchemy import select

    return session.scalar(
        select(DagVersion.id).where(DagVersion.dag_id == dag_id).order_by(DagVersion.version_number.desc()).limit(1)
    )


def write_state(dag_id: str, run_id: str, task_id: str, record: dict, status: dict | None = None) -> None:
    """The job's task state through Airflow's state backend (what the worker's task_state_store writes)."""
    from airflow.state import TaskScope, get_state_backend

    from airflow_provider_skynomad.jobs.record import RECORD_KEY, STATUS_KEY

    scope = TaskScope(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=-1)
    backend = get_state_backend()
    backend.set(scope, RECORD_KEY, json.dumps(record))
    if status is not None:
        backend.set(scope, STATUS_KEY, json.dumps(status))


def seed_jobs() -> None:
    """A finished job and a running one in skynomad_fine_tune, and one more job in a DAG few may read."""
    insert_task(*FINISHED, "success")
    write_state(*FINISHED, finished_record(own_job_id(*FINISHED)))
    insert_task(*RUNNING, "deferred", when=datetime.now(UTC) - timedelta(hours=1))
    write_state(*RUNNING, *running_record(own_job_id(*RUNNING)))
    insert_task(*HIDDEN, "deferred")
    write_state(*HIDDEN, *running_record(own_job_id(*HIDDEN), "asia-south2-b"))


def add_connection(conn_id: str, market_url: str, password: str) -> None:
    """A `skynomad` connection whose password is a marker: no page may ever show it."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        session.add(
            Connection(
                conn_id=conn_id,
                conn_type="skynomad",
                password=password,
                login="market",
                extra=json.dumps({"market_url": market_url, "cloud": "simulated"}),
            )
        )


def main() -> None:
    """Seed the Airflow home of the environment (the browser test runs this beside its api-server)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--market-url", required=True)
    parser.add_argument("--conn-id", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--markets", type=int, default=6)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--jobs", type=int, default=0, help="extra finished jobs (the benchmark's dashboard)")
    args = parser.parse_args()
    seed_market(args.market_url, market_frame(markets=args.markets, days=args.days))
    seed_jobs()
    for i in range(args.jobs):
        run = ("skynomad_fine_tune", f"bench_run_{i:04d}", "fine_tune")
        insert_task(*run, "success", when=datetime.now(UTC) - timedelta(minutes=5 + i))
        write_state(*run, finished_record(own_job_id(*run)))
    add_connection(args.conn_id, args.market_url, args.password)


if __name__ == "__main__":
    main()


def simulated_cloud_market(tmp_path: Path) -> tuple[str, dict]:
    """A simulated cloud made 25 h ago, 50 h into its trace (speed 2), and a market table whose
    three markets' last probes are 10 minutes old on its clock; four more markets' rows come after
    its now (the imported trace's rest). (market URL, the skynomad connection's extra)."""
    import time

    state_dir = tmp_path / "cloud"
    state_dir.mkdir()
    trace_start = pd.Timestamp("2025-10-07T18:10:00+00:00")
    speed, wall_seconds = 2.0, 90000.0
    (state_dir / "cloud.json").write_text(
        json.dumps({"epoch_wall": time.time() - wall_seconds, "speed": speed, "trace_start": trace_start.isoformat()})
    )
    sim_now = trace_start + pd.Timedelta(hours=wall_seconds * speed / 3600.0)
    frame = market_frame(markets=3, days=1.0)
    frame["observed_at"] += sim_now.floor("min") - frame["observed_at"].max() - pd.Timedelta(minutes=10)
    ahead = market_frame(markets=4, days=1.0)
    ahead["observed_at"] += sim_now.floor("min") - ahead["observed_at"].min() + pd.Timedelta(minutes=30)
    url = f"sqlite:///{tmp_path / 'market.db'}"
    seed_market(url, pd.concat([frame, ahead], ignore_index=True))
    return url, {"market_url": url, "cloud": "simulated", "state_dir": str(state_dir), "speed": speed}


def empty_markets_page(source: str, days: float = 1) -> str:
    """The markets page of a table with no rows, named `source` (its words and what it names)."""
    from airflow_provider_skynomad.plugin.overview import heatmap_from_buckets
    from airflow_provider_skynomad.plugin.pages import markets_page

    heat = heatmap_from_buckets(pd.DataFrame(), pd.Timestamp.now(tz="UTC"), 0.0, 0)
    return markets_page([], heat, pd.DataFrame(), None, days=days, max_age_hours=2, source=source, can_probe=False)
