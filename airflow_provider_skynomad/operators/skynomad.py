"""SkyNomadOperator: run a checkpointing gang job on spot instances across zones before a deadline.

Thin Airflow glue over `jobs.worker.JobWorker`: ``execute`` validates the arguments, starts the job (or
reconnects to it on a retry) and defers to `SkyNomadTrigger`, which controls the job to its end
(`jobs.controller`); ``execute_complete`` turns its one outcome into the task's result.
"""

from __future__ import annotations

import functools
import secrets
import shutil
import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, RetryDecision, RetryPolicy

from airflow_provider_skynomad.hooks.skynomad import DEFAULT_CONN_ID, SkyNomadHook, make_cloud
from airflow_provider_skynomad.jobs.contract import Outcome
from airflow_provider_skynomad.jobs.deadline import reserve_hours, resolve_deadline_hours
from airflow_provider_skynomad.jobs.errors import SkyNomadDeadlineMissed, SkyNomadInputError
from airflow_provider_skynomad.jobs.params import validate_params
from airflow_provider_skynomad.jobs.record import StateStore
from airflow_provider_skynomad.links.job import SkyNomadJobLink
from airflow_provider_skynomad.links.skynomad import SkyNomadGroupLink, persist_group_links
from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_MARKET_AGE
from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger

if TYPE_CHECKING:
    from airflow_provider_skynomad.jobs.worker import JobWorker

__all__ = ["SkyNomadInputError", "SkyNomadOperator", "alert_interval", "on_deadline_missed", "resolve_deadline_hours"]


class Stop(SystemExit):
    """Ends a task whose reason was just logged in one ERROR line.

    Airflow 3.3's task runner logs every exception a task raises with its traceback ("Task failed
    with exception"), `AirflowFailException` too, but for `SystemExit` it logs one line ("Task
    exited"). A stale market table or a missed deadline is an answer, not a bug: the user needs its
    sentence, not the frames of the runtime.
    """


class StopIsFinal(RetryPolicy):
    """A `Stop` fails the task at once, as the `AirflowFailException` it replaces did; any other
    failure is `inner`'s to judge (the task's own ``retry_policy``), else the task's retries'."""

    def __init__(self, inner: RetryPolicy | None = None) -> None:
        self.inner = inner.inner if isinstance(inner, StopIsFinal) else inner

    def evaluate(self, exception, try_number, max_tries, context=None) -> RetryDecision:
        if isinstance(exception, Stop):
            return RetryDecision.fail()
        if self.inner is not None:
            return self.inner.evaluate(exception, try_number, max_tries, context)
        return RetryDecision.default()


def _one_line_failures(method):
    """Under Airflow's task runner, an input error or a missed deadline ends the task in one ERROR
    line (its message) and no traceback; called directly (tests, other code) the error is raised."""

    @functools.wraps(method)
    def wrapper(self, context, *args, **kwargs):
        try:
            return method(self, context, *args, **kwargs)
        except (SkyNomadInputError, SkyNomadDeadlineMissed) as exc:
            runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
            if runner is None or not isinstance(context.get("ti"), runner.RuntimeTaskInstance):
                raise
            self.log.error("%s", exc)
            raise Stop(1) from None

    return wrapper


