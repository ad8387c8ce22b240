"""Where a job's record and live status are written: one protocol for the worker's and the trigger's store.

Why a protocol: the worker writes through `record.StateStore` (the job table first, then task
state) and the trigger through `table.TableStore` (compare-and-swap on the job table, the live
status to the deployment's board). The runtime acts the same on either side, so it names only
these verbs; a test checks that both stores implement them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from airflow_provider_skynomad.jobs.record import JobRecord


@runtime_checkable
class RecordStore(Protocol):
    """The verbs the job runtime writes with, on the worker and in the trigger alike."""

    @property
    def durable(self) -> bool:
        """Whether what is written outlives this process (a retry can reconnect from it)."""
        ...

    def save(self, record: JobRecord) -> int | None:
        """Write `record` before the effect it describes; the job table's new version, when it wrote one."""
        ...

    def save_status(self, status: dict) -> None:
        """Publish the job's live status (the dashboard, the job page, the deployment's other jobs)."""
        ...
