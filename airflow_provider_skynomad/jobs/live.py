"""The live status a deferred job's trigger publishes, beside the market table.

Why a table of its own: the job is controlled by its trigger (`jobs.controller`), and a trigger
cannot write task state (Airflow 3.3's triggerer relays no such call). So the controller publishes
where the job stands (zone, mode, checkpointed progress, slack, spend) to ``job_live_status`` in
the connection's market database, one row per job, after every change and every few wall seconds
between (`triggers.skynomad.PUBLISH_EVERY_SECONDS`); the pages take it when it is newer than the
task state's (`newer_status`). Nothing in it is a secret: ids, zones and figures.

Who writes a row: only the holder of the job's record (`jobs.table`). `publish` names the record's
version and owner and writes in the statement that finds them current, so a controller that lost
control, or a task whose state names a job it does not hold, changes nothing here.

What a reader believes: a row is read by the job page, the markets page and every fleet-aware job
of the deployment. A row is ignored, never raised on, when it is stamped in the future (it would
never grow old), is keyed by another job's id, or holds a figure no job can have (`believable`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Column, MetaData, String, Table, Text, literal, select
from sqlalchemy.engine import URL

from airflow_provider_skynomad.jobs.params import MAX_INSTANCES
from airflow_provider_skynomad.jobs.table import job_records
from airflow_provider_skynomad.market.store.database import INSERT, MarketDatabase, UtcDateTime

SCHEMA_VERSION = 1
FLEET_ROW_MAX_AGE_SECONDS = 300.0
"""A running job's row older than this (wall time) is not counted as holding capacity: its trigger
publishes every 10 s at most, so a row this old belongs to a job whose trigger is gone."""
CLOCK_SKEW_SECONDS = 60.0
"""How far past this machine's clock a row's stamp may be (another triggerer's clock runs a little
ahead); a later stamp is no moment a publisher saw, and the row is ignored."""
LONGEST_HOURS = 10 * 24.0 * 366
"""No hours figure of a real job comes near this: its work, warm-up and deadline are each at most a
year (`jobs.params`). Far below what overflows a time span, so a believed figure never does."""
FLEET_FIELDS = ("job_id", "market", "zone", "mode", "instances", "launched_at_cloud_hours", "slack_hours", "wants")
_HOURS = ("elapsed_hours", "deadline_hours", "slack_hours")
_NUMBERS = (*_HOURS, "launched_at_cloud_hours", "spend_usd", "all_on_demand_usd", "progress_pct")
_NAMES = ("state", "zone", "market", "mode", "wants", "conn_id")
_COUNTS = ("preemptions", "migrations")

log = logging.getLogger(__name__)

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

    def publish(self, job_id: str, status: dict, *, owner: str, version: int) -> bool:
        """Replace the job's row with `status` (plain JSON) if `owner` holds the job's record at `version`.

        One statement finds the record's row and writes the status, so no controller takes the job
        between the check and the write (PostgreSQL share-locks the record's row: a take-over waits
        for this write, then wins; SQLite has one writer at a time). False, and nothing written,
        when the record has moved on: a copy that lost control publishes nothing.
        """
        self._ensure()
        now, text = datetime.now(UTC), json.dumps(status)
        holder = select(literal(job_id, String(64)), literal(now, UtcDateTime()), literal(text, Text())).where(
            job_records.c.job_id == job_id, job_records.c.version == version, job_records.c.owner == owner
        )
        statement = INSERT[self.dialect](job_live_status).from_select(
            ["job_id", "updated_at", "status"], holder.with_for_update(read=True)
        )
        statement = statement.on_conflict_do_update(
            index_elements=["job_id"],
            set_={"updated_at": statement.excluded.updated_at, "status": statement.excluded.status},
        )
        with self.engine.begin() as conn:
            return conn.execute(statement).rowcount == 1

    def read(self, job_ids: Iterable[str]) -> dict[str, dict]:
        """Job id → its published status, for the ids that have one to believe (`believable`)."""
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        self._ensure()
        statement = select(job_live_status).where(job_live_status.c.job_id.in_(ids))
        with self.engine.connect() as conn:
            rows = list(conn.execute(statement))
        now = datetime.now(UTC)
        return {row.job_id: status for row in rows if (status := _believed(row, now)) is not None}

    def fleet(self, exclude_job_id: str | None = None) -> list[dict]:
        """What the other jobs publishing here hold now (`fleet_rows`): this deployment's fleet."""
        self._ensure()
        with self.engine.connect() as conn:
            rows = list(conn.execute(select(job_live_status)))
        now = datetime.now(UTC)
        return fleet_rows([(row.updated_at, _believed(row, now)) for row in rows], exclude_job_id, now)


