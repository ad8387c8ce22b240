"""SkyNomad jobs as the API server sees them: task instances and their task state, read, never written.

The record (``skynomad_job``) and live status (``skynomad_status``) are read through Airflow's
configured state backend (``airflow.state.get_state_backend()``, the same one the public API's
task-state-store routes use), one task instance at a time for a job page. The dashboard reads
many at once: with the default metastore backend that is one query on the ``task_state_store``
table, otherwise one backend ``get`` per task. Values stay plain dicts here (a record of another
version is shown as far as it can be, not refused as the runtime must).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from airflow_provider_skynomad.jobs.record import RECORD_KEY, STATUS_KEY

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
    """The task instance (None when Airflow has no such task instance) with its task state."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(TI.state, TI.start_date).where(
                TI.dag_id == dag_id, TI.run_id == run_id, TI.task_id == task_id, TI.map_index == map_index
            )
        ).one_or_none()
    if row is None:
        return None
    record, status = read_state(dag_id, run_id, task_id, map_index)
    job = Job(dag_id, run_id, task_id, map_index, _state(row.state), row.start_date, record, status)
    attach_live([job])
    attach_controlled(job)
    return job


def attach_controlled(job: Job) -> None:
    """While the job runs, its record as its controller keeps it (`jobs.table`), over the task state's.

    The worker writes the record to task state when it hands the job to its trigger and when it
    reports the end; in between the trigger controls the job and writes only the job table. The
    job page's timeline, chart and options weighed come from that newer record. One that cannot
    be read leaves the task state's (the page says when that was).
    """
    from airflow_provider_skynomad.jobs.table import JobTable
    from airflow_provider_skynomad.plugin.markets import market_config

    record, status = job.record or {}, job.status or {}
    if record.get("finished") or not record.get("job_id") or not status.get("conn_id"):
        return
    try:
        table = JobTable(market_config(status["conn_id"], lambda _conn: True).market_url)
        try:
            stored = table.load(record["job_id"])
        finally:
            table.close()
    except Exception as exc:  # noqa: BLE001 - a page with the hand-off's record, not an error page
        log.debug("no controller record for job %s: %s", record.get("job_id"), exc)
        return
    if stored is not None:
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
    with create_session() as session:
        rows = session.execute(statement).all()
    jobs = [Job(r.dag_id, r.run_id, r.task_id, r.map_index, _state(r.state), r.start_date) for r in rows]
    _attach_state(jobs)
    attach_live(jobs)
    return jobs


def attach_live(jobs: list[Job]) -> None:
    """Lay what the jobs' triggers saw since the last worker visit over their statuses (`jobs.live`).

    The rows live in the market database of the connection each job ran on; one that cannot be
    read leaves the task state's status as it is (the page says when that was)."""
    from airflow_provider_skynomad.jobs.live import LiveStatusTable, newer_status
    from airflow_provider_skynomad.plugin.markets import market_config

    by_conn: dict[str, list[Job]] = {}
    for job in jobs:
        if job.status and job.status.get("conn_id") and job.status.get("state") != "finished":
            by_conn.setdefault(job.status["conn_id"], []).append(job)
    for conn_id, group in by_conn.items():
        try:
            # Read from the metadata DB as the markets page does; only the URL is used, never shown.
            table = LiveStatusTable(market_config(conn_id, lambda _conn: True).market_url)
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
