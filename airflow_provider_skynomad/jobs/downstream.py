"""How long the tasks after a SkyNomad job usually take: the downstream reserve's "auto".

When the deadline is the DAG's, the job must finish early enough for what follows it (``evaluate``
after ``train``). The reserve is the median, over recent successful runs, of the longest path of
downstream task durations, read through the Task SDK (previous DAG runs and their task
breadcrumbs), never from Airflow's database.
"""

from __future__ import annotations

import statistics

RECENT_RUNS = 5


def longest_path_seconds(task, durations: dict[str, float]) -> float:
    """The longest chain of downstream durations from `task` (its own duration excluded)."""
    memo: dict[str, float] = {}

    def below(t) -> float:
        """The longest median path under task `t` (memoised: a DAG's paths share their tails)."""
        if t.task_id not in memo:
            memo[t.task_id] = max((durations.get(d.task_id, 0.0) + below(d) for d in t.downstream_list), default=0.0)
        return memo[t.task_id]

    return below(task)


def downstream_median_seconds(op, context, log) -> float:
    """Median longest-downstream-path duration over up to RECENT_RUNS previous successful runs (0 if none)."""
    ti = context["ti"]
    if not op.downstream_list:
        return 0.0
    samples: list[float] = []
    try:
        run = ti.get_previous_dagrun(state="success")
        while run is not None and len(samples) < RECENT_RUNS:
            crumbs = list(ti.get_task_breadcrumbs(op.dag_id, run.run_id))
            durations = {c["task_id"]: float(c["duration"] or 0.0) for c in crumbs if c.get("state") == "success"}
            samples.append(longest_path_seconds(op, durations))
            run = _before(ti, run) if getattr(run, "logical_date", None) is not None else None
    except Exception as exc:  # noqa: BLE001 - a reserve we cannot measure is reported, not fatal
        log.warning("could not read recent runs for downstream_reserve='auto' (%s); reserving nothing", exc)
        return 0.0
    if not samples:
        log.warning("downstream_reserve='auto': no earlier successful run to learn from; reserving nothing")
        return 0.0
    return float(statistics.median(samples))


def _before(ti, run):
    """The successful run before `run` (the SDK walks by logical date)."""
    from airflow.sdk.execution_time.comms import GetPreviousDagRun
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    response = SUPERVISOR_COMMS.send(
        msg=GetPreviousDagRun(dag_id=ti.dag_id, logical_date=run.logical_date, state="success")
    )
    return response.dag_run
