"""One cleanup run: list a cloud's resources, ask Airflow about their jobs, end what provably ended.

The probe DAG's cleanup task and `skynomad cleanup` (cli/cleanup.py) both call `cleanup`. Both list
the connection's resources (`Cloud.resources()`), ask Airflow about the jobs behind them,
let `clouds.cleanup.plan_cleanup` decide, and end what it proves ended, printing each resource with
why it is ended or kept. A job is asked about by the task instance its resources name exactly
(`clouds.tags.Owner`: DAG, run and task, checked against the hash in the job id), never by a
prefix or a lowercased copy; whatever cannot be found or told is *unknown* and kept.
They differ only in how they ask Airflow:

- the command reads Airflow's metadata database directly (it runs where ``airflow`` is
  configured): the task instance's state and end time;
- a task cannot open the metadata database in Airflow 3, so the probe DAG's task asks the API
  server for the task instance's state; the API gives no task end time, so a job counts as ended
  only once its DAG run has ended too, and then as of the run's end (never earlier than the task's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta

import pandas as pd

from airflow_provider_skynomad.clouds.base import Cloud, Resource
from airflow_provider_skynomad.clouds.cleanup import (
    DEFAULT_CHECKPOINT_RETENTION,
    DEFAULT_GRACE,
    CleanupPlan,
    JobFact,
    is_final,
    is_live,
    plan_cleanup,
)
from airflow_provider_skynomad.clouds.tags import DEFAULT_DEPLOYMENT, Owner

JobLookup = Callable[[list[Resource]], dict[str, JobFact]]
"""resources → what Airflow says about each job id they carry (a job left out is unknown)."""


def cleanup(
    cloud: Cloud,
    lookup: JobLookup,
    *,
    dry_run: bool = False,
    checkpoint_retention: timedelta = DEFAULT_CHECKPOINT_RETENTION,
    grace: timedelta = DEFAULT_GRACE,
    probe_leftovers: bool = True,
    say: Callable[[str], None] = print,
) -> tuple[CleanupPlan, dict[str, str]]:
    """List, decide, release (unless `dry_run`); return the plan and the releases that failed.
    `probe_leftovers=False` keeps what probes left (the probe DAG's task runs beside its probes)."""
    deployments = cloud.deployments()
    for name, deployment in sorted(deployments.items()):
        words = f"{name}: this deployment is {deployment!r}; resources of any other are kept"
        if deployment == DEFAULT_DEPLOYMENT:
            words += " (set cloud_options.deployment_id when several Airflows share this account)"
        say(words)
    resources = list(cloud.resources())
    plan = plan_cleanup(
        resources,
        lookup(resources),
        deployment=deployments,
        now=pd.Timestamp.now(tz="UTC"),  # the lookups' end times are Airflow's: the wall clock, not the cloud's
        grace=grace,
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


def claims(resources: Iterable[Resource]) -> tuple[dict[tuple[str, str, str], dict[str, Owner]], dict[str, JobFact]]:
    """Job ids by the DAG/run/task their resources name, and the jobs whose resources name none (unknown)."""
    by_task: dict[tuple[str, str, str], dict[str, Owner]] = {}
    unnamed: dict[str, JobFact] = {}
    for resource in resources:
        owner = Owner.of(resource.tags or {}, resource.job_id)
        if not owner.job_id:
            continue
        if owner.names_task:
            by_task.setdefault((owner.dag_id, owner.run_id, owner.task_id), {}).setdefault(owner.job_id, owner)
        else:
            unnamed[owner.job_id] = JobFact.unknown("its resources do not name its DAG, run and task")
    named = {job for owners in by_task.values() for job in owners}
    return by_task, {job: fact for job, fact in unnamed.items() if job not in named}


def judge(owner: Owner, found: dict[int, tuple[object, object]]) -> JobFact:
    """The fact about one job from the task instances of its DAG/run/task: map index → (state, end time)."""
    name = f"{owner.dag_id}/{owner.run_id}/{owner.task_id}"
    hits = [(index, *found[index]) for index in sorted(found) if owner.matches(index)]
    if not hits:
        return JobFact.unknown(f"Airflow has no task instance {name} whose key is this job id's")
    index, state, end = hits[0]
    where = name if index < 0 else f"{name}[{index}]"
    shown = getattr(state, "value", state)
    if is_live(state):
        return JobFact.live(f"task instance {where} is {shown or 'cleared'}")
    if not is_final(state):
        return JobFact.unknown(f"task instance {where} is in state {shown!r}")
    return JobFact.ended(end, f"task instance {where} {shown}")


def _map_index(task_id: str, key: str) -> int | None:
    """The map index in a `get_task_states` key (``t`` unmapped, ``t_3`` mapped), None for another task."""
    if key == task_id:
        return -1
    rest = key.removeprefix(f"{task_id}_")
    return int(rest) if rest != key and rest.isdigit() else None


def jobs_from_task_api(resources: list[Resource]) -> dict[str, JobFact]:
    """`JobLookup` for a running task: the API server's states of the task instances the resources name."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    by_task, facts = claims(resources)
    for (dag_id, run_id, task_id), owners in by_task.items():
        try:
            states = RuntimeTaskInstance.get_task_states(dag_id=dag_id, task_ids=[task_id], run_ids=[run_id])
            found = {}
            for key, state in states.get(run_id, {}).items():
                index = _map_index(task_id, key)
                if index is not None:
                    found[index] = (state, None)
            run_end = None
            if any(is_final(state) for state, _ in found.values()):
                run_end = dag_run_end(dag_id, run_id)
        except Exception as exc:  # noqa: BLE001 - cannot tell: keep
            for job in owners:
                facts[job] = JobFact.unknown(f"the API server did not answer: {type(exc).__name__}: {exc}")
            continue
        for job, owner in owners.items():
            fact = judge(owner, {i: (state, run_end) for i, (state, _) in found.items()})
            if fact.status == "ended" and run_end is None:
                fact = JobFact.ended(None, f"{fact.why}; its DAG run has not ended and the task API gives no end time")
            elif fact.status == "ended":
                fact = JobFact.ended(run_end, f"{fact.why}, DAG run ended {run_end:%Y-%m-%d %H:%M} UTC")
            facts[job] = _safer(facts.get(job), fact)
    return facts


def dag_run_end(dag_id: str, run_id: str) -> pd.Timestamp | None:
    """When the DAG run ended (None while it runs), through the task's supervisor."""
    from airflow.sdk.execution_time.comms import GetDagRun
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    end = SUPERVISOR_COMMS.send(GetDagRun(dag_id=dag_id, run_id=run_id)).end_date
    return None if end is None else pd.Timestamp(end).tz_convert("UTC")


def jobs_from_metadata_db(resources: list[Resource]) -> dict[str, JobFact]:
    """`JobLookup` for the command line: Airflow's metadata database, read directly."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select, tuple_

    by_task, facts = claims(resources)
    found: dict[tuple[str, str, str], dict[int, tuple[object, object]]] = {}
    keys = list(by_task)
    with create_session() as session:
        for start in range(0, len(keys), 500):
            rows = session.execute(
                select(TI.dag_id, TI.run_id, TI.task_id, TI.map_index, TI.state, TI.end_date).where(
                    tuple_(TI.dag_id, TI.run_id, TI.task_id).in_(keys[start : start + 500])
                )
            ).all()
            for dag_id, run_id, task_id, index, state, end in rows:
                end = None if end is None else pd.Timestamp(end).tz_convert("UTC")
                found.setdefault((dag_id, run_id, task_id), {})[int(index)] = (state, end)
    for key, owners in by_task.items():
        for job, owner in owners.items():
            facts[job] = _safer(facts.get(job), judge(owner, found.get(key, {})))
    return facts


def _safer(before: JobFact | None, fact: JobFact) -> JobFact:
    """Of two answers about one job (its resources named two tasks), the one that ends less."""
    rank = {"live": 0, "unknown": 1, "ended": 2}
    return fact if before is None or rank[fact.status] < rank[before.status] else before
