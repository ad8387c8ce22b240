"""skynomad_probe: keep the market table fresh for cents a day, and end what finished jobs left behind.

Every interval (``SKYNOMAD_PROBE_INTERVAL_MINUTES`` of the cloud's clock, default 10) the first task lists what the
`skynomad` connection's clouds can be asked about (the simulated cloud's catalog is its trace) and
plans this run's launch probes over all of them at once, within the day's probe budget. Then one
``SkyNomadProbeOperator`` per cloud/region stores the region's free signals (AWS spot placement
scores and spot prices) and launch-probes only the zones the plan gave it: markets jobs use before they pass
``max_market_age``, uncertain ones more often, calm or dear ones less, never above the budget. Each
probe asks for ``count`` instances (1 by default: set it to your largest job's ``instances``) and
releases them at once; its cost goes to the probe-spend record (``skynomad market spend``).
A region that fails fails only its own mapped task. Beside them, ``cleanup`` ends instances, spot
requests and old checkpoints of this deployment's jobs whose task instances it finds ended, and keeps
(and logs) whatever it cannot prove ended (``skynomad cleanup`` does the same by hand, and also ends
what probes left).

Params: ``regions`` (default all), ``count`` (instances per probe), ``probe_budget_usd_per_day``
(default the connection's, else 10 USD), ``job_zones`` (zones your jobs may use: kept fresh first;
default every zone). ``SKYNOMAD_MAX_MARKET_AGE_HOURS`` (default 2, or two intervals when longer) is
your jobs' ``max_market_age``.

On the accelerated simulated cloud the schedule follows its clock: 10 cloud minutes are 2 s at
300x, faster than Airflow can run a DAG, so it runs every 60 s of wall time (5 cloud hours), and
the jobs' ``max_market_age`` and the age at which a job stops trusting a market follow from that
(`jobs/probe_schedule.py`). Parsing this file looks up no connection: the schedule takes the
connection's speed from its definition in the environment (``AIRFLOW_CONN_SKYNOMAD_DEFAULT``), and
the first task, which reads the connection, says so when the connection runs another clock. Each
region's task records its completed round with the rows, and a job's freshness check follows
those completions (docs/market.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_skynomad.hooks.skynomad import SkyNomadHook
from airflow_provider_skynomad.jobs.probe_schedule import ProbeSchedule
from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator, plan_probes, probe_targets

SCHEDULE = ProbeSchedule.declared()  # from the environment only: a parse opens no database

with DAG(
    dag_id="skynomad_probe",
    schedule=SCHEDULE.wall_interval,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"regions": None, "count": 1, "probe_budget_usd_per_day": None, "job_zones": None},
    # Every task retries once: a metadata-DB or market-table blip (a PostgreSQL restart) must not
    # fail the run. A retried probe does not pay twice, and cleanup's releases are safe twice.
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},
    tags=["skynomad", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def plan_targets(params=None) -> list[dict]:
        """What each region probes this run: one plan over every market, within the day's budget."""
        import logging

        from airflow_provider_skynomad.probing.plan import DEFAULT_BUDGET_USD_PER_DAY

        config = SkyNomadHook().get_config()
        pace = ProbeSchedule.of(config, wall_interval=SCHEDULE.wall_interval)
        log = logging.getLogger("airflow.task")
        asked = ProbeSchedule.of(config).wall_interval
        if asked != SCHEDULE.wall_interval:
            log.warning(
                "this DAG runs every %s of wall time, but the skynomad connection's clock asks for every %s: "
                "define the connection in the environment (AIRFLOW_CONN_SKYNOMAD_DEFAULT) where the DAG's "
                "parse can read its speed; planning with the pace the DAG really keeps",
                SCHEDULE.wall_interval,
                asked,
            )
        budget = params.get("probe_budget_usd_per_day")
        if budget is None:
            budget = config.probe_budget_usd_per_day
        targets = probe_targets(
            config,
            regions=params.get("regions"),
            count=int(params.get("count") or 1),
            job_zones=params.get("job_zones"),
        )
        return plan_probes(
            config,
            targets,
            budget_usd_per_day=DEFAULT_BUDGET_USD_PER_DAY if budget is None else float(budget),
            max_market_age=pace.max_market_age,
            probe_interval=timedelta(hours=pace.cloud_interval_hours),  # the cloud's clock, as the planner counts
            log=log,
        )

    @task
    def cleanup() -> dict:
        """End what this deployment's provably ended jobs left behind, logging why each resource is
        ended or kept. It runs beside the probes, so what a probe holds (maybe in flight) is left to
        ``skynomad cleanup``; a failed region still fails the run."""
        import logging

        from airflow_provider_skynomad.clouds.cleanup_run import cleanup as run_cleanup
        from airflow_provider_skynomad.clouds.cleanup_run import jobs_from_task_api
        from airflow_provider_skynomad.hooks.skynomad import make_cloud

        log = logging.getLogger("airflow.task")
        cloud = make_cloud(SkyNomadHook().get_config())
        plan, failures = run_cleanup(cloud, jobs_from_task_api, probe_leftovers=False, say=log.info)
        if failures:
            raise RuntimeError(f"cleanup could not end {sorted(failures)}: {failures}")
        return {"ended": len(plan.release), "kept": len(plan.keep)}

    SkyNomadProbeOperator.partial(
        task_id="probe",
        map_index_template="{{ task.target['cloud'] }}/{{ task.target['region'] }}",
    ).expand(target=plan_targets())
    cleanup()
