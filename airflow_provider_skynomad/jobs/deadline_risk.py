"""`on_deadline_risk`: the user's function, called once when even on-demand can no longer make the deadline.

Why a dotted path and not the function: the job is controlled by its trigger, whose arguments
must be plain data, and the function runs in the triggerer. The operator takes a function (or
its path) and keeps its import path; it is imported and called here, in the controller's thread.
A callback that fails is logged and never stops the job.
"""

from __future__ import annotations

import importlib

from airflow_provider_skynomad.jobs.errors import SkyNomadInputError


def callback_path(value) -> str | None:
    """`on_deadline_risk` as given (None, a module-level function, or ``"module:function"``) → its path."""
    if value is None:
        return None
    if callable(value):
        qualname = getattr(value, "__qualname__", "")
        module = getattr(value, "__module__", None)
        if not module or "<" in qualname:
            raise SkyNomadInputError(
                f"on_deadline_risk must be a module-level function (the triggerer imports it by name), got {value!r}"
            )
        value = f"{module}:{qualname}"
    if not isinstance(value, str) or ":" not in value:
        raise SkyNomadInputError(f'on_deadline_risk must be a function or "module:function", got {value!r}')
    resolve(value)
    return value


def resolve(path: str):
    """The callable named ``"module:function"``: a DAG names its callback as text, so it serializes."""
    module, _, name = path.partition(":")
    try:
        target = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise SkyNomadInputError(f"on_deadline_risk {path!r} cannot be imported: {exc}") from exc
    if not callable(target):
        raise SkyNomadInputError(f"on_deadline_risk {path!r} is not callable")
    return target


def call_deadline_risk(path: str | None, record, task, message: str, log) -> None:
    """Call the user's callback with plain data about the job; never raise."""
    if not path:
        return
    info = {
        "job_id": record.job_id,
        "dag_id": task.dag_id,
        "run_id": task.run_id,
        "task_id": task.task_id,
        "map_index": task.map_index,
        "deadline_hours": record.deadline_hours,
        "message": message,
    }
    try:
        resolve(path)(info)
    except Exception as exc:  # noqa: BLE001 - the user's code must not stop the job
        log.warning("on_deadline_risk %s raised %s: %s", path, type(exc).__name__, exc)
