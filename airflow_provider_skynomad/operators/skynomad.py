"""SkyNomadOperator: run a checkpointing gang job on spot instances across zones before a deadline.

Worker side of the split: this operator validates, launches, migrates and
terminates; `SkyNomadTrigger` only watches. Each visit to a worker is short:

1. ``execute`` validates everything (deadline, feasibility, zones, market table freshness, the
   cloud itself) before anything is written or launched, asks the planner for the first decision,
   carries it out and defers.
2. The trigger wakes the task with one event (finished / preempted / replan / deadline pressure /
   failed); ``execute_complete`` carries out what the event asks and defers again, or finishes.

All job memory lives in ``context["task_state_store"]`` (a `JobRecord`), written before each
launch, so a retry after a worker crash reconnects to the group it launched instead of launching
a second one. Events carry the deferral number they answer; a repeated event is ignored.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import BaseOperator

from ..clouds.base import CapacityError, Cloud, GroupHandle, LaunchRequest
from ..hooks.skynomad import DEFAULT_CONN_ID, SkyNomadConfig, SkyNomadHook, make_cloud, market_view
from ..links.skynomad import ATTRIBUTE as LINK_ATTRIBUTE
from ..links.skynomad import SkyNomadGroupLink, link_data
from ..market.view import MarketView
from ..planner.actions import Decision
from ..planner.job import JobSpec, JobSpecError, JobState
from ..triggers.skynomad import SkyNomadTrigger
from ..workload import default_steps, default_workload  # re-exported: they used to live here
from .deadline import resolve_deadline_hours
from .errors import SkyNomadInputError
from .launches import carry_out, option_of, recover_pending
from .market_inputs import job_view, market_rows, record_observation
from .record import JOB_TAG, JobRecord, StateStore, job_id_for
from .summary import format_timeline, job_bill, summarize

__all__ = [
    "SkyNomadInputError",
    "SkyNomadOperator",
    "default_steps",
    "default_workload",
    "on_deadline_missed",
    "resolve_deadline_hours",
]


class SkyNomadOperator(BaseOperator):
    """Run a checkpointing gang job where the SkyNomad planner says, meeting a hard deadline.

    :param work_hours: P, hours of work on the gang (cold starts excluded), in cloud hours.
    :param deadline: when the work must be done: an aware ``datetime`` (absolute; on the simulated
        cloud, on its simulated clock), a ``timedelta`` (relative to the DAG run's start; on the
        simulated cloud the wall time since then is scaled by its speed), an ISO string, or None to
        derive it from the DAG's ``DeadlineAlert`` (reference + interval).
    :param command: the workload, run on every member after the cold start; default: the bundled
        deterministic training loop paced to ``work_hours``.
    :param env: extra environment for the workload (no secrets: it is stored in task state).
    :param instances: N, gang size; a zone is usable when a probe got ≥ N instances.
    :param instance_types: instance types the job may use, as a list or ``{cloud: [types]}``;
        default: every type in the market table (optionally narrowed by ``accelerator``).
    :param accelerator: keep only market rows with this accelerator (e.g. ``"H100"``).
    :param zones: zones the job may use; default: every zone in the market table after the
        ``regions`` / ``clouds`` filters. Unknown zones are an error.
    :param regions: keep only these regions.
    :param clouds: keep only these clouds (``aws``, ``gcp``).
    :param cold_start_hours: d, provision + restore time paid on every launch.
    :param checkpoint_gb: S, checkpoint size moved on a migration.
    :param policy: planner policy name (``skynomad``, ``on-demand``, ``uniform-progress``,
        ``eager-failover``).
    :param policy_params: keyword arguments for the policy.
    :param decision_step_minutes: how often the trigger asks the planner, in cloud minutes.
    :param max_market_age: refuse to start when the newest market observation is older than this
        (cloud time): run the ``skynomad_probe`` DAG first.
    :param market_lookback_hours: how much market history the planner sees.
    :param skynomad_conn_id: the `skynomad` connection (market table + cloud).
    :param market_conn_id: alias of ``skynomad_conn_id`` (the market table lives behind it).
    :param tags: extra tags/labels put on every instance (job, DAG, run and task are always added).
    :param max_wall_seconds_per_step: cap on the trigger's sleep per step (tests, benchmarks).
    """

    template_fields = ("command", "env", "zones", "regions", "deadline", "work_hours")
    operator_extra_links = (SkyNomadGroupLink(),)
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        work_hours: float,
        deadline: datetime | timedelta | str | None = None,
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
        policy: str = "skynomad",
        policy_params: dict | None = None,
        decision_step_minutes: float = 10.0,
        max_market_age: timedelta = timedelta(hours=2),
        market_lookback_hours: float = 72.0,
        skynomad_conn_id: str | None = None,
        market_conn_id: str | None = None,
        tags: dict[str, str] | None = None,
        max_wall_seconds_per_step: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.work_hours = work_hours
        self.deadline = deadline
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
        self.policy = policy
        self.policy_params = policy_params or {}
        self.decision_step_minutes = decision_step_minutes
        self.max_market_age = max_market_age
        self.market_lookback_hours = market_lookback_hours
        self.skynomad_conn_id = skynomad_conn_id or market_conn_id or DEFAULT_CONN_ID
        self.tags = tags or {}
        self.max_wall_seconds_per_step = max_wall_seconds_per_step
        # Set while a worker holds the job, for on_kill.
        self._cloud: Cloud | None = None
        self._record: JobRecord | None = None

    # == entry points ===========================================================================

    def execute(self, context):
        store = StateStore.of(context)
        if not store.durable:
            self.log.warning("task_state_store unavailable: a retry after a crash cannot reconnect to its group")
        config, cloud = self._connect()
        record = store.load()
        if record is None:
            record, view = self._start(context, config, cloud, store)
        else:
            self.log.info(
                "Reconnecting to SkyNomad job %s (try %s): %s",
                record.job_id,
                context["ti"].try_number,
                _where(record),
            )
            if record.finished:
                self.log.info("The job had already finished before this try; returning its summary.")
                return record.summary
            view = self._view(record, config, cloud)
            recover_pending(record, cloud, view, store, observe=self._observe_zone, log=self.log)
        return self._defer(record, store)

    def execute_complete(self, context, event: dict | None = None):
        store = StateStore.of(context)
        record = store.load()
        if record is None:
            raise RuntimeError(
                "SkyNomad resumed from a trigger event but the task state holds no job record; the task state "
                "was cleared while the job ran. Check the cloud for instances tagged skynomad-job and clear the task."
            )
        config, cloud = self._connect()
        self._remember(record)
        if not event or event.get("seq") != record.seq:
            self.log.info(
                "Ignoring a repeated trigger event (answers deferral %s, now at %s)",
                (event or {}).get("seq"),
                record.seq,
            )
            if record.finished:
                return record.summary
            return self._defer(record, store, bump=False)  # keep waiting on the current deferral
        if record.pending:
            view = self._view(record, config, cloud)
            recover_pending(record, cloud, view, store, observe=self._observe_zone, log=self.log)
        kind = event["kind"]
        # `at`: when the trigger saw it; `now`: when this worker acts on it (Airflow's resume lag later).
        now = self._elapsed(record, cloud)
        at = float(event["elapsed_hours"]) if event.get("elapsed_hours") is not None else now
        self._learn_reaction(record, at, now)
        progress = event.get("progress_hours")
        if progress is not None:
            record.state = JobState.from_dict(record.state).progressed(float(progress)).to_dict()
        if kind == "finished":
            return self._finish(context, record, cloud, store, at)
        if kind == "failed":
            self._release(record, cloud, store, at, "failed")
            raise RuntimeError(f"SkyNomad job {record.job_id} failed: {event.get('reason') or event.get('status')}")
        view = self._view(record, config, cloud)
        if kind == "preempted":
            option = option_of(record.state.get("running"))
            record.preemptions += 1
            record.note(at, "preempted", zone=option.market if option else None, progress=_pct(record, progress))
            zone = next((m.zone for m in view.markets if m.key == option.market), None) if option else None
            if zone:
                self._observe_zone(record, view, zone, 0)
            self._release(record, cloud, store, at, "preempted")
            record.state = {**record.state, "last_preempted_market": option.market if option else None}
            decision = self._decide(record, view, now)
        else:
            decision = Decision.from_dict(event["decision"])
            record.note(at, kind.replace("_", " "), want=_first(decision), reason=decision.reason)
        self._carry_out(record, cloud, view, decision, now, store, context)
        return self._defer(record, store)

    def on_kill(self) -> None:
        """Terminate what this job launched (the group and any launch in flight)."""
        record, cloud = self._record, self._cloud
        if record is None or cloud is None:
            return
        for data in (record.group,):
            if data:
                self.log.info("on_kill: terminating group %s", data.get("instance_ids"))
                cloud.terminate(GroupHandle.from_dict(data))
        if record.pending:
            with contextlib.suppress(CapacityError):
                cloud.terminate(cloud.launch(LaunchRequest.from_dict(record.pending)))

    # == start ==================================================================================

    def _connect(self) -> tuple[SkyNomadConfig, Cloud]:
        hook = SkyNomadHook(self.skynomad_conn_id)
        config = hook.get_config()
        try:
            cloud = make_cloud(config)
        except (ValueError, OSError) as exc:
            raise SkyNomadInputError(f"cannot set up the {config.cloud} cloud: {exc}") from exc
        self._cloud = cloud
        self.log.info("SkyNomad: %s cloud, market table %s", config.cloud, config.display_market_url)
        return config, cloud

    def _start(self, context, config: SkyNomadConfig, cloud: Cloud, store: StateStore):
        """Validate everything, then write the record, decide and launch."""
        job, deadline_hours = self._job_spec(context, config, cloud)
        zones, instance_types, frame = market_rows(
            config,
            cloud,
            zones=self.zones,
            regions=self.regions,
            clouds=self.clouds,
            instance_types=self.instance_types,
            accelerator=self.accelerator,
            lookback_hours=self.market_lookback_hours,
            max_market_age=self.max_market_age,
        )
        view = market_view(frame, self._step_hours, job.instances)
        from ..planner.registry import get_policy

        try:
            policy = get_policy(self.policy, **self.policy_params)
        except (ValueError, TypeError) as exc:
            raise SkyNomadInputError(str(exc)) from exc
        cheapest = float(view.on_demand_usd_per_hour.min())
        all_on_demand = cheapest * job.instances * (job.work_hours + job.cold_start_hours)
        ti = context["ti"]
        record = JobRecord(
            job_id=job_id_for(ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1) or -1),
            job=job.to_dict(),
            job_start_hours=float(cloud.now_hours()),
            deadline_hours=deadline_hours,
            zones=zones,
            instance_types=instance_types,
            policy=self.policy,
            state=JobState().to_dict(),
            all_on_demand_usd=all_on_demand,
        )
        decision = policy.decide(job, JobState(), view, 0.0)
        record.note(
            0.0,
            "start",
            work_h=job.work_hours,
            deadline_h=round(deadline_hours, 3),
            zones=len(zones),
            policy=self.policy,
        )
        record.note(0.0, "decide", want=_first(decision), reason=decision.reason)
        # First write: only after every check above passed.
        store.save(record)
        self._record = record
        self._carry_out(record, cloud, view, decision, 0.0, store, context)
        return record, view

    @property
    def _step_hours(self) -> float:
        return float(self.decision_step_minutes) / 60.0

    def _job_spec(self, context, config: SkyNomadConfig, cloud: Cloud) -> tuple[JobSpec, float]:
        if self.decision_step_minutes is None or float(self.decision_step_minutes) <= 0:
            raise SkyNomadInputError(f"decision_step_minutes must be > 0, got {self.decision_step_minutes!r}")
        if self.command is not None and not list(self.command):
            raise SkyNomadInputError("command is empty; pass the workload's argv, or None for the bundled workload")
        deadline_hours = resolve_deadline_hours(
            self.deadline, self.dag if self.has_dag() else None, context, config, cloud
        )
        if deadline_hours <= 0:
            raise SkyNomadInputError(
                f"the deadline is already past ({-deadline_hours:.2f} cloud hours ago); nothing was launched"
            )
        try:
            job = JobSpec(
                work_hours=float(self.work_hours),
                deadline_hours=deadline_hours,
                cold_start_hours=float(self.cold_start_hours),
                checkpoint_gb=float(self.checkpoint_gb),
                instances=int(self.instances),
            )
            job.require_feasible()
        except JobSpecError as exc:
            raise SkyNomadInputError(f"{exc}; nothing was launched") from exc
        return job, deadline_hours

    # == carrying out decisions =================================================================

    def _view(self, record: JobRecord, config: SkyNomadConfig, cloud: Cloud) -> MarketView:
        return job_view(record, config, cloud, self._step_hours, self.market_lookback_hours)

    def _decide(self, record: JobRecord, view: MarketView, elapsed: float) -> Decision:
        from ..planner.registry import get_policy

        policy = get_policy(record.policy, **self.policy_params)
        state = JobState.from_dict({**record.state, "elapsed_hours": elapsed})
        decision = policy.decide(JobSpec(**record.job), state, view, elapsed)
        record.note(elapsed, "decide", want=_first(decision), reason=decision.reason)
        return decision

    def _carry_out(self, record, cloud, view, decision, elapsed, store, context) -> None:
        carry_out(
            record,
            cloud,
            view,
            decision,
            elapsed,
            store,
            command=self.command,
            env=self.env,
            tags=self._tags(record, context),
            observe=self._observe_zone,
        )

    def _release(self, record: JobRecord, cloud: Cloud, store: StateStore, elapsed: float, end: str) -> None:
        if record.group:
            cloud.terminate(GroupHandle.from_dict(record.group))
        record.close_segment(elapsed, end)
        record.group = None
        record.state = JobState.from_dict(record.state).advance(running=None, warmup_left_hours=0.0).to_dict()
        store.save(record)

    def _finish(self, context, record: JobRecord, cloud: Cloud, store: StateStore, elapsed: float) -> dict:
        if record.group:
            cloud.terminate(GroupHandle.from_dict(record.group))
        record.close_segment(elapsed, "finished")
        record.group = None
        record.finished = True
        record.state = {**record.state, "progress_hours": record.job["work_hours"], "running": None}
        record.note(elapsed, "finished")
        summary = summarize(record, elapsed, job_bill(cloud, record.job_id, self.log))
        last = record.segments[-1]["zone"] if record.segments else None
        checkpoint_dir = getattr(cloud, "checkpoint_dir", None)
        if last and callable(checkpoint_dir):
            summary["output_dir"] = str(checkpoint_dir(last))  # where the workload's final files are
        record.summary = summary
        store.save(record)
        self.log.info("%s", format_timeline(record, summary))
        return summary

    def _defer(self, record: JobRecord, store: StateStore, bump: bool = True):
        if bump:
            record.seq += 1
            store.save(record)
        self._remember(record)
        trigger = SkyNomadTrigger(
            job=record.job,
            job_start_hours=record.job_start_hours,
            state=record.state,
            group=record.group,
            launch_delay_hours=record.launch_delay_hours,
            zones=record.zones,
            instance_types=record.instance_types,
            policy=record.policy,
            policy_params=self.policy_params,
            decision_step_hours=self._step_hours,
            seq=record.seq,
            skynomad_conn_id=self.skynomad_conn_id,
            market_lookback_hours=self.market_lookback_hours,
            max_wall_seconds_per_step=self.max_wall_seconds_per_step,
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    # == helpers ================================================================================

    def _remember(self, record: JobRecord) -> None:
        """Keep the record for on_kill and the console link (resolved when this attempt ends)."""
        self._record = record
        region = record.segments[-1]["region"] if record.segments else None
        setattr(self, LINK_ATTRIBUTE, link_data(record.group, region))

    def _learn_reaction(self, record: JobRecord, at: float, now: float) -> None:
        """Keep the slowest trigger-event → worker lag seen so far as the job's `reaction_hours`.

        The safety net lets a change start that late and a rescue come two lags late, so a busy
        scheduler (or, on the accelerated simulated cloud, seconds of Airflow latency worth simulated
        hours) cannot make a rescue that was just in time at the trigger late by the time the worker
        launches it.
        """
        lag_hours = now - at
        if lag_hours > float(record.job.get("reaction_hours", 0.0)):
            record.job = {**record.job, "reaction_hours": lag_hours}
            record.note(now, "reaction lag", hours=round(lag_hours, 3))

    def _elapsed(self, record: JobRecord, cloud: Cloud) -> float:
        return float(cloud.now_hours()) - record.job_start_hours

    def _tags(self, record: JobRecord, context) -> dict[str, str]:
        ti = context["ti"]
        return {
            **{str(k): str(v) for k, v in self.tags.items()},
            JOB_TAG: record.job_id,
            "skynomad-dag": str(ti.dag_id),
            "skynomad-task": str(ti.task_id),
            "skynomad-run": str(ti.run_id),
        }

    def _observe_zone(self, record: JobRecord, view: MarketView, zone: str, available: int) -> None:
        record_observation(
            record,
            view,
            zone,
            available,
            cloud=self._cloud,
            skynomad_conn_id=self.skynomad_conn_id,
            accelerator=self.accelerator,
            log=self.log,
        )


# == small helpers ================================================================================


def _first(decision: Decision) -> str:
    return str(decision.first) if decision.first else "idle"


def _pct(record: JobRecord, progress) -> str | None:
    if progress is None:
        return None
    return f"{100.0 * float(progress) / float(record.job['work_hours']):.0f}%"


def _where(record: JobRecord) -> str:
    if record.group:
        return f"group {record.group['instance_ids']} in {record.group['zone']}"
    if record.pending:
        return f"launch {record.pending['client_token']} in {record.pending['zone']} in flight"
    return "idle"


async def on_deadline_missed(context=None, **kwargs) -> None:
    """DeadlineAlert callback for the example DAGs: log it (runs in the triggerer)."""
    import logging

    dag_run = (context or {}).get("dag_run")
    logging.getLogger(__name__).warning(
        "SkyNomad DAG run %s missed its DeadlineAlert %s", getattr(dag_run, "run_id", "?"), kwargs or ""
    )