class SkyNomadOperator(BaseOperator):
    """Run a checkpointing gang job where the SkyNomad planner says, meeting a hard deadline.

    :param work_hours: P, hours of work on the gang (cold starts excluded), in cloud hours.
    :param deadline: when the work must be done: an aware ``datetime`` (absolute; on the simulated
        cloud, on its simulated clock), a ``timedelta`` (relative to the DAG run's start), an ISO
        string, or None to derive it from the DAG's ``DeadlineAlert`` (reference + interval).
    :param downstream_reserve: time kept for the tasks after this one when the deadline is the DAG's:
        a ``timedelta``, ``"auto"`` (the median duration of the longest downstream path over recent
        successful runs) or None.
    :param on_deadline_miss: ``"fail"`` (default: the task fails with the summary in its log) or ``"warn"``.
    :param command: the workload's argv (a list; a string is refused: use ``["bash", "-c", "..."]``),
        run on every member after the cold start; default: the bundled training loop paced to ``work_hours``.
    :param env: extra environment for the workload (no secrets: it is stored in task state).
    :param instances: N, gang size; a zone is usable when a probe got ≥ N instances.
    :param instance_types: instance types the job may use, as a list or ``{cloud: [types]}``.
    :param accelerator: keep only market rows with this accelerator (e.g. ``"H100"``).
    :param zones: zones the job may use (default: every zone in the market table after the filters).
    :param regions: keep only these regions.
    :param clouds: keep only these clouds (``aws``, ``gcp``).
    :param cold_start_hours: d, provision + restore time paid on every launch.
    :param checkpoint_gb: S, checkpoint size moved on a migration.
    :param checkpoint_interval_hours: how often the workload writes a checkpoint, in hours of its
        progress (default 0: it saves as it goes); a preemption takes back the work since the last one.
    :param final_checkpoint_on_notice: the workload can write one last checkpoint within the preemption
        notice (AWS gives 2 minutes, GCP 30 s), so a preemption loses nothing whatever the interval.
    :param policy: planner policy name (``skynomad``, ``on-demand``, ``uniform-progress``, ``eager-failover``).
    :param policy_params: keyword arguments for the policy.
    :param decision_step_minutes: how often the trigger asks the planner, in cloud minutes.
    :param max_market_age: refuse to start when the newest market observation is older than this and
        the probe DAG has not completed a round of the job's markets lately (docs/market.md). None:
        what the probe DAG's pace keeps (`ProbeSchedule`: 2 h on a real cloud, two rounds on a fast
        simulated clock), read from the connection when the task runs, as the example DAGs do.
    :param market_lookback_hours: how much market history the planner sees.
    :param skynomad_conn_id: the `skynomad` connection (market table + cloud); ``market_conn_id`` is an alias.
    :param tags: extra tags/labels on every instance (job, DAG, run, task and try are always added).
    :param max_wall_seconds_per_step: cap on the trigger's sleep per step (tests, benchmarks).
    :param status_every_steps: accepted for DAGs that set it; the trigger publishes the live status itself.
    :param on_deadline_risk: a module-level function (or ``"module:function"``) called once, in the
        triggerer, with a dict about the job (``job_id``, ``dag_id``, ``run_id``, ``task_id``, ``message``)
        as soon as the work measured from the checkpoints cannot be done by the deadline even on
        on-demand; the task log says so at ERROR level either way.
    :param fleet_aware: plan with what this deployment's other running jobs hold and wait for in each
        market (their live status in the connection's market database): the capacity left to this
        job, its place when capacity drops (the youngest groups go first), and scarce markets left to
        jobs with less slack. False plans as if the job were alone.

    ``retries`` defaults to 2 (a retry reconnects to the running job; input errors and a missed
    deadline fail without retrying).

    From the first deferral to the end the trigger controls the job (relaunches, moves, the
    on-demand safety net), so no reaction waits for a worker slot; the worker comes back once, to
    report. The operator defaults to ``priority_weight=100`` with ``weight_rule="absolute"`` so that
    report and a retry's reconnection go before ordinary queued tasks.
    """

    template_fields = ("command", "env", "zones", "regions", "deadline", "work_hours")

    @classmethod
    def get_serialized_fields(cls):
        """Airflow's fields, and the connection: the job page reads a task's job from the connection
        its DAG declares (the serialized task), never from one named in task state."""
        return super().get_serialized_fields() | {"skynomad_conn_id"}

    operator_extra_links = (SkyNomadGroupLink(), SkyNomadJobLink())
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        work_hours: float,
        deadline: datetime | timedelta | str | None = None,
        downstream_reserve: timedelta | str | None = None,
        on_deadline_miss: str = "fail",
        command: list[str] | None = None,
        env: dict[str, str] | None = None,
        instances: int = 1,
        instance_types: list[str] | dict[str, list[str] | str] | None = None,
        accelerator: str | None = None,
        zones: list[str] | None = None,
        regions: list[str] | None = None,
        clouds: list[str] | None = None,
        cold_start_hours: float = 0.2,
        checkpoint_gb: float = 50.0,
        checkpoint_interval_hours: float = 0.0,
        final_checkpoint_on_notice: bool = False,
        policy: str = "skynomad",
        policy_params: dict | None = None,
        decision_step_minutes: float = 10.0,
        max_market_age: timedelta | None = DEFAULT_MAX_MARKET_AGE,
        market_lookback_hours: float = 72.0,
        skynomad_conn_id: str | None = None,
        market_conn_id: str | None = None,
        tags: dict[str, str] | None = None,
        max_wall_seconds_per_step: float | None = None,
        status_every_steps: int = 6,
        on_deadline_risk=None,
        fleet_aware: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("priority_weight", 100)
        kwargs.setdefault("weight_rule", "absolute")
        # A retry reconnects to the job (task state + client tokens), so retries cost nothing but
        # time; they carry a job through a worker crash and Airflow 3.3's defer race.
        kwargs.setdefault("retries", 2)
        kwargs.setdefault("retry_delay", timedelta(seconds=5))
        super().__init__(**kwargs)
        self.retry_policy = StopIsFinal(self.retry_policy)
        self.work_hours = work_hours
        self.deadline = deadline
        self.downstream_reserve = downstream_reserve
        self.on_deadline_miss = on_deadline_miss
        self.command = command
        self.env = env or {}
        self.instances = instances
        self.instance_types = instance_types
        self.accelerator = accelerator
        self.zones = zones
        self.regions = regions
        self.clouds = clouds
        self.cold_start_hours = cold_start_hours
        self.checkpoint_gb = checkpoint_gb
        self.checkpoint_interval_hours = checkpoint_interval_hours
        self.final_checkpoint_on_notice = final_checkpoint_on_notice
        self.policy = policy
        self.policy_params = policy_params or {}
        self.decision_step_minutes = decision_step_minutes
        self.max_market_age = max_market_age
        self.market_lookback_hours = market_lookback_hours
        self.skynomad_conn_id = skynomad_conn_id or market_conn_id or DEFAULT_CONN_ID
        self.tags = tags or {}
        self.max_wall_seconds_per_step = max_wall_seconds_per_step
        self.status_every_steps = status_every_steps
        self.on_deadline_risk = on_deadline_risk
        self.fleet_aware = fleet_aware
        self._runner: JobWorker | None = None  # set while a worker holds the job, for on_kill

    # == entry points ===========================================================================

    @_one_line_failures
    def execute(self, context):
        runner = self._runner_for(context)
        try:
            record = self._latest(runner)
            cleared = record if record is not None and runner.cleared_since(record) else None
            if record is not None and cleared is None:
                return self._answer(context, runner.resume(record), runner)
            deadline_hours, dag_deadline_hours = self._deadline_hours(context, runner)
            return self._answer(context, runner.start(deadline_hours, dag_deadline_hours, retire=cleared), runner)
        except Exception:
            self._end_if_no_retry(runner)
            raise
        finally:
            runner.close()

    @_one_line_failures
    def execute_complete(self, context, event: dict | None = None):
        runner = self._runner_for(context)
        try:
            outcome = Outcome.from_dict(event or {})
            runner.task.check_owns(outcome.job_id, "the trigger's event")
            record = runner.handoff.load(outcome.job_id)
            if record is None:
                raise RuntimeError(
                    f"SkyNomad job {outcome.job_id or '?'} ended ({outcome.kind.value}) but the job record table "
                    f"{runner.config.display_market_url} holds no record of it: was the market database replaced "
                    "while the job ran? Check the cloud for instances tagged skynomad-job."
                )
            return self._answer(context, runner.report(record.record, outcome), runner)
        except Exception:
            self._end_if_no_retry(runner)
            raise
        finally:
            runner.close()

    def on_kill(self) -> None:
        """Terminate what this job launched; a launch in flight is looked up, never re-sent."""
        runner = self._runner
        if runner is not None and runner.record is not None:
            runner.on_kill(runner.record)

    def _end_if_no_retry(self, runner: JobWorker) -> None:
        """The task fails and no retry follows to reconnect to the job: terminate what it launched.

        With a retry left the group keeps running (the retry finds it by the job's record and
        client tokens). What this misses (the worker itself dies) `skynomad cleanup` ends.
        """
        max_tries = runner.task.max_tries  # the SDK's TaskInstance has it; grows on a clear
        if runner.task.try_number <= ((self.retries or 0) if max_tries is None else max_tries):
            return
        try:
            record = runner.record if runner.record is not None else self._latest(runner)
        except SkyNomadInputError:
            return  # the task state names no job of this task's that could be read: nothing of its own to end
        try:
            if record is None:
                return  # nothing was launched
            self.log.info("the task fails with no retry left: terminating what the job launched")
            runner.on_kill(record)
        except Exception as exc:  # noqa: BLE001 - the task's own error is the one to raise
            self.log.warning("could not terminate the job's group (%s): skynomad cleanup will end it", exc)

    # == glue ===================================================================================

    def _runner_for(self, context) -> JobWorker:
        # The runtime (and through it the planner, scikit-learn, scipy) is imported here, not at the
        # top: every DAG file that names this operator imports this module on each parse.
        from airflow_provider_skynomad.jobs.contract import TaskIdentity
        from airflow_provider_skynomad.jobs.worker import JobWorker

        store = StateStore.of(context)
        if not store.durable:
            self.log.warning("task_state_store unavailable: a retry after a crash cannot reconnect to its group")
        hook = SkyNomadHook(self.skynomad_conn_id)
        config = hook.get_config()
        params = validate_params(self, default_max_market_age=_probe_pace_max_age(config))
        try:
            cloud = make_cloud(config)
        except (ValueError, OSError, ImportError) as exc:
            raise SkyNomadInputError(f"cannot set up the {config.cloud} cloud: {exc}") from exc
        self.log.info("SkyNomad: %s cloud, market table %s", config.cloud, config.display_market_url)
        if config.cloud == "simulated" and params.command and not shutil.which(params.command[0]):
            raise SkyNomadInputError(f"command {params.command[0]!r} is not on PATH; nothing was launched")
        ti = context["ti"]
        task = TaskIdentity(
            str(ti.dag_id),
            str(ti.run_id),
            str(ti.task_id),
            _map_index(ti),
            int(getattr(ti, "try_number", 1) or 1),
            _max_tries(ti),
            str(getattr(ti, "id", None) or secrets.token_hex(4)),
        )
        from airflow_provider_skynomad.jobs.run import JobRun
        from airflow_provider_skynomad.jobs.table import JobTable

        run = JobRun(
            params=params,
            config=config,
            cloud=cloud,
            store=store,
            task=task,
            log=self.log,
            table_factory=hook.get_market_table,
        )
        self._runner = JobWorker(run=run, conn_id=self.skynomad_conn_id, handoff=JobTable(config.market_url))
        return self._runner

    @staticmethod
    def _latest(runner: JobWorker):
        """The job's record, None when this task has started none.

        Task state names the job (anyone who may write the task's state may have written it): the
        id is followed only when it is this task's job, and the record acted on is the job table's
        (the worker writes it there before task state, and before every effect).
        """
        job_id = runner.store.pointer()
        if job_id is None:
            return None
        runner.task.check_owns(job_id, "this task's state")
        stored = runner.handoff.load(job_id)
        if stored is None:
            raise SkyNomadInputError(
                f"this task's state names SkyNomad job {job_id}, but the job record table "
                f"{runner.config.display_market_url} holds no record of it: nothing was terminated, launched or "
                "written. If the market database was replaced, end the job's instances (skynomad cleanup) and "
                "clear this task's state to start a new job."
            )
        return stored.record

    def _answer(self, context, answer, runner: JobWorker):
        from airflow_provider_skynomad.jobs.worker import Defer

        persist_group_links(context, runner)
        if isinstance(answer, Defer):
            self.defer(trigger=SkyNomadTrigger(**answer.trigger_kwargs), method_name="execute_complete")
        return answer.summary

    def _deadline_hours(self, context, runner: JobWorker) -> tuple[float, float | None]:
        dag = self.dag if self.has_dag() else None
        hours = resolve_deadline_hours(self.deadline, dag, context, runner.config, runner.cloud)
        if self.deadline is not None or self.downstream_reserve is None:
            return hours, None
        median = self._downstream_median_seconds(context) if self.downstream_reserve == "auto" else None
        reserve = reserve_hours(self.downstream_reserve, runner.config, median)
        self.log.info("keeping %.2f cloud h of the DAG's deadline for the tasks downstream", reserve)
        return hours - reserve, hours

    def _downstream_median_seconds(self, context) -> float:
        """The longest downstream path's median duration over recent successful runs (Airflow's public API)."""
        from airflow_provider_skynomad.jobs.downstream import downstream_median_seconds

        return downstream_median_seconds(self, context, self.log)


