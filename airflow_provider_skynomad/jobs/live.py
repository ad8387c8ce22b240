"""The live status a deferred job's trigger publishes, beside the market table.

Why a table of its own: the job is controlled by its trigger (`jobs.controller`), and a trigger
cannot write task state (Airflow 3.3's triggerer relays no such call). So the controller publishes
where the job stands (zone, mode, checkpointed progress, slack, spend) to ``job_live_status`` in
the connection's market database, one row per job, after every change and every few wall seconds
between (`triggers.skynomad.PUBLISH_EVERY_SECONDS`); the pages take it when it is newer than the
task state's (`newer_status`). Nothing in it is a secret: ids, zones and figures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Column, MetaData, String, Table, Text, select
from sqlalchemy.engine import URL

from airflow_provider_skynomad.market.store.database import INSERT, MarketDatabase, UtcDateTime

SCHEMA_VERSION = 1
FLEET_ROW_MAX_AGE_SECONDS = 300.0
"""A running job's row older than this (wall time) is not counted as holding capacity: its trigger
publishes every 10 s at most, so a row this old belongs to a job whose trigger is gone."""
FLEET_FIELDS = ("job_id", "market", "zone", "mode", "instances", "launched_at_cloud_hours", "slack_hours", "wants")

metadata = MetaData()

job_live_status = Table(
    "job_live_status",
    metadata,
    Column("job_id", String(64), primary_key=True),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("status", Text, nullable=False),
)


class LiveStatusTable(MarketDatabase):
    """``job_live_status``: the newest status a trigger saw of each job.

    :param url: SQLAlchemy URL of the market database.
    :param market: an open market store whose engine to share (the trigger's shared table).
    """

    component = "live_status"
    layout_version = SCHEMA_VERSION
    tables = (job_live_status,)
    label = "job live-status table"

    def __init__(self, url: str | URL | None = None, *, market: MarketDatabase | None = None):
        super().__init__(url, share=market)

    def publish(self, job_id: str, status: dict) -> None:
        """Replace the job's row with `status` (plain JSON)."""
        self._ensure()
        row = {"job_id": job_id, "updated_at": datetime.now(UTC), "status": json.dumps(status)}
        statement = INSERT[self.dialect](job_live_status).values(row)
        statement = statement.on_conflict_do_update(
            index_elements=["job_id"], set_={"updated_at": row["updated_at"], "status": row["status"]}
        )
        with self.engine.begin() as conn:
            conn.execute(statement)

    def read(self, job_ids: Iterable[str]) -> dict[str, dict]:
        """Job id → its published status, for the ids that have one."""
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        self._ensure()
        statement = select(job_live_status.c.job_id, job_live_status.c.status).where(job_live_status.c.job_id.in_(ids))
        with self.engine.connect() as conn:
            return {job_id: json.loads(text) for job_id, text in conn.execute(statement)}

    def fleet(self, exclude_job_id: str | None = None) -> list[dict]:
        """What the other jobs publishing here hold now (`fleet_rows`): this deployment's fleet."""
        self._ensure()
        statement = select(job_live_status.c.updated_at, job_live_status.c.status)
        with self.engine.connect() as conn:
            statuses = [(updated_at, json.loads(text)) for updated_at, text in conn.execute(statement)]
        return fleet_rows(statuses, exclude_job_id)


def fleet_rows(
    statuses: Iterable[tuple[datetime, dict]], exclude_job_id: str | None, now: datetime | None = None
) -> list[dict]:
    """What the deployment's other running jobs hold, as plain rows (`FLEET_FIELDS`), from their statuses.

    Only jobs whose trigger published within `FLEET_ROW_MAX_AGE_SECONDS` and that run a group count;
    a finished, failed or idle job holds nothing.
    """
    now = now or datetime.now(UTC)
    oldest = now - timedelta(seconds=FLEET_ROW_MAX_AGE_SECONDS)
    rows = []
    for updated_at, status in statuses:
        if status.get("job_id") == exclude_job_id or updated_at < oldest:
            continue
        holds = status.get("state") == "running" and status.get("market") and status.get("mode") is not None
        waits = status.get("state") == "idle" and status.get("wants")
        if not holds and not waits:
            continue
        if holds and status.get("launched_at_cloud_hours") is None:
            continue
        rows.append({field: status.get(field) for field in FLEET_FIELDS})
    return rows


def newer_status(status: dict | None, live: dict | None) -> dict | None:
    """The task state's status with what a trigger saw later laid over it.

    The trigger's is taken only for the same job and a later moment of it; a finished job's
    status is final.
    """
    final = status.get("state") in ("finished", "failed") if status else False
    if not live or not status or live.get("job_id") != status.get("job_id") or final:
        return status
    if float(live.get("elapsed_hours", 0.0)) <= float(status.get("elapsed_hours", 0.0)):
        return status
    return {**status, **live}
