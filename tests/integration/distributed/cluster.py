"""A distributed Airflow on one box, for the fault test and the scale benchmark.

CeleryExecutor with Redis (127.0.0.1:6379, a database number of its own per cluster and a queue
name of its own) as broker and the metadata DB as result backend; one scheduler, one dag-processor,
one api-server, two triggerers and two Celery workers, each a child process group of the caller.
PostgreSQL is a private server (initdb into the cluster's folder, its own port), so restarting it
as a fault disturbs nobody else's tests; it holds the metadata DB and the market table. The cloud
is the simulated one on a fast clock, its state under the cluster's folder.

Services are kept up like a service manager would (systemd ``Restart=always``): `supervise()`
restarts one that exited, and counts it. `kill()` is ``kill -9`` of a service's process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.network import AirflowApi, free_port

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
GCP_TRACE = REPO / "airflow_provider_skynomad" / "data" / "gcp-h100-2025-first-week.csv.gz"
PG_BIN = max(Path("/usr/lib/postgresql").glob("*/bin"), default=None)  # Debian's server binaries
FLEET_DAG = "skynomad_fleet"
PROBE_DAG = "skynomad_probe"
HOG_DAG = "skynomad_hog"
ENDED = ("success", "failed")


class PrivatePostgres:
    """A PostgreSQL server of our own (trust auth, localhost, a free port), restartable at will."""

    def __init__(self):
        # Its own folder under the system temp dir: the server runs as `postgres` when we are root,
        # and a test's tmp_path is private to root.
        self.base = Path(tempfile.mkdtemp(prefix="skynomad-pg-"))
        self.dir, self.port = self.base / "data", free_port()
        self.log = self.base / "postgres.log"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str, timeout: float = 120) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=timeout)

    def start(self) -> None:
        if self._as:
            shutil.chown(self.base, "postgres")
        self._run(str(PG_BIN / "initdb"), "-D", str(self.dir), "-U", "postgres", "--auth=trust", "--no-sync")
        with open(self.dir / "postgresql.conf", "a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.dir}'\n"
                "max_connections = 400\nfsync = off\nsynchronous_commit = off\nshared_buffers = 64MB\n"
                "shared_preload_libraries = 'pg_stat_statements'\n"
            )
        self._pg_ctl("start")
        self.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", dbname="postgres")

    def _pg_ctl(self, action: str) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.dir), "-l", str(self.log), "-w", "-m", "fast", action)

    def restart(self) -> float:
        """Restart the server (every open connection drops); the wall seconds it took."""
        began = time.monotonic()
        self._pg_ctl("restart")
        return time.monotonic() - began

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._pg_ctl("stop")
        shutil.rmtree(self.base, ignore_errors=True)

    def url(self, dbname: str, driver: str = "postgresql+psycopg2") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{dbname}"

    def execute(self, sql: str, args=(), dbname: str = "postgres") -> list[tuple]:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, dbname=dbname, user="postgres", connect_timeout=5)
        conn.autocommit = True
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, args)
                return cursor.fetchall() if cursor.description else []
        finally:
            conn.close()


def claim_redis_db() -> int:
    """An empty Redis database number (1–15) claimed for this cluster by a marker key."""
    import redis

    for number in range(15, 0, -1):
        client = redis.Redis(host="127.0.0.1", port=6379, db=number)
        if client.set("skynomad-harness:claimed", str(os.getpid()), nx=True, ex=6 * 3600) and client.dbsize() == 1:
            return number
    raise RuntimeError("no free Redis database number on 127.0.0.1:6379 (all of 1-15 hold keys)")


@dataclass
class Service:
    name: str
    args: tuple[str, ...]
    env: dict
    proc: subprocess.Popen | None = None
    restarts: int = 0
    kills: int = 0


@dataclass
class Cluster:
    """The whole distributed Airflow; `start()`, then `trigger()` runs and `wait_runs()` for them."""

    root: Path
    speed: float = 200.0
    trace_start_hours: float = 90.0
    worker_concurrency: int = 4
    workers: int = 2
    triggerers: int = 2
    services: dict[str, Service] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)  # killed on purpose: not restarted until released
    triggerer_pythonpath: tuple[str, ...] = ()  # e.g. a benchmark's sitecustomize that times decision steps
    triggerer_env: dict = field(default_factory=dict)
    # Seconds a task may stay queued before the scheduler fails it (for a retry). Short, so a fault
    # test recovers quickly from a worker that died holding a message; a scale run, whose tasks
    # wait their turn for a slot, needs it longer than the whole queue.
    task_queued_timeout: float = 45.0
    # Trace hours after the cloud's start also written to the market table, as a probe DAG running
    # every 10 minutes would write them (a view never shows rows past the cloud's now). Without them
    # a long run's markets go stale (jobs/stale.py) and every job is planned as if spot had gone.
    future_hours: float = 0.0

    def __post_init__(self):
        self.root.mkdir(parents=True, exist_ok=True)
        self.pg = PrivatePostgres()
        self.port = free_port()
        self.queue = f"skynomad-{uuid.uuid4().hex[:8]}"
        self.home = self.root / "airflow"
        self.skynomad_home = self.root / "skynomad"
        self.rest = AirflowApi(self.port)

    # -- setup -------------------------------------------------------------------------------

    def start(self) -> None:
        self.pg.start()
        for db in ("airflow", "market"):
            self.pg.execute(f"CREATE DATABASE {db}")
        self.pg.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", dbname="airflow")
        self.redis_db = claim_redis_db()
        dags = self.home / "dags"
        dags.mkdir(parents=True)
        shutil.copy(REPO / "example_dags" / "skynomad_probe.py", dags)
        for dag in (HERE / "dags").glob("skynomad_*.py"):
            shutil.copy(dag, dags)
        shutil.copy(HERE / "light_workload.py", self.home)
        self.env = self._env(dags)
        self.airflow("db", "migrate")
        self.seeded_rows = self._seed_market()
        self._add("api-server", "api-server", "--port", str(self.port))
        self._add("dag-processor", "dag-processor")
        self._add("scheduler", "scheduler")
        for i in range(self.triggerers):
            self._add(
                f"triggerer-{i}",
                "triggerer",
                AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
                PYTHONPATH=os.pathsep.join([*self.triggerer_pythonpath, self.env["PYTHONPATH"]]),
                **self.triggerer_env,
            )
        for i in range(self.workers):
            self._add(
                f"worker-{i}",
                "celery",
                "worker",
                "--queues",
                self.queue,
                "--concurrency",
                str(self.worker_concurrency),
                "--celery-hostname",
                f"worker-{i}@%h",
                "--without-mingle",
                "--without-gossip",
                AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
            )
        for name in self.services:
            self.launch(name)
        self.rest.wait_until_up(240, self.tail)
        self._wait_dags({PROBE_DAG, FLEET_DAG, HOG_DAG})
        for dag_id in (PROBE_DAG, FLEET_DAG, HOG_DAG):
            self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def _env(self, dags: Path) -> dict:
        metadata = self.pg.url("airflow")
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SKYNOMAD"))},
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "harness_hostname.hostname",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_PRE_PING": "True",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:6379/{self.redis_db}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{metadata}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.worker_concurrency),
            "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
            "AIRFLOW__CELERY__OPERATION_TIMEOUT": "10",
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "600",
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.queue,
            "AIRFLOW__CORE__PARALLELISM": "1024",
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "1024",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            # A worker parses the DAG file before each task; with every slot starting a task at once on
            # a busy small box that takes longer than the default 30 s, and the task fails at startup.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "180",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__API__PORT": str(self.port),
            # a task's calls to the execution API on a busy box: the default 5 s fails tasks at startup
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            # A task whose worker died after taking its message but before starting it stays queued
            # until this timeout (default 600 s, checked every 120 s), then is retried.
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": str(self.task_queued_timeout),
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "5",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "5",
            "AIRFLOW__TRIGGERER__CAPACITY": "1000",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "SKYNOMAD_HOME": str(self.skynomad_home),
            # a day of wall time between scheduled probe runs (the interval is on the cloud's clock)
            "SKYNOMAD_PROBE_INTERVAL_MINUTES": str(1440 * self.speed),
            "AIRFLOW_CONN_SKYNOMAD_DEFAULT": json.dumps(
                {
                    "conn_type": "skynomad",
                    "extra": {
                        "cloud": "simulated",
                        "speed": self.speed,
                        "market_url": self.pg.url("market"),
                        "state_dir": str(self.skynomad_home / "cloud"),
                        "cloud_options": {"trace_start": self.trace_start_hours},
                    },
                }
            ),
        }

    def _seed_market(self) -> int:
        """The probe DAG's history: 48 trace hours before the cloud's start, written to the market table."""
        import pandas as pd

        from airflow_provider_skynomad.market.observations import read_observations
        from airflow_provider_skynomad.market.store.table import MarketTable

        frame = read_observations(GCP_TRACE)
        until = frame["observed_at"].min() + pd.Timedelta(hours=self.trace_start_hours)
        rows = frame[(frame["observed_at"] < until) & (frame["observed_at"] >= until - pd.Timedelta(hours=48))]
        end = until + pd.Timedelta(hours=self.future_hours)
        later = frame[(frame["observed_at"] >= until) & (frame["observed_at"] < end)]
        table = MarketTable(self.pg.url("market"))
        table.create()
        table.append(pd.concat([rows, later]))
        table.close()
        self.seeded_until = until.to_pydatetime()
        return len(rows)

    # -- processes -----------------------------------------------------------------------------

    def _add(self, name: str, *args: str, **env: str) -> None:
        self.services[name] = Service(name, args, {**self.env, "SKYNOMAD_HARNESS_HOSTNAME": name, **env})

    def launch(self, name: str) -> None:
        service = self.services[name]
        log = open(self.root / f"{name}.log", "a")  # noqa: SIM115 - held open for the process lifetime
        service.proc = subprocess.Popen(
            [sys.executable, "-m", "airflow", *service.args],
            env=service.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, name: str) -> float:
        """``kill -9`` of the service's whole process group (a worker takes its task processes with it)."""
        service = self.services[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.proc.pid, signal.SIGKILL)
        service.proc.wait()
        service.kills += 1
        return time.monotonic()

    def supervise(self) -> list[str]:
        """Restart every service that exited (as a service manager would); the names restarted."""
        restarted = []
        for name, service in self.services.items():
            if name not in self.held and service.proc is not None and service.proc.poll() is not None:
                service.restarts += 1
                self.launch(name)
                restarted.append(name)
        return restarted

    def stop(self) -> None:
        for service in self.services.values():
            if service.proc is not None and service.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for service in self.services.values():
            if service.proc is None:
                continue
            try:
                service.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.proc.pid, signal.SIGKILL)
                service.proc.wait()
        self._end_groups()
        with contextlib.suppress(Exception):
            import redis

            redis.Redis(host="127.0.0.1", port=6379, db=self.redis_db).flushdb()
        self.pg.stop()

    def _end_groups(self) -> None:
        """SIGKILL any simulated instance still alive (after the checks: a leftover is a failure there)."""
        for pgid_file in (self.skynomad_home / "cloud" / "groups").glob("*/pgid.json"):
            with contextlib.suppress(Exception):
                os.killpg(int(json.loads(pgid_file.read_text())["pgid"]), signal.SIGKILL)

    def airflow(self, *args: str, timeout: float = 600) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode:
            raise RuntimeError(f"airflow {' '.join(args)}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
        return result.stdout

    def tail(self, chars: int = 2500) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-chars:]}" for p in sorted(self.root.glob("*.log")))

    # -- REST API and metadata ----------------------------------------------------------------

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        return self.rest.call(method, path, body)

    def _wait_dags(self, dag_ids: set[str], timeout: float = 240) -> None:
        stop = time.monotonic() + timeout
        while time.monotonic() < stop:
            with contextlib.suppress(Exception):
                if dag_ids <= {r[0] for r in self.sql("SELECT dag_id FROM dag")}:
                    return
            time.sleep(1)
        raise RuntimeError(f"DAGs {sorted(dag_ids)} were not parsed in {timeout} s\n{self.tail()}")

    def sql(self, query: str, args=(), dbname: str = "airflow") -> list[tuple]:
        return self.pg.execute(query, args, dbname=dbname)

    def trigger(self, dag_id: str, conf: dict | None = None, run_id: str | None = None) -> str:
        return self.rest.trigger(dag_id, conf, run_id)

    def run_states(self, dag_id: str) -> dict[str, str]:
        return dict(self.sql("SELECT run_id, state FROM dag_run WHERE dag_id=%s", (dag_id,)))

    def wait_runs(self, dag_id: str, run_ids: list[str], timeout: float, during=None) -> dict[str, str]:
        """Wait until every run ended (supervising the services meanwhile); their states.

        `during(elapsed_s)` is called about every second, e.g. to inject faults.
        """
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            self.supervise()
            if during is not None:
                during(time.monotonic() - began)
            with contextlib.suppress(Exception):
                states = self.run_states(dag_id)
                if all(states.get(r) in ENDED for r in run_ids):
                    return {r: states[r] for r in run_ids}
            time.sleep(1)
        states = self.run_states(dag_id)
        open_runs = {r: states.get(r) for r in run_ids if states.get(r) not in ENDED}
        raise TimeoutError(f"{len(open_runs)} runs of {dag_id} did not end in {timeout} s: {open_runs}\n{self.tail()}")

    def summaries(self, dag_id: str = FLEET_DAG, task_id: str = "train") -> dict[str, dict]:
        rows = self.sql(
            "SELECT run_id, value FROM xcom WHERE dag_id=%s AND task_id=%s AND key='return_value'", (dag_id, task_id)
        )
        return {run_id: value if isinstance(value, dict) else json.loads(value) for run_id, value in rows}

    def task_log(self, dag_id: str, run_id: str) -> str:
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        return "".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*.log"))) if folder.exists() else ""

    def cloud(self):
        from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud

        return SimulatedCloud.attach(self.skynomad_home / "cloud")
