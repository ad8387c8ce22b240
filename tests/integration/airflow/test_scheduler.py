"""One run through real Airflow services: scheduler + dag-processor + api-server + triggerer,
LocalExecutor, PostgreSQL metadata DB (a fresh database on 127.0.0.1:5432, dropped afterwards).

The probe DAG runs first (mapped tasks on LocalExecutor workers), then the fine-tune DAG, whose
SkyNomad task must reach success having deferred to the triggerer. In CI (CI=true) an unreachable
PostgreSQL fails the test instead of skipping it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from airflow_provider_skynomad.cli.demo import model_is_bit_identical
from tests.support.network import AirflowApi, free_port

from .conftest import EXAMPLE_DAGS, TEST_DAGS, seed_market

# `make test` runs the suite on two xdist workers; the tests that start Airflow's services or a whole
# cloud end to end share one, so no two of them load the two cores at once.
pytestmark = pytest.mark.xdist_group("services")

# Slower than the dag.test runs: real services add seconds of latency per hop (a worker resume of
# 10 s is 33 simulated minutes here); the operator learns that lag and its safety net reserves it.
SPEED = 200.0
TRACE_START_HOURS = 90.0


@pytest.fixture
def metadata_db(fresh_postgres_database):
    return fresh_postgres_database


# The triggerer's block watchdog (airflow/jobs/triggerer_job_runner.py) in a process with no trigger: each
# line it prints is a time the box, not a trigger, held an event loop past the warning threshold.
WATCHDOG_TWIN = """
import asyncio, time
async def watch():
    while True:
        last_run = time.monotonic()
        await asyncio.sleep(0.1)
        if time.monotonic() - last_run > 0.2:
            print(f"blocked for {time.monotonic() - last_run:.2f} seconds", flush=True)
