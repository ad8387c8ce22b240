"""Fault tests: whole `dag.test()` runs on the simulated cloud replaying a small synthetic trace.

The Airflow environment (one throwaway AIRFLOW_HOME per session) is tests/support/airflow_env.py,
imported, not copied: a session running both folders must configure Airflow once. The synthetic
trace (`synthetic_trace`) has three GCP zones with spot capacity and prices a test shapes (an
outage, a price spike); the market table gets its rows as the probe DAG would have written them.
Faults in the cloud's API come from `clouds/faults.py`, put between the runtime and the
simulated cloud wherever the runtime builds its cloud (worker and trigger alike).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from tests.support.airflow_env import DAGS_FOLDER, airflow_db, skynomad_home  # noqa: F401 - fixtures

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE.parents[0] / "distributed" / "light_workload.py"
SPEED = 600.0  # one simulated hour per 6 wall seconds
ZONES = {"us-central1-a": 2.0, "us-central1-b": 2.6, "us-east4-a": 3.1}  # spot USD/h
ON_DEMAND = {"us-central1-a": 10.0, "us-central1-b": 10.0, "us-east4-a": 10.5}
HISTORY_HOURS = 72.0  # rows before the job starts (the planner's lookback)
FUTURE_HOURS = 24.0
START = pd.Timestamp("2025-10-04T00:00:00Z") + pd.Timedelta(hours=HISTORY_HOURS)

for _source in HERE.joinpath("dags").glob("skynomad_*.py"):
    shutil.copy(_source, DAGS_FOLDER / _source.name)


def synthetic_trace(shape=None) -> pd.DataFrame:
    """Ten-minute rows for the three zones; `shape(frame)` edits them in place (hours from the job's start in `at`)."""
    times = pd.date_range(
        START - pd.Timedelta(hours=HISTORY_HOURS), START + pd.Timedelta(hours=FUTURE_HOURS), freq="10min"
    )
    frames = []
    for zone, spot in ZONES.items():
        frames.append(
            pd.DataFrame(
                {
                    "observed_at": times,
                    "cloud": "gcp",
                    "region": zone.rsplit("-", 1)[0],
                    "zone": zone,
                    "instance_type": "a3-highgpu-1g",
                    "accelerator": "H100",
                    "accelerator_count": 1,
                    "requested": 16,
                    "available": 16,
                    "spot_price": spot,
                    "on_demand_price": ON_DEMAND[zone],
                }
            )
        )
    frame = pd.concat(frames, ignore_index=True)
    frame["at"] = (frame["observed_at"] - START).dt.total_seconds() / 3600.0
    if shape is not None:
        shape(frame)
    return frame.drop(columns="at").sort_values(["observed_at", "zone"], ignore_index=True)


def write_trace(frame: pd.DataFrame, path: Path) -> Path:
    out = frame.copy()
    out["observed_at"] = out["observed_at"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    out.to_csv(path, index=False)
    return path


def seed_rows(frame: pd.DataFrame, until_hours: float = FUTURE_HOURS) -> pd.DataFrame:
    """Write the rows up to `until_hours` after the start to the market table (what the probe DAG
    would write as the job runs: a view never reads past the cloud's now); returns them."""
    from airflow_provider_skynomad.market.store.table import MarketTable

    rows = frame[frame["observed_at"] <= START + pd.Timedelta(hours=until_hours)]
    table = MarketTable()
    table.create()
    table.append(rows)
    table.close()
    return rows


@pytest.fixture
def sim(airflow_db, skynomad_home, tmp_path, monkeypatch):  # noqa: F811
    """Returns `setup(frame, seed_until_hours=..., plan=None)` → a namespace of what the test needs."""

    def setup(
        frame: pd.DataFrame,
        seed_until_hours: float = FUTURE_HOURS,
        plan=None,
        extra: dict | None = None,
        speed: float = SPEED,
    ):
        trace = write_trace(frame, tmp_path / "trace.csv")
        connection = {
            "conn_type": "skynomad",
            "extra": {
                "cloud": "simulated",
                "speed": speed,
                "trace_path": str(trace),
                "cloud_options": {"trace_start": HISTORY_HOURS},
                **(extra or {}),
            },
        }
        monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps(connection))
        written = seed_rows(frame, seed_until_hours)
        if plan is not None:
            use_fault_plan(monkeypatch, plan)
        return SimpleNamespace(home=skynomad_home, trace=trace, written=written, plan=plan)

    return setup


FAST_RETRIES = None


def use_fault_plan(monkeypatch, plan) -> None:
    """Every cloud the runtime builds (worker, trigger) injects `plan`'s faults below its retries."""
    from airflow_provider_skynomad.clouds.faults import FaultyCloud
    from airflow_provider_skynomad.clouds.retry import RetryingCloud, RetryPolicy
    from airflow_provider_skynomad.hooks import skynomad as hooks

    real = hooks.make_cloud
    policy = RetryPolicy(attempts=4, base_delay_seconds=0.02, max_delay_seconds=0.1, budget_seconds=2.0)

    def make_cloud(config):
        cloud = real(config)
        inner = cloud.inner if isinstance(cloud, RetryingCloud) else cloud
        return RetryingCloud(FaultyCloud(inner, plan), policy)

    monkeypatch.setattr(hooks, "make_cloud", make_cloud)
    monkeypatch.setattr("airflow_provider_skynomad.operators.skynomad.make_cloud", make_cloud)


def load_dag(name: str, attribute: str = "dag"):
    spec = importlib.util.spec_from_file_location(f"faults_dag_{attribute}", DAGS_FOLDER / "skynomad_faults.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attribute)


def run_job(attribute: str = "dag", work_hours: float = 1.0, capfd=None) -> tuple[dict, str]:
    """dag.test() one job; (its outcome as tests/integration/faults/invariants.py takes it, the run's state).

    A failed job's outcome carries the error its task log named (from `capfd`, where dag.test()
    prints the task's log)."""
    from airflow_provider_skynomad.cli.demo import run_dag_test, task_result

    dag = load_dag("skynomad_faults", attribute)
    state, run_id = run_dag_test(dag, run_conf={"work_hours": work_hours, "workload": str(WORKLOAD)})
    job_id = recorded_job_id(dag.dag_id, run_id, "job")
    summary = task_result(dag.dag_id, run_id, "job")
    if summary is not None:
        return summary, state
    out = capfd.readouterr().out if capfd is not None else ""
    if capfd is not None:
        print(out)  # keep it for the test's own checks and for a failure's report
    return {"job_id": job_id, "error": failure_of(out)}, state


def recorded_job_id(dag_id: str, run_id: str, task_id: str) -> str | None:
    """The id of the job the task's record names (its task state), None when it wrote none."""
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider_skynomad.jobs.record import RECORD_KEY

    model = TaskStateStoreModel
    with create_session() as session:
        value = session.scalar(
            select(model.value).where(
                model.dag_id == dag_id, model.run_id == run_id, model.task_id == task_id, model.key == RECORD_KEY
            )
        )
    return json.loads(value)["job_id"] if value else None


def failure_of(log: str) -> str:
    """The error a failed task's log names: the last line of the exception that failed it."""
    errors = [line for line in log.splitlines() if line.startswith(("airflow_provider_skynomad.", "Skynomad"))]
    return errors[-1] if errors else ""


def attach_cloud(home: Path):
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud

    return SimulatedCloud.attach(home / "cloud")


def market_table():
    from airflow_provider_skynomad.market.store.table import MarketTable

    return MarketTable()


def check_run(env, outcome: dict) -> None:
    """Every invariant (invariants.py) after one job's run in the `sim` environment `env`."""
    from .invariants import check_all

    table = market_table()
    try:
        check_all(attach_cloud(env.home), [outcome], table, written=env.written, started=1)
    finally:
        table.close()
