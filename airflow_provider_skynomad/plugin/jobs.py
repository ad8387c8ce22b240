"""SkyNomad jobs as the API server sees them: task instances and their task state, read, never written.

The record (``skynomad_job``) and live status (``skynomad_status``) are read through Airflow's
configured state backend (``airflow.state.get_state_backend()``, the same one the public API's
task-state-store routes use), one task instance at a time for a job page. The dashboard reads
many at once: with the default metastore backend that is one query on the ``task_state_store``
table, otherwise one backend ``get`` per task. Values stay plain dicts here (a record of another
version is shown as far as it can be, not refused as the runtime must).

Task state is written by whoever may write the task's DAG (Airflow's public task-state route), so a
page shows only the job of its own task instance (`own_job`: the job id's task key is the task's;
DESIGN.md §8) and reads the job's newer record and live status from the connection the DAG declares
for the task (its serialized ``skynomad_conn_id``), never from one named in task state. The route
has checked that the viewer may read the DAG; the connection itself is never shown. Those reads
create nothing: a database without the tables shows the task state's copy.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from airflow_provider_skynomad.config import DEFAULT_CONN_ID
from airflow_provider_skynomad.jobs.record import RECORD_KEY, STATUS_KEY, task_key_for, task_key_of

OPERATORS = ("SkyNomadOperator",)
# Probe tasks are listed when they failed, with why (`operators.probe` keeps it in the task's state).
FAILED_PROBES = ("SkyNomadProbeOperator", ("failed", "upstream_failed"))
log = logging.getLogger(__name__)


@dataclass
class Job:
    """One SkyNomad task instance: where it is in Airflow and what its task state holds."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    ti_state: str | None
    start_date: datetime | None
    record: dict | None = None
    status: dict | None = None
    extra: dict = field(default_factory=dict)
    conn_id: str | None = None  # the connection the DAG declares for the task (None: not known)
    foreign: str | None = None  # why the task state's job is not shown: it is not this task's job

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.dag_id, self.run_id, self.task_id, self.map_index)


