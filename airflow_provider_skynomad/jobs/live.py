"""The live status a deferred job's trigger publishes, beside the market table.

Why a table of its own: the worker writes the job's status to Airflow's task state store on each
visit, but a trigger cannot write task state (Airflow 3.3's triggerer relays no such call), and a
visit waits for a worker slot: with every slot held by a pipeline's other tasks, the job page
would show the last visit's figures for as long. So the trigger publishes where the job stands
(zone, checkpointed progress, slack) to ``job_live_status`` in the connection's market database,
one row per job, every few wall seconds (`triggers.skynomad.PUBLISH_EVERY_SECONDS`); the pages
take it when it is newer than the task state's (`newer_status`). Nothing in it is a secret: ids,
zones and figures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy import Column, MetaData, String, Table, Text, select
from sqlalchemy.engine import URL

from ..market.database import INSERT, MarketDatabase, UtcDateTime

SCHEMA_VERSION = 1

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


def newer_status(status: dict | None, live: dict | None) -> dict | None:
    """The task state's status with what a trigger saw later laid over it.

    The trigger's is taken only for the same job and a later moment of it; a finished job's
    status is final. A trigger that moved the job itself publishes no spend: the worker's stays.
    """
    if not live or not status or live.get("job_id") != status.get("job_id") or status.get("state") == "finished":
        return status
    if float(live.get("elapsed_hours", 0.0)) <= float(status.get("elapsed_hours", 0.0)):
        return status
    return {**status, **live}


def seen_by_trigger(base: dict, where: dict, elapsed_hours: float, moved: bool) -> dict:
    """The status a trigger publishes: the worker's at deferral (`base`, with the spend rate of its
    group) brought to the trigger's last look (`where`: `jobs.narrate.where_it_stands`)."""
    status = {k: v for k, v in base.items() if k not in ("at_hours", "usd_per_hour")}
    status.update(where)
    if moved:
        status.pop("spend_usd", None)
    else:
        ran = max(0.0, elapsed_hours - float(base["at_hours"]))
        status["spend_usd"] = round(float(base["spend_usd"]) + float(base["usd_per_hour"]) * ran, 2)
    return status