def _probe_pace_max_age(config) -> timedelta:
    """The `max_market_age` the probe DAG's pace keeps on `config`'s clock (an operator given None)."""
    from airflow_provider_skynomad.jobs.probe_schedule import ProbeSchedule

    try:
        return ProbeSchedule.of(config).max_market_age
    except ValueError as exc:  # a bad SKYNOMAD_PROBE_INTERVAL_MINUTES / SKYNOMAD_MAX_MARKET_AGE_HOURS
        raise SkyNomadInputError(str(exc)) from exc


def _map_index(ti) -> int:
    index = getattr(ti, "map_index", -1)
    return -1 if index is None else int(index)


def _max_tries(ti) -> int | None:
    tries = getattr(ti, "max_tries", None)
    return None if tries is None else int(tries)


AIRFLOW_ALLOWANCE = timedelta(minutes=2)
"""Airflow's own wall time around a job that its deadline does not count (docs/airflow.md#keeping-the-deadline):
the queue before the first try and, after the workload ends, the trigger's notice, a worker slot and the
scheduler's mark. Measured in the README's recipe on a loaded 2-core box: 38 s + 48 s."""


def alert_interval(
    cloud_interval: timedelta,
    skynomad_conn_id: str = DEFAULT_CONN_ID,
    airflow_allowance: timedelta = AIRFLOW_ALLOWANCE,
    *,
    speed: float | None = None,
) -> timedelta:
    """A `DeadlineAlert` interval that passes only after a job that used all of `cloud_interval` ended in Airflow.

    Airflow measures a DeadlineAlert on the wall clock from the run's queued time to the run's end;
    the job measures its deadline on its cloud's clock from its task's start to its workload's end.
    Between the two ends lie wall seconds the job does not count: the queue before the task's first
    try (counted one to one, not `speed` times: at 300x Airflow's 38 s would be 3 of the job's
    hours), and after the workload ends the trigger's notice, a worker slot for the task's last step
    and the scheduler's mark. So the interval is the job's deadline in wall time (shorter by `speed`
    on the simulated cloud) plus `airflow_allowance` for those seconds. A job that meets its deadline
    ends its run before the alert while Airflow's own part stays within the allowance; a job that
    misses it fails its task (``on_deadline_miss="fail"``), Airflow keeps the deadline of a run that
    did not succeed, and the run page shows Deadline Missed when the alert passes, at most
    `airflow_allowance` after the job's own deadline.

    Called when the DAG file is parsed, so it looks up no connection: `speed` is the simulated
    cloud's (cloud seconds per wall second), by default read from the connection's definition in
    the environment (``AIRFLOW_CONN_SKYNOMAD_DEFAULT``, `config.declared_speed`); a connection
    defined elsewhere counts as a real cloud's clock (speed 1: a late alert, never a false one).
    """
    from airflow_provider_skynomad.config import declared_speed

    if speed is None:
        speed = declared_speed(skynomad_conn_id) or 1.0
    if not speed > 0:
        raise ValueError(f"speed must be > 0, got {speed!r}")
    return timedelta(seconds=cloud_interval.total_seconds() / float(speed)) + airflow_allowance


async def on_deadline_missed(context=None, **kwargs) -> None:
    """DeadlineAlert callback for the example DAGs: say which run missed which deadline (runs in the triggerer).

    Airflow 3.3 hands a triggerer callback a plain-data context: ``dag_run`` is the run as the REST
    API returns it (a dict) and ``deadline`` holds its ``deadline_time``; objects are read too.
    """
    import logging

    context = context or {}

    def field(item, name):
        return item.get(name) if isinstance(item, dict) else getattr(item, name, None)

    dag_run = context.get("dag_run") or {}
    deadline = context.get("deadline") or {}
    dag_id = field(dag_run, "dag_id") or "?"
    run_id = field(dag_run, "dag_run_id") or field(dag_run, "run_id") or "?"
    when = field(deadline, "deadline_time")
    logging.getLogger(__name__).warning(
        "SkyNomad: DAG %s run %s missed its DeadlineAlert%s (state %s)%s",
        dag_id,
        run_id,
        f" of {when}" if when else "",
        field(dag_run, "state") or "unknown",
        f"; callback arguments {kwargs}" if kwargs else "",
    )
