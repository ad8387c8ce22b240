"""One store protocol: the worker's task-state store and the controller's job-table store both
implement `store.RecordStore`, so the runtime writes the same way on either side."""

from __future__ import annotations

import inspect

from airflow_provider_skynomad.jobs.record import StateStore
from airflow_provider_skynomad.jobs.store import RecordStore
from airflow_provider_skynomad.jobs.table import TableStore


def _verbs(cls) -> dict[str, list[str]]:
    return {name: list(inspect.signature(getattr(cls, name)).parameters) for name in ("save", "save_status")}


def test_both_stores_implement_the_one_protocol():
    assert isinstance(StateStore(None), RecordStore) and isinstance(object.__new__(TableStore), RecordStore)
    assert _verbs(StateStore) == _verbs(TableStore) == _verbs(RecordStore)
    assert StateStore(None).durable is False and TableStore.durable is True


def test_the_controller_store_returns_the_version_it_wrote(started):
    job = started()
    controller = job.controller()
    store, record = controller.store, controller.steps.record
    assert isinstance(store, RecordStore) and controller.steps.run.store is store
    assert store.save(record) == store.version == job.jobs.load(record.job_id).version
