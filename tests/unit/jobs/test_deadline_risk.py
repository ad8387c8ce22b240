"""`on_deadline_risk` (jobs/deadline_risk.py): a function is kept by its import path, checked when the
operator is validated, and called in the triggerer without ever stopping the job."""

from __future__ import annotations

import json
import logging
import sys
import types
from types import SimpleNamespace

import pytest

from airflow_provider_skynomad.jobs.deadline_risk import call_deadline_risk, callback_path, resolve
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError


@pytest.fixture
def callbacks(monkeypatch):
    """A module ``risk_callbacks`` with a callback that keeps what it was given and one that raises."""
    module = types.ModuleType("risk_callbacks")
    module.calls = []
    module.keep = module.calls.append

    def boom(info):
        raise RuntimeError("the pager is down")

    module.boom = boom
    module.not_callable = 5
    monkeypatch.setitem(sys.modules, "risk_callbacks", module)
    return module


def test_a_module_level_function_is_kept_by_its_path_and_a_path_as_given():
    assert callback_path(None) is None
    assert callback_path(json.dumps) == "json:dumps"
    assert callback_path("json:JSONDecoder.decode") == "json:JSONDecoder.decode"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (lambda info: None, "must be a module-level function"),
        ("json.dumps", 'must be a function or "module:function"'),
        (5, 'must be a function or "module:function"'),
        ("no_such_module_here:f", "cannot be imported"),
        ("json:no_such_function", "cannot be imported"),
    ],
)
def test_a_callback_the_triggerer_could_not_import_is_refused_when_validated(value, said):
    with pytest.raises(SkyNomadInputError, match=said):
        callback_path(value)


def test_a_path_to_something_not_callable_is_refused(callbacks):
    with pytest.raises(SkyNomadInputError, match="is not callable"):
        resolve("risk_callbacks:not_callable")


def test_the_callback_is_given_plain_data_about_the_job(callbacks):
    record = SimpleNamespace(job_id="sn-1", deadline_hours=10.0)
    task = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1)
    call_deadline_risk("risk_callbacks:keep", record, task, "even on-demand is late", logging.getLogger("t"))
    assert callbacks.calls == [
        {"job_id": "sn-1", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "deadline_hours": 10.0,
         "message": "even on-demand is late"}
    ]  # fmt: skip


def test_a_callback_that_raises_is_logged_and_the_job_goes_on(callbacks, caplog):
    record = SimpleNamespace(job_id="sn-1", deadline_hours=10.0)
    task = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1)
    with caplog.at_level(logging.WARNING, logger="t"):
        call_deadline_risk("risk_callbacks:boom", record, task, "late", logging.getLogger("t"))
        call_deadline_risk(None, record, task, "late", logging.getLogger("t"))  # no callback: nothing
    assert "RuntimeError: the pager is down" in caplog.text
