"""Rows of the live-status table (jobs/live.py) for tests: as a holder publishes them, or forged.

`hold` gives a job a record row so that a test may publish as its holder without running a job;
`forge` writes a row past every publisher, as anyone who can write the table could.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime


def hold(url: str, job_id: str, owner: str = "test controller", version: int = 1) -> tuple[str, int]:
    """A record row for `job_id` held by `owner` at `version` (its record is not a job's: nothing loads it)."""
    from airflow_provider_skynomad.jobs.table import JobTable, job_records

    with JobTable(url) as table:
        table.create()
        with table.engine.begin() as conn:
            conn.execute(job_records.delete().where(job_records.c.job_id == job_id))
            row = {"job_id": job_id, "version": version, "owner": owner, "updated_at": datetime.now(UTC)}
            conn.execute(job_records.insert().values({**row, "record": "{}"}))
    return owner, version


def publish_held(url: str, job_id: str, status: dict) -> None:
    """Publish `status` as the holder of a record made for it (`hold`)."""
    from airflow_provider_skynomad.jobs.live import LiveStatusTable

    owner, version = hold(url, job_id)
    with LiveStatusTable(url) as table:
        assert table.publish(job_id, status, owner=owner, version=version)


def forge(url: str, job_id: str, status, updated_at: datetime | None = None) -> None:
    """Write the row of `job_id` as it stands in the table (`status` as JSON), past every publisher."""
    from airflow_provider_skynomad.jobs.live import LiveStatusTable, job_live_status
    from airflow_provider_skynomad.market.store.database import INSERT

    with LiveStatusTable(url) as table:
        table.create()
        row = {"job_id": job_id, "updated_at": updated_at or datetime.now(UTC), "status": json.dumps(status)}
        statement = INSERT[table.dialect](job_live_status).values(row)
        with table.engine.begin() as conn:
            conn.execute(statement.on_conflict_do_update(index_elements=["job_id"], set_=row))