def _decode(value):
    if value is None:
        return None
    if isinstance(value, (bytes, str)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def read_state(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> tuple[dict | None, dict | None]:
    """(record, status) of one task instance from the configured state backend."""
    from airflow.state import TaskScope, get_state_backend

    backend = get_state_backend()
    scope = TaskScope(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    return _decode(backend.get(scope, RECORD_KEY)), _decode(backend.get(scope, STATUS_KEY))


def find_job(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Job | None:
    """The task instance (None when Airflow has no such task instance) with its task state, when that
    names this task's own job (else `Job.foreign` says which job it names, and nothing of it is kept)."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(TI.state, TI.start_date, TI.dag_version_id).where(
                TI.dag_id == dag_id, TI.run_id == run_id, TI.task_id == task_id, TI.map_index == map_index
            )
        ).one_or_none()
        if row is None:
            return None
        conn_id = declared_conn_ids(session, {(dag_id, task_id, row.dag_version_id)}).get((dag_id, task_id))
    record, status = read_state(dag_id, run_id, task_id, map_index)
    job = Job(dag_id, run_id, task_id, map_index, _state(row.state), row.start_date, record, status, conn_id=conn_id)
    own_job(job)
    attach_live([job])
    attach_controlled(job)
    return job


def own_job(job: Job) -> bool:
    """Keep the task state's record and status only when the job they name is this task instance's.

    A job id whose task key is another task's (written there through the public task-state route)
    is not followed and not shown: `job.foreign` says so, naming the id, and record and status go.
    """
    key = task_key_for(job.dag_id, job.run_id, job.task_id, job.map_index)
    for value in (job.record, job.status):
        named = value.get("job_id") if isinstance(value, dict) else None
        if named is None:
            continue
        if not isinstance(named, str) or task_key_of(named) != key:
            shown = repr(named) if len(repr(named)) <= 80 else repr(named)[:77] + "..."
            job.foreign = f"this task's state names job {shown}, which is not this task's job"
            job.record = job.status = None
            return False
    return True


def declared_conn_ids(session, tasks: set[tuple[str, str, object]]) -> dict[tuple[str, str], str]:
    """(dag id, task id) → the SkyNomad connection the DAG declares for the task, from the serialized DAG
    of the task instance's DAG version (the DAG's latest when it has none). A task whose connection is
    not known (a DAG serialized without it, a connection mapped over) is left out."""
    from airflow.models.serialized_dag import SerializedDagModel as SDM
    from sqlalchemy import select

    found: dict[tuple[str, str], str] = {}
    by_version: dict[object, dict] = {}
    for dag_id, task_id, version in tasks:
        key = (dag_id, version)
        if key not in by_version:
            try:
                if version is not None:
                    model = session.scalar(select(SDM).where(SDM.dag_version_id == version))
                else:
                    model = SDM.get(dag_id, session=session)
                by_version[key] = _operators(model.data) if model is not None else {}
            except Exception as exc:  # noqa: BLE001 - an unreadable DAG: the page shows task state only
                log.debug("cannot read the serialized DAG %s: %s", dag_id, exc)
                by_version[key] = {}
        conn_id = _conn_id_of(by_version[key].get(task_id))
        if conn_id:
            found[(dag_id, task_id)] = conn_id
    return found


def _operators(data) -> dict[str, dict]:
    """Task id → the serialized operator's fields, from a serialized DAG's data."""
    tasks = ((data or {}).get("dag") or {}).get("tasks") or []
    operators = {}
    for task in tasks:
        fields = task.get("__var", task) if isinstance(task, dict) else None
        if isinstance(fields, dict) and isinstance(fields.get("task_id"), str):
            operators[fields["task_id"]] = fields
    return operators


def _conn_id_of(fields: dict | None) -> str | None:
    if not fields or fields.get("task_type") not in OPERATORS:
        return None
    if isinstance(fields.get("skynomad_conn_id"), str):
        return fields["skynomad_conn_id"]
    if not fields.get("_is_mapped"):
        return None  # serialized by a provider that did not keep the connection
    partial = fields.get("partial_kwargs") or {}
    for name in ("skynomad_conn_id", "market_conn_id"):
        if isinstance(partial.get(name), str):
            return partial[name]
    if "conn_id" in str(fields.get("expand_input") or {}):
        return None  # mapped over: which instance has which is not in the DAG
    return DEFAULT_CONN_ID


def _open_existing(store_class, conn_id: str):
    """`store_class`'s tables in the market database of `conn_id`, None when they do not exist (nothing is created)."""
    from airflow_provider_skynomad.plugin.connections import market_config

    # Read from the metadata DB as the markets page does; only the URL is used, never shown. The
    # viewer may read the DAG (the route checked) and the DAG declares this connection.
    return store_class.open_existing(market_config(conn_id, lambda _conn: True).market_url)


def attach_controlled(job: Job) -> None:
    """While the job runs, its record as its controller keeps it (`jobs.table`), over the task state's.

    The worker writes the record to task state when it hands the job to its trigger and when it
    reports the end; in between the trigger controls the job and writes only the job table. The
    job page's timeline, chart and options weighed come from that newer record, read from the
    connection the DAG declares for the task. One that cannot be read leaves the task state's (the
    page says when that was).
    """
    from airflow_provider_skynomad.jobs.table import JobTable

    record = job.record or {}
    if job.foreign or record.get("finished") or not isinstance(record.get("job_id"), str) or not job.conn_id:
        return
    try:
        table = _open_existing(JobTable, job.conn_id)
        if table is None:
            return
        try:
            stored = table.load(record["job_id"])
        finally:
            table.close()
    except Exception as exc:  # noqa: BLE001 - a page with the hand-off's record, not an error page
        log.debug("no controller record for job %s: %s", record.get("job_id"), exc)
        return
    if stored is not None and stored.record.job_id == record["job_id"]:
        job.record = stored.record.to_dict()


def list_jobs(dag_ids: set[str] | None, days: float, limit: int = 1000) -> list[Job]:
    """SkyNomad task instances started (or created) in the last `days`, newest first, in DAGs `dag_ids`
    (None: every DAG), each with its task state; probe tasks only when they failed."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select

    if dag_ids is not None and not dag_ids:
        return []
    since = datetime.now(UTC) - timedelta(days=days)
    statement = (
        select(TI.dag_id, TI.run_id, TI.task_id, TI.map_index, TI.state, TI.start_date)
        .join(DagRun, (DagRun.dag_id == TI.dag_id) & (DagRun.run_id == TI.run_id))
        .where(
            TI.operator.in_(OPERATORS) | ((TI.operator == FAILED_PROBES[0]) & TI.state.in_(FAILED_PROBES[1])),
            DagRun.run_after >= since,
        )
        .order_by(DagRun.run_after.desc(), TI.task_id, TI.map_index)
        .limit(limit)
    )
    if dag_ids is not None:
        statement = statement.where(TI.dag_id.in_(sorted(dag_ids)))
    statement = statement.add_columns(TI.dag_version_id)
    with create_session() as session:
        rows = session.execute(statement).all()
        conn_ids = declared_conn_ids(session, {(r.dag_id, r.task_id, r.dag_version_id) for r in rows})
    jobs = [Job(r.dag_id, r.run_id, r.task_id, r.map_index, _state(r.state), r.start_date) for r in rows]
    for job in jobs:
        job.conn_id = conn_ids.get((job.dag_id, job.task_id))
    _attach_state(jobs)
    for job in jobs:
        own_job(job)
    attach_live(jobs)
    return jobs


def attach_live(jobs: list[Job]) -> None:
    """Lay what the jobs' triggers saw since the last worker visit over their statuses (`jobs.live`).

    The rows live in the market database of the connection each job's DAG declares for its task;
    one that cannot be read leaves the task state's status as it is (the page says when that was).
    Only a task's own job is looked up (`own_job` ran first)."""
    from airflow_provider_skynomad.jobs.live import LiveStatusTable, newer_status

    by_conn: dict[str, list[Job]] = {}
    for job in jobs:
        status = job.status
        if job.foreign or not job.conn_id or not status or status.get("state") == "finished":
            continue
        if isinstance(status.get("job_id"), str):
            by_conn.setdefault(job.conn_id, []).append(job)
    for conn_id, group in by_conn.items():
        try:
            table = _open_existing(LiveStatusTable, conn_id)
            if table is None:
                continue
            try:
                live = table.read(job.status["job_id"] for job in group)
            finally:
                table.close()
        except Exception as exc:  # noqa: BLE001 - a page without the newest figures, not an error page
            log.debug("no live statuses from connection %s: %s", conn_id, exc)
            continue
        for job in group:
            job.status = newer_status(job.status, live.get(job.status["job_id"]))


def _attach_state(jobs: list[Job]) -> None:
    from airflow.state import get_state_backend
    from airflow.state.metastore import MetastoreBackend

    if not jobs:
        return
    if not isinstance(get_state_backend(), MetastoreBackend):
        for job in jobs:
            job.record, job.status = read_state(*job.key)
        return
    from airflow.models.task_state_store import TaskStateStoreModel as S
    from airflow.utils.session import create_session
    from sqlalchemy import select

    wanted = {job.key: job for job in jobs}
    statement = select(S.dag_id, S.run_id, S.task_id, S.map_index, S.key, S.value).where(
        S.key.in_((RECORD_KEY, STATUS_KEY)),
        S.dag_id.in_(sorted({job.dag_id for job in jobs})),
        S.run_id.in_(sorted({job.run_id for job in jobs})),
    )
    with create_session() as session:
        for row in session.execute(statement):
            job = wanted.get((row.dag_id, row.run_id, row.task_id, row.map_index))
            if job is None:
                continue
            if row.key == RECORD_KEY:
                job.record = _decode(row.value)
            else:
                job.status = _decode(row.value)


def _state(value) -> str | None:
    return None if value is None else str(getattr(value, "value", value))