asyncio.run(watch())
"""


class Services:
    """Airflow components as child processes of this test; stopped by their own pids."""

    def __init__(self, env: dict, logs: Path):
        self.env, self.logs, self.procs = env, logs, {}

    def airflow(self, *args, timeout=300) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert result.returncode == 0, f"airflow {' '.join(args)}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        return result

    def start(self, name: str, *args) -> None:
        log = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 - held open for the process lifetime
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(self.logs.glob("*.log")))


def _query(admin, name, sql, args=()):
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, dbname=name, user=admin.info.user)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, args)
            return cursor.fetchall()
    finally:
        conn.close()


def _wait_for_run(admin, name, dag_id, services, timeout, watch_task=None) -> tuple[str, set]:
    seen: set = set()
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        if watch_task:
            seen |= {
                r[0]
                for r in _query(
                    admin, name, "SELECT state FROM task_instance WHERE dag_id=%s AND task_id=%s", (dag_id, watch_task)
                )
                if r[0]
            }
        rows = _query(admin, name, "SELECT state FROM dag_run WHERE dag_id=%s", (dag_id,))
        if rows and rows[0][0] in ("success", "failed"):
            return rows[0][0], seen
        time.sleep(0.5)
    pytest.fail(f"{dag_id} did not finish in {timeout}s\n{services.tail()}")


def test_fine_tune_through_scheduler_and_triggerer(metadata_db, tmp_path, gcp_frame):
    url, admin, name = metadata_db
    home = tmp_path / "airflow"
    dags = home / "dags"
    dags.mkdir(parents=True)
    for dag_file in ("skynomad_probe.py", "skynomad_fine_tune.py"):
        shutil.copy(EXAMPLE_DAGS / dag_file, dags / dag_file)
    for dag_file in ("skynomad_same_zone.py", "skynomad_busy_pool.py"):
        shutil.copy(TEST_DAGS / dag_file, dags / dag_file)
    port = free_port()
    skynomad_home = tmp_path / "skynomad"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__PORT": str(port),
        # A task's first call to the execution API waits for an api-server that may still be warming
        # up on a busy box (the default 5 s timed out and failed the task before it ran).
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "SKYNOMAD_HOME": str(skynomad_home),
        # a day of wall time between scheduled probe runs (the interval is on the cloud's clock)
        "SKYNOMAD_PROBE_INTERVAL_MINUTES": str(1440 * SPEED),  # a day of wall time: runs only when triggered
        "SKYNOMAD_MAX_MARKET_AGE_HOURS": "2",  # what the test's own DAGs ask, and what a triggered probe run refreshes
        "AIRFLOW_CONN_SKYNOMAD_DEFAULT": json.dumps(
            {
                "conn_type": "skynomad",
                "extra": {"cloud": "simulated", "speed": SPEED, "cloud_options": {"trace_start": TRACE_START_HOURS}},
            }
        ),
    }
    services = Services(env, tmp_path)
    services.airflow("db", "migrate")
    start = gcp_frame["observed_at"].min() + pd.Timedelta(hours=TRACE_START_HOURS)
    os.environ["SKYNOMAD_HOME"], old = str(skynomad_home), os.environ.get("SKYNOMAD_HOME")
    try:
        seed_market(gcp_frame, until=start)
    finally:
        os.environ["SKYNOMAD_HOME"] = old or ""
    twin = None  # the triggerer's watchdog without triggers, started with the triggerer (WATCHDOG_TWIN)
    try:
        # The api-server and the dag-processor start together (parsing needs no API); the scheduler
        # waits for the API, so no task starts before a worker can reach it.
        services.start("api-server", "api-server", "--port", str(port))
        services.start("dag-processor", "dag-processor")
        api = AirflowApi(port)
        api.wait_until_up(180, services.tail)
        services.start("scheduler", "scheduler")
        services.start("triggerer", "triggerer")
        twin = subprocess.Popen(
            [sys.executable, "-c", WATCHDOG_TWIN], stdout=(tmp_path / "watchdog-twin.log").open("w")
        )
        stop = time.monotonic() + 180
        while time.monotonic() < stop:
            parsed = {r[0] for r in _query(admin, name, "SELECT dag_id FROM dag")} if _has_table(admin, name) else set()
            if {"skynomad_probe", "skynomad_fine_tune", "skynomad_same_zone", "skynomad_busy_pool"} <= parsed:
                break
            time.sleep(1)
        else:
            pytest.fail(f"DAGs were not parsed\n{services.tail()}")

        api.trigger("skynomad_probe")
        state, _ = _wait_for_run(admin, name, "skynomad_probe", services, 240)
        assert state == "success", services.tail()

        # The fine-tune and two runs of one DAG at once, on one connection, forced into one zone
        # (on-demand: they take no spot capacity from the fine-tune).
        api.trigger("skynomad_fine_tune", {"work_hours": 1.0})
        for _ in range(2):
            api.trigger("skynomad_same_zone")
        state, seen = _wait_for_run(admin, name, "skynomad_fine_tune", services, 300, watch_task="fine_tune")
        assert state == "success", services.tail()
        (value,) = _query(
            admin,
            name,
            "SELECT value FROM xcom WHERE dag_id='skynomad_fine_tune' AND task_id='fine_tune' AND key='return_value'",
        )[0]
        summary = value if isinstance(value, dict) else json.loads(value)
        task_logs = "".join(
            p.read_text() for p in (home / "logs").rglob("*.log") if "dag_id=skynomad_fine_tune" in str(p)
        )
        timeline = [line for line in task_logs.splitlines() if "timeline in cloud hours" in line]
        assert summary["deferrals"] >= 1 and summary["deadline_met"] is True, f"{summary}\n{timeline}"
        assert "deferred" in seen or summary["deferrals"] >= 1
        assert "Pausing task as DEFERRED" in task_logs
        assert "SkyNomadTrigger" in task_logs or "Trigger" in task_logs
        # Every blocking call runs in a thread; the triggerer may still report a stall or two while it
        # first imports the trigger class (Airflow imports it on the event loop; more under CPU load),
        # and one as it creates each trigger (on the event loop too, just before the trigger's "starting"
        # line), never one per decision step. A loaded box starves any process's event loop now and
        # then: the stalls its twin (the same watchdog, no triggers) saw over the same time are the box's.
        # The two counts are two samples of the box's starvation over the same minutes (rare, independent
        # stalls: Poisson counts of one mean), so they differ by chance by about √(2 · that mean): the
        # allowance is the twin's count plus three such spreads, from what the twin measured (none on an
        # idle box), not a constant tuned on one box.
        stalls = (tmp_path / "triggerer.log").read_text().count("blocked for")
        starts = sum(p.read_text().count(") starting") for p in (home / "logs").rglob("*.log.trigger.*.log"))
        box_stalls = len((tmp_path / "watchdog-twin.log").read_text().splitlines())
        chance = 3.0 * math.sqrt(2.0 * box_stalls)
        assert stalls <= 2 + starts + box_stalls + chance, (
            f"{stalls} stalls of the triggerer's event loop, {starts} trigger starts, {box_stalls} stalls of its twin "
            f"(± {chance:.1f} by chance)"
        )
        lags = [summary["lag_hours_max"]]
        quantiles = [(summary["lag_hours_p50"], summary["lag_hours_p99"])]

        # The two same-zone runs: each resumes only its own checkpoints and ends with its own model,
        # bit-identical to an uninterrupted run.
        states = _wait_for_all_runs(admin, name, "skynomad_same_zone", 2, services, 300)
        assert states == ["success", "success"], services.tail()
        rows = _query(
            admin,
            name,
            "SELECT run_id, value FROM xcom WHERE dag_id='skynomad_same_zone' AND task_id='train' "
            "AND key='return_value'",
        )
        summaries = [v if isinstance(v, dict) else json.loads(v) for _, v in rows]
        assert len({s["job_id"] for s in summaries}) == 2
        for i, same in enumerate(summaries):
            assert same["zones_timeline"][0]["zone"] == "us-central1-a"
            assert same["elapsed_hours"] >= same["work_hours"], same  # no run finished on another's checkpoint
            assert same["output_dir"] != summaries[1 - i]["output_dir"]
            assert model_is_bit_identical(same, tmp_path / f"reference-{i}")
            lags.append(same["lag_hours_max"])
            quantiles.append((same["lag_hours_p50"], same["lag_hours_p99"]))
        # Both runs' train task cleared, as from the UI: each trains again from the start as a new
        # job (Airflow 3.3 keeps the task state on a clear: the old record must not be resumed).
        # Meanwhile, on a busy box (a CPU burner), after a probe run: two fine-tunes, and a job in a
        # saturated pool (another task holds the only slot while the job is deferred, so every
        # resume waits for it); each deadline holds anyway.
        for (run_id,) in _query(admin, name, "SELECT run_id FROM dag_run WHERE dag_id='skynomad_same_zone'"):
            body = {"dry_run": False, "dag_run_id": run_id, "task_ids": ["train"], "only_failed": False}
            api.call("POST", "/api/v2/dags/skynomad_same_zone/clearTaskInstances", body)
        first_jobs = {s["job_id"] for s in summaries}
        api.call("POST", "/api/v2/pools", {"name": "skynomad_tight", "slots": 1, "description": "one slot, shared"})
        _two_fine_tunes_on_a_busy_box(admin, name, api, services, skynomad_home, home, beside="skynomad_busy_pool")
        stop = time.monotonic() + 300
        while time.monotonic() < stop:
            states = [r[0] for r in _query(admin, name, "SELECT state FROM dag_run WHERE dag_id='skynomad_same_zone'")]
            rows = _query(
                admin,
                name,
                "SELECT value FROM xcom WHERE dag_id='skynomad_same_zone' AND task_id='train' AND key='return_value'",
            )
            again = [v if isinstance(v, dict) else json.loads(v) for (v,) in rows]
            if states == ["success"] * 2 and len(again) == 2 and not {s["job_id"] for s in again} & first_jobs:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the cleared runs did not train again: {states}\n{services.tail()}")
        for i, cleared in enumerate(again):
            assert cleared["elapsed_hours"] >= cleared["work_hours"], cleared  # not the last final checkpoint
            assert model_is_bit_identical(cleared, tmp_path / f"reference-cleared-{i}")
        assert _wait_for_all_runs(admin, name, "skynomad_busy_pool", 1, services, 300) == ["success"], services.tail()
        ((busy,),) = _query(
            admin,
            name,
            "SELECT value FROM xcom WHERE dag_id='skynomad_busy_pool' AND task_id='train' AND key='return_value'",
        )
        busy = busy if isinstance(busy, dict) else json.loads(busy)
        assert busy["deadline_met"] is True, busy
        quantiles.append((busy["lag_hours_p50"], busy["lag_hours_p99"]))
        wall = [[round(h * 3600 / SPEED, 2) for h in pair] for pair in quantiles]
        print(f"resume lag per job, (p50, p99) in wall s at {SPEED:g}x: {wall}; max in cloud h: {lags}")
    finally:
        services.stop()
        if twin is not None:
            twin.kill()
            twin.wait()


def _two_fine_tunes_on_a_busy_box(admin, name, api, services, skynomad_home: Path, home: Path, beside: str) -> None:
    """Two fine-tune runs at once beside a CPU burner: the trigger controls each job, so a busy box
    costs neither its saving nor its deadline; what the job page shows matches the cloud's bill.
    A run of the DAG `beside` starts with them (its outcome is the caller's to check)."""
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
    from airflow_provider_skynomad.jobs.live import LiveStatusTable
    from airflow_provider_skynomad.market.store.table import default_market_url

    before = {r[0] for r in _query(admin, name, "SELECT run_id FROM dag_run WHERE dag_id='skynomad_fine_tune'")}
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    samples: list[dict] = []
    try:
        # As the recipe says: the probe DAG runs, then the fine-tunes (the market table must be fresh).
        probes = len(_query(admin, name, "SELECT run_id FROM dag_run WHERE dag_id='skynomad_probe'"))
        api.trigger("skynomad_probe")
        assert set(_wait_for_all_runs(admin, name, "skynomad_probe", probes + 1, services, 240)) == {"success"}
        for _ in range(2):
            api.trigger("skynomad_fine_tune", {"work_hours": 2.0})
        api.trigger(beside)
        stop = time.monotonic() + 420
        os.environ["SKYNOMAD_HOME"], old = str(skynomad_home), os.environ.get("SKYNOMAD_HOME")
        try:
            url = default_market_url()
        finally:
            os.environ["SKYNOMAD_HOME"] = old or ""
        board = LiveStatusTable(url)
        try:
            while time.monotonic() < stop:
                rows = _query(admin, name, "SELECT run_id, state FROM dag_run WHERE dag_id='skynomad_fine_tune'")
                runs = {r: st for r, st in rows if r not in before}
                with contextlib.suppress(Exception):
                    samples += [{**v, "job_id": k} for k, v in board.read(_job_ids(skynomad_home)).items()]
                if len(runs) == 2 and all(st in ("success", "failed") for st in runs.values()):
                    break
                time.sleep(1.0)
            else:
                pytest.fail(f"the two fine-tunes did not finish\n{services.tail()}")
        finally:
            board.close()
    finally:
        burner.kill()
        burner.wait()
    assert sorted(runs.values()) == ["success", "success"], services.tail()
    rows = _query(
        admin, name, "SELECT run_id, value FROM xcom WHERE dag_id='skynomad_fine_tune' AND key='return_value'"
    )
    summaries = [v if isinstance(v, dict) else json.loads(v) for r, v in rows if r in runs]
    cloud = SimulatedCloud.attach(skynomad_home / "cloud")
    for summary in summaries:
        saving = 1.0 - summary["cost_usd"]["total"] / summary["all_on_demand_cost_usd"]
        assert summary["deadline_met"] and saving >= 0.6, summary
        groups = sorted(cloud.launches(summary["job_id"]), key=lambda g: g["start_hours"])
        # The job's clock starts when its task does, which may be well before its first launch on a busy
        # box (the task waited for a worker): the first group started at the first segment's job hour.
        start = groups[0]["start_hours"] - summary["zones_timeline"][0]["start_hours"]
        for before_group, after_group in zip(groups, groups[1:], strict=False):
            # No idling after a preemption: the relaunch comes within a decision step (and its call).
            if before_group["end_reason"] == "preempted":
                assert after_group["start_hours"] - before_group["end_hours"] <= 1 / 6 + 0.05, groups
        story = [(g["zone"], g["spot"], g["start_hours"], g["end_hours"], g["end_reason"]) for g in groups]
        # A status's spend is read when it is published, its elapsed hours when the look began: on a busy
        # box the two are apart by up to the job's own measured reaction lag, at the dearest group's rate.
        lives = [(g["cost_usd"], g["end_hours"] - g["start_hours"]) for g in groups if g["end_hours"] is not None]
        lag_usd = max((cost / life for cost, life in lives if life > 0), default=0.0) * summary["lag_hours_p99"]
        for status in (s for s in samples if s["job_id"] == summary["job_id"] and s["state"] == "running"):
            at = start + status["elapsed_hours"]
            # The group that ran last at that time: a look may still say "running" a few cloud
            # seconds after its group's workload exited, before the controller has seen the exit.
            (group,) = [g for g in groups if g["start_hours"] <= at][-1:] or [None]
            assert group is not None and status["zone"] == group["zone"], (at, status, story)
            assert status["mode"] == ("spot" if group["spot"] else "on-demand"), (at, status, story)
            billed = sum(_billed_until(g, at) for g in groups)
            assert abs(status["spend_usd"] - billed) <= 0.05 * billed + 0.1 + lag_usd, (status, billed, lag_usd, groups)
    logs = [p for p in (home / "logs").rglob("*.log") if "dag_id=skynomad_fine_tune" in str(p)]
    for log in logs:
        if not any(r in str(log) for r in runs):
            continue
        times = [float(t) for t in re.findall(r"\[t=(-?[0-9.]+) h\]", log.read_text())]
        assert times == sorted(times), f"{log}: log lines out of time order: {times}"


def _job_ids(skynomad_home: Path) -> list[str]:
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud

    return sorted({g["job_id"] for g in SimulatedCloud.attach(skynomad_home / "cloud").launches() if g["job_id"]})


def _billed_until(group: dict, at: float) -> float:
    """What the cloud billed for `group` up to cloud hour `at` (its cost spread evenly over its life)."""
    end = group["end_hours"] if group["end_hours"] is not None else at
    life = max(end - group["start_hours"], 1e-9)
    return group["cost_usd"] * max(0.0, min(at, end) - group["start_hours"]) / life


def _wait_for_all_runs(admin, name, dag_id, count, services, timeout) -> list[str]:
    """The states of every run of `dag_id` once there are at least `count` and all have ended."""
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        rows = _query(admin, name, "SELECT state FROM dag_run WHERE dag_id=%s", (dag_id,))
        states = sorted(r[0] for r in rows)
        if len(rows) >= count and all(s in ("success", "failed") for s in states):
            return states
        time.sleep(0.5)
    pytest.fail(f"{count} runs of {dag_id} did not finish in {timeout}s\n{services.tail()}")


def _has_table(admin, name) -> bool:
    return bool(_query(admin, name, "SELECT 1 FROM information_schema.tables WHERE table_name='dag'"))