def _believed(row, now: datetime) -> dict | None:
    """The row's status, or None (said at DEBUG) when it is not `believable`."""
    try:
        status = json.loads(row.status)
    except ValueError:
        status = None
    why = believable(row.job_id, row.updated_at, status, now)
    if why is not None:
        log.debug("Ignoring the live status of job %.64s: %s", row.job_id, why)
        return None
    return status


def believable(job_id: str, updated_at: datetime, status, now: datetime) -> str | None:
    """Why a live-status row is not to be believed, in plain words; None when it is.

    The row must be stamped no later than `now` (give or take `CLOCK_SKEW_SECONDS`), hold the
    status of the job it is keyed by, and only figures a job can have: counts from 1 to the largest
    gang (`jobs.params.MAX_INSTANCES`), finite numbers, hours within `LONGEST_HOURS`, a percentage.
    Whether a launch time is sane depends on the cloud's clock: `jobs.fleet` checks it.
    """
    if updated_at > now + timedelta(seconds=CLOCK_SKEW_SECONDS):
        return f"it is stamped {updated_at.isoformat()}, later than now"
    if not isinstance(status, dict):
        return "it holds no status"
    if status.get("job_id") != job_id:
        return "it holds another job's status"
    for field in _NAMES:
        value = status.get(field)
        if value is not None and (not isinstance(value, str) or len(value) > 256):
            return f"its {field} is not a name"
    instances = status.get("instances")
    if instances is not None and not (_whole(instances) and 1 <= instances <= MAX_INSTANCES):
        return f"its instances is not a count from 1 to {MAX_INSTANCES}"
    for field in _COUNTS:
        value = status.get(field)
        if value is not None and not (_whole(value) and value >= 0):
            return f"its {field} is not a count"
    for field in _NUMBERS:
        value = status.get(field)
        if value is not None and not _real(value):
            return f"its {field} is not a finite number"
    for field in _HOURS:
        if abs(status.get(field) or 0.0) > LONGEST_HOURS:
            return f"its {field} is more hours than any job has"
    if not 0.0 <= (status.get("progress_pct") or 0.0) <= 100.0:
        return "its progress_pct is not a percentage"
    return None


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def fleet_rows(
    statuses: Iterable[tuple[datetime, dict | None]], exclude_job_id: str | None, now: datetime | None = None
) -> list[dict]:
    """What the deployment's other running jobs hold, as plain rows (`FLEET_FIELDS`), from their statuses.

    Only jobs whose trigger published within `FLEET_ROW_MAX_AGE_SECONDS` and that run a group count;
    a finished, failed or idle job holds nothing, and a status that is not `believable` (None: its
    row was not) counts for nothing.
    """
    now = now or datetime.now(UTC)
    oldest = now - timedelta(seconds=FLEET_ROW_MAX_AGE_SECONDS)
    rows = []
    for updated_at, status in statuses:
        if not isinstance(status, dict) or status.get("job_id") == exclude_job_id or updated_at < oldest:
            continue
        why = believable(status.get("job_id"), updated_at, status, now)
        if why is not None:
            log.debug("Ignoring the live status of job %.64s: %s", status.get("job_id"), why)
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
    later, seen = live.get("elapsed_hours", 0.0), status.get("elapsed_hours", 0.0)
    if not _real(later) or not _real(seen) or later <= seen:
        return status
    return {**status, **live}
