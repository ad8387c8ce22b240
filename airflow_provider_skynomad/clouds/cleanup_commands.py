"""`skynomad cleanup [--dry-run] [--older-than DURATION]`, and the probe DAG's cleanup task.

Both list the connection's resources by tag (`Cloud.resources()`), ask Airflow which jobs still run,
let `clouds.cleanup.plan_cleanup` decide, and release what it says, printing each in plain words.
They differ only in how they ask Airflow:

- the command reads Airflow's metadata database directly (it runs where ``airflow`` is
  configured): every task instance that may still run is a live job, and the ended ones the
  resources' tags name give the time they ended (for the checkpoint retention);
- a task cannot open the metadata database in Airflow 3, so the probe DAG's task asks the API
  server for the states of the task instances the resources' ``skynomad-dag``, ``skynomad-run``
  and ``skynomad-task`` tags name; a resource without them is kept (its job cannot be told).

Exit codes: 0 done (also when nothing was left), 1 a release or a lookup failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import timedelta

import pandas as pd

from .base import Cloud, Resource
from .cleanup import DEFAULT_CHECKPOINT_RETENTION, CleanupPlan, is_live, plan_cleanup

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DAG_TAG, RUN_TAG, TASK_TAG = "skynomad-dag", "skynomad-run", "skynomad-task"

JobLookup = Callable[[list[Resource]], tuple[set[str], dict[str, pd.Timestamp | None], set[str]]]
"""resources → (live job ids, ended job ids → end time or None, job ids that cannot be told)."""


def cleanup(
    cloud: Cloud,
    lookup: JobLookup,
    *,
    dry_run: bool = False,
    checkpoint_retention: timedelta = DEFAULT_CHECKPOINT_RETENTION,
    probe_leftovers: bool = True,
    say: Callable[[str], None] = print,
) -> tuple[CleanupPlan, dict[str, str]]:
    """List, decide, release (unless `dry_run`); return the plan and the releases that failed.
    `probe_leftovers=False` keeps what probes left (the probe DAG's task runs beside its probes)."""
    resources = list(cloud.resources())
    live, ended, unknown = lookup(resources)
    plan = plan_cleanup(
        resources,
        live,
        ended=ended,
        unknown=unknown,
        now=pd.Timestamp.now(tz="UTC"),  # the lookups' end times are Airflow's: the wall clock, not the cloud's
        checkpoint_retention=checkpoint_retention,
        probe_leftovers=probe_leftovers,
    )
    failures: dict[str, str] = {}
    for item in plan.release:
        if dry_run:
            say(item.words("would end"))
            continue
        try:
            cloud.release(item.resource)
        except Exception as exc:  # noqa: BLE001 - one failure must not keep the rest running
            failures[item.resource.id] = f"{type(exc).__name__}: {exc}"
            say(item.words("could not end") + f" ({type(exc).__name__}: {exc})")
            continue
        say(item.words("ended"))
    for item in plan.keep:
        say(item.words("kept"))
    say(plan.summary(dry_run, set(failures)))
    return plan, failures


def _task_keys(resources: list[Resource]) -> dict[tuple[str, str, str], list[Resource]]:
    by_task: dict[tuple[str, str, str], list[Resource]] = {}
    for resource in resources:
        tags = resource.tags or {}
        if resource.job_id and all(tags.get(t) for t in (DAG_TAG, RUN_TAG, TASK_TAG)):
            by_task.setdefault((tags[DAG_TAG], tags[RUN_TAG], tags[TASK_TAG]), []).append(resource)
    return by_task


def jobs_from_task_api(resources: list[Resource]):
    """`JobLookup` for a running task: the API server's task states for the tasks the tags name."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    from ..jobs.record import task_key_for, task_key_of

    live, ended, unknown = set(), {}, set()
    by_task = _task_keys(resources)
    tagged = {r.job_id for rs in by_task.values() for r in rs}
    unknown |= {r.job_id for r in resources if r.job_id and r.job_id not in tagged}
    for (dag_id, run_id, task_id), group in by_task.items():
        try:
            states = RuntimeTaskInstance.get_task_states(dag_id=dag_id, task_ids=[task_id], run_ids=[run_id])
        except Exception:  # noqa: BLE001 - cannot tell: keep
            unknown |= {r.job_id for r in group}
            continue
        found = {}
        for key, state in states.get(run_id, {}).items():
            index = key.removeprefix(f"{task_id}_")
            index = -1 if key == task_id else int(index) if index.isdigit() else None
            if index is not None:
                found[task_key_for(dag_id, run_id, task_id, index)] = state
        for resource in group:
            state = found.get(task_key_of(resource.job_id))
            if state is not None and is_live(state):
                live.add(resource.job_id)
            else:  # ended, or Airflow has no such task instance: nothing of it can run
                ended.setdefault(resource.job_id, None)
    return live - unknown, {j: t for j, t in ended.items() if j not in live}, unknown


def jobs_from_metadata_db(resources: list[Resource]):
    """`JobLookup` for the command line: Airflow's metadata database, read directly."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import or_, select, tuple_

    from ..jobs.record import task_key_for, task_key_of

    live_states = [
        s for s in ("running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting")
    ]
    live, ended = set(), {}
    with create_session() as session:
        rows = session.execute(
            select(TI.dag_id, TI.run_id, TI.task_id, TI.map_index).where(
                or_(TI.state.in_(live_states), TI.state.is_(None))
            )
        ).all()
        running = {task_key_for(d, r, t, m) for d, r, t, m in rows}
        keys = list(_task_keys(resources))
        ends = {}
        if keys:
            rows = session.execute(
                select(TI.dag_id, TI.run_id, TI.task_id, TI.map_index, TI.end_date).where(
                    tuple_(TI.dag_id, TI.run_id, TI.task_id).in_(keys)
                )
            ).all()
            ends = {task_key_for(d, r, t, m): end for d, r, t, m, end in rows}
    for job in {r.job_id for r in resources if r.job_id}:
        key = task_key_of(job)
        if key in running:
            live.add(job)
        elif key in ends:
            end = ends[key]
            ended[job] = None if end is None else pd.Timestamp(end).tz_convert("UTC")
    return live, ended, set()


# -- the command ----------------------------------------------------------------------------


def add_cleanup_command(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "cleanup",
        help="end instances, spot requests and checkpoints left by SkyNomad jobs that no longer run",
        description="List what carries SkyNomad's tags in the connection's clouds, ask Airflow's metadata "
        "database which jobs still run, and end the rest (checkpoints after a retention period).",
    )
    p.add_argument("--dry-run", action="store_true", help="only list what would be ended")
    p.add_argument(
        "--older-than",
        type=_duration,
        default=DEFAULT_CHECKPOINT_RETENTION,
        help="delete an ended job's checkpoints only this long after it ended, e.g. 7d, 12h, 30m "
        "(default 7d; instances and spot requests of ended jobs are always ended)",
    )
    p.add_argument("--conn-id", default=None, help="the skynomad connection (default skynomad_default)")
    p.set_defaults(func=run_cleanup)
    return p


def run_cleanup(args: argparse.Namespace) -> int:
    from ..hooks.skynomad import DEFAULT_CONN_ID, SkyNomadHook, make_cloud

    cloud = make_cloud(SkyNomadHook(args.conn_id or DEFAULT_CONN_ID).get_config())
    try:
        _, failures = cleanup(cloud, jobs_from_metadata_db, dry_run=args.dry_run, checkpoint_retention=args.older_than)
    except Exception as exc:  # noqa: BLE001 - a listing or a database that fails: say so, exit 1
        print(f"skynomad cleanup: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if failures else EXIT_OK


def _duration(text: str) -> timedelta:
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    try:
        number, unit = float(text[:-1]), units[text[-1].lower()]
        if number < 0:
            raise ValueError
    except (ValueError, KeyError, IndexError):
        raise argparse.ArgumentTypeError(f"expected a duration such as 7d, 12h or 30m, got {text!r}") from None
    return timedelta(**{unit: number})
