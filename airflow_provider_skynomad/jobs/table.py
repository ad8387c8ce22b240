"""The job record the controller changes: one versioned row per job, beside the market table.

Why a table of the provider's own: from its first deferral to its end a job is controlled by its
trigger (`jobs.controller`), and a trigger cannot write Airflow's task state store. The record
therefore lives in ``job_records`` in the connection's market database (SQLite by default,
PostgreSQL in production), where the worker writes it once before it defers and reads it back
at the end.

Why versioned: Airflow can run two copies of one trigger for a while (a triggerer that missed its
heartbeat still runs what another triggerer took over). Every write names the version it read
(optimistic concurrency); a copy whose version is no longer the row's has lost control and stops
(`ControlLost`). A copy takes control by writing a new version with its own owner, so the copy
started last wins, which is the one Airflow believes in. Every cloud effect (a launch, a
termination) is preceded by a write, so the losing copy never acts after the winner took over.
Nothing in a record is a secret: ids, zones, figures and the workload's declared command.

Why every write names a task key: a job belongs to its task instance (DESIGN.md §8), and its id
begins with that task's key (`clouds.tags.task_key_of`). A writer states the key of the task it
acts for, and a row whose job id has another key is refused before anything is written, so a job
id taken from somewhere others can write (task state) cannot make one task overwrite or take over
another task's job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Column, Integer, MetaData, String, Table, Text, insert, select, update
from sqlalchemy.engine import URL

from airflow_provider_skynomad.jobs.errors import ControlLost, SkyNomadInputError
from airflow_provider_skynomad.jobs.record import JobRecord, task_key_of
from airflow_provider_skynomad.market.store.database import MarketDatabase, UtcDateTime

SCHEMA_VERSION = 1

metadata = MetaData()

job_records = Table(
    "job_records",
    metadata,
    Column("job_id", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("owner", String(64), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("record", Text, nullable=False),
)


@dataclass(frozen=True)
class StoredRecord:
    """A record as read: the version a write must name, and who wrote it."""

    record: JobRecord
    version: int
    owner: str


class JobTable(MarketDatabase):
    """``job_records``: each job's record, written by the worker at the start and by its controller after.

    :param url: SQLAlchemy URL of the market database.
    :param market: an open market store whose engine to share (a triggerer's shared table).
    """

    component = "job_records"
    layout_version = SCHEMA_VERSION
    tables = (job_records,)
    label = "job record table"

    def __init__(self, url: str | URL | None = None, *, market: MarketDatabase | None = None):
        super().__init__(url, share=market)

    def put(self, record: JobRecord, owner: str, *, task_key: str) -> int:
        """Write `record` whatever version the row holds (the worker, while no controller runs); its new
        version. `task_key`: the key of the task instance the writer acts for (see the module docstring)."""
        check_task_key(record.job_id, task_key)
        self._ensure()
        now, text = datetime.now(UTC), json.dumps(record.to_dict())
        with self.engine.begin() as conn:
            found = conn.execute(
                select(job_records.c.version).where(job_records.c.job_id == record.job_id)
            ).scalar_one_or_none()
            if found is None:
                conn.execute(
                    insert(job_records).values(
                        job_id=record.job_id, version=1, owner=owner, updated_at=now, record=text
                    )
                )
                return 1
            conn.execute(
                update(job_records)
                .where(job_records.c.job_id == record.job_id)
                .values(version=found + 1, owner=owner, updated_at=now, record=text)
            )
            return found + 1

    def load(self, job_id: str) -> StoredRecord | None:
        """The job's record with the version a write must name, None when the table holds none."""
        self._ensure()
        statement = select(job_records.c.record, job_records.c.version, job_records.c.owner).where(
            job_records.c.job_id == job_id
        )
        with self.engine.connect() as conn:
            row = conn.execute(statement).first()
        if row is None:
            return None
        record = JobRecord.from_dict(json.loads(row.record))
        if record.job_id != job_id:
            raise SkyNomadInputError(
                f"the job record table's row of SkyNomad job {job_id} holds job {record.job_id}'s record"
            )
        return StoredRecord(record, int(row.version), str(row.owner))

    def save(self, record: JobRecord, version: int, owner: str, *, task_key: str) -> int:
        """Write `record` over `version`; its new version. `ControlLost` when the row moved on."""
        check_task_key(record.job_id, task_key)
        return self._swap(record.job_id, version, owner, json.dumps(record.to_dict()))

    def claim(self, job_id: str, version: int, owner: str, *, task_key: str) -> int:
        """Take control of the job at `version` without changing its record; the new version."""
        check_task_key(job_id, task_key)
        return self._swap(job_id, version, owner, None)

    def _swap(self, job_id: str, version: int, owner: str, text: str | None) -> int:
        self._ensure()
        values = {"version": version + 1, "owner": owner, "updated_at": datetime.now(UTC)}
        if text is not None:
            values["record"] = text
        statement = (
            update(job_records).where(job_records.c.job_id == job_id, job_records.c.version == version).values(values)
        )
        with self.engine.begin() as conn:
            if conn.execute(statement).rowcount != 1:
                raise ControlLost(
                    f"SkyNomad job {job_id} was changed by another controller since version {version} "
                    "(a triggerer took it over): this copy stops"
                )
        return version + 1

    def delete(self, job_id: str) -> None:
        """Forget the job's record (otherwise a record outlives its job)."""
        self._ensure()
        with self.engine.begin() as conn:
            conn.execute(job_records.delete().where(job_records.c.job_id == job_id))


class TableStore:
    """The controller's record store: compare-and-swap writes to `JobTable`, the live status to `job_live_status`.

    A `store.RecordStore`, as the worker's `record.StateStore` is: the runtime writes the same way
    on either side.
    """

    durable = True

    def __init__(self, table: JobTable, job_id: str, owner: str, version: int, board=None, *, task_key: str):
        check_task_key(job_id, task_key)
        self.table, self.job_id, self.owner, self.version = table, job_id, owner, version
        self.task_key = task_key
        self._board = board

    @classmethod
    def take(
        cls, table: JobTable, job_id: str, owner: str, board=None, *, task_key: str
    ) -> tuple[TableStore, JobRecord]:
        """Take control of the job of the task instance `task_key` (see the module docstring); the
        store and the record as taken."""
        check_task_key(job_id, task_key)
        stored = table.load(job_id)
        if stored is None:
            raise ControlLost(f"SkyNomad job {job_id} has no record in the job record table: nothing to control")
        version = table.claim(job_id, stored.version, owner, task_key=task_key)
        return cls(table, job_id, owner, version, board, task_key=task_key), stored.record

    def save(self, record: JobRecord) -> int:
        """Write `record` over the version this controller holds; the new version (`ControlLost` if moved on)."""
        if record.job_id != self.job_id:
            raise SkyNomadInputError(
                f"the controller of SkyNomad job {self.job_id} was asked to write job {record.job_id}"
            )
        self.version = self.table.save(record, self.version, self.owner, task_key=self.task_key)
        return self.version

    def check(self) -> None:
        """Still in control? Bumps the version (`ControlLost` if another copy took over)."""
        self.version = self.table.claim(self.job_id, self.version, self.owner, task_key=self.task_key)

    def save_status(self, status: dict) -> None:
        """Publish `status` as the holder of the record's current version (`jobs.live`): a copy that
        lost control publishes nothing, and learns it at its next write."""
        if self._board is not None:
            self._board.publish(self.job_id, status, owner=self.owner, version=self.version)


def check_task_key(job_id: str, task_key: str) -> None:
    """`SkyNomadInputError` unless `job_id` is a job of the task instance whose key is `task_key`."""
    if not task_key or task_key_of(job_id) != task_key:
        raise SkyNomadInputError(
            f"refusing to write SkyNomad job {str(job_id)[:80]!r} for task {task_key!r}: the job belongs to another "
            "task instance (its id begins with its task's key); nothing was written"
        )
