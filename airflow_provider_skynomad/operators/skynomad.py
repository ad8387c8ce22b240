"""SkyNomadOperator: run a checkpointing gang job on spot instances across zones before a deadline.

Worker side of the split (DESIGN §6): this operator validates, launches, migrates and
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

import sys
from datetime import datetime, timedelta, timezone
from typing import Any

import pandas as pd
from airflow.sdk import BaseOperator

from ..clouds.base import CapacityError, Cloud, GroupHandle, GroupStatus, LaunchRequest
from ..clouds.driver import DriveResult, cloud_now, drive
from ..hooks.skynomad import DEFAULT_CONN_ID, SkyNomadConfig, SkyNomadHook, make_cloud, market_view, read_market_frame
from ..links.skynomad import ATTRIBUTE as LINK_ATTRIBUTE
from ..links.skynomad import SkyNomadGroupLink, link_data
from ..market.grid import Market
from ..market.view import MarketView
from ..planner.actions import Decision, Mode, Option
from ..planner.job import JobSpec, JobSpecError, JobState
from ..triggers.skynomad import SkyNomadTrigger
from .record import JobRecord, Segment, StateStore, format_timeline, job_id_for, summarize


class SkyNomadInputError(ValueError):
    """The job cannot start as specified; nothing was launched and nothing was written."""


STEPS_PER_WORK_HOUR = 10  # one checkpoint every 6 cloud minutes


def default_steps(work_hours: float) -> int:
    """Checkpoint granularity of the bundled workload: every 6 cloud minutes, 20 to 400 steps.

    Each step writes and fsyncs a checkpoint (~25 ms here), so at one simulated hour per wall
    second a step must be at least tens of milliseconds long or the workload falls behind.
    """
    return int(min(400, max(20, round(float(work_hours) * STEPS_PER_WORK_HOUR))))


def default_workload(work_hours: float, total_steps: int | None = None) -> list[str]:
    """The bundled training loop, paced so the whole run is `work_hours` of cloud time."""
    total_steps = default_steps(work_hours) if total_steps is None else total_steps
    return [
        sys.executable,
        "-m",
        "airflow_provider_skynomad.workload.train",
        "--total-steps",
        str(total_steps),
        "--work-hours",
        repr(float(work_hours)),
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
                "Reconnecting to SkyNomad job %s (try %s): %s", record.job_id, context["ti"].try_number,
                _where(record),
            )
            if record.finished:
                self.log.info("The job had already finished before this try; returning its summary.")
                return record.summary
            view = self._view(record, config, cloud)
            self._recover_pending(record, cloud, view, store, context)
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
                (event or {}).get("seq"), record.seq,
            )
            if record.finished:
                return record.summary
            return self._defer(record, store, bump=False)  # keep waiting on the current deferral
        if record.pending:
            view = self._view(record, config, cloud)
            self._recover_pending(record, cloud, view, store, context)
        kind = event["kind"]
        elapsed = float(event["elapsed_hours"]) if event.get("elapsed_hours") is not None else self._elapsed(
            record, cloud
        )
        progress = event.get("progress_hours")
        if progress is not None:
            record.state = {**record.state, "progress_hours": float(progress)}
        if kind == "finished":
            return self._finish(context, record, cloud, store, elapsed)
        if kind == "failed":
            self._release(record, cloud, store, elapsed, "failed")
            raise RuntimeError(f"SkyNomad job {record.job_id} failed: {event.get('reason') or event.get('status')}")
        view = self._view(record, config, cloud)
        if kind == "preempted":
            option = _option(record.state.get("running"))
            record.preemptions += 1
            record.note(elapsed, "preempted", zone=option.market if option else None, progress=_pct(record, progress))
            self._observe(record, view, option, available=0, config=config, cloud=cloud)
            self._release(record, cloud, store, elapsed, "preempted")
            record.state = {**record.state, "last_preempted_market": option.market if option else None}
            decision = self._decide(record, view, elapsed)
        else:
            decision = Decision.from_dict(event["decision"])
            record.note(elapsed, kind.replace("_", " "), want=_first(decision), reason=decision.reason)
        self._carry_out(record, cloud, view, decision, elapsed, store, context)
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
            try:
                cloud.terminate(cloud.launch(LaunchRequest(**_request_args(record.pending))))
            except CapacityError:
                pass

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
        zones, instance_types, frame = self._market_rows(config, cloud)
        view = market_view(frame, self._step_hours, job.instances)
        from ..planner.registry import get_policy

        try:
            policy = get_policy(self.policy, **self.policy_params)
        except (ValueError, TypeError) as exc:
            raise SkyNomadInputError(str(exc)) from exc
        all_on_demand = float(view.on_demand_usd_per_hour.min()) * job.instances * (job.work_hours + job.cold_start_hours)
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
            0.0, "start", work_h=job.work_hours, deadline_h=round(deadline_hours, 3), zones=len(zones),
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

    def _market_rows(self, config: SkyNomadConfig, cloud: Cloud) -> tuple[list[str], list[str] | None, pd.DataFrame]:
        """Allowed zones and instance types, checked against a fresh, non-empty market table."""
        from ..market.table import MarketTable

        table = MarketTable(config.market_url)
        try:
            table.create()
            latest = table.latest_observed_at()
            if latest is None:
                raise SkyNomadInputError(
                    f"the market table at {config.display_market_url} is empty: run the skynomad_probe DAG "
                    "(or `skynomad market import --trace FILE`) first; nothing was launched"
                )
            now = cloud_now(cloud)
            since = now - pd.Timedelta(hours=self.market_lookback_hours)
            frame = table.read(since=since, until=now + pd.Timedelta(seconds=1))
        finally:
            table.close()
        known = sorted(set(frame["zone"])) if not frame.empty else []
        types = _instance_type_list(self.instance_types)
        if self.clouds:
            frame = frame[frame["cloud"].isin(self.clouds)]
        if self.regions:
            frame = frame[frame["region"].isin(self.regions)]
        if self.accelerator:
            frame = frame[frame["accelerator"].str.lower() == str(self.accelerator).lower()]
        if types:
            frame = frame[frame["instance_type"].isin(types)]
        if self.zones:
            unknown = [z for z in self.zones if z not in known]
            if unknown:
                raise SkyNomadInputError(
                    f"unknown zone(s) {unknown}: the market table has no recent observation of them; known zones: "
                    f"{known}; nothing was launched"
                )
            frame = frame[frame["zone"].isin(self.zones)]
        if frame.empty:
            raise SkyNomadInputError(
                f"no market rows match the job (zones={self.zones}, regions={self.regions}, clouds={self.clouds}, "
                f"instance_types={types}, accelerator={self.accelerator}) within the last "
                f"{self.market_lookback_hours:g} h before {now.isoformat()}; newest row in the table: {latest}; "
                "nothing was launched"
            )
        newest = frame["observed_at"].max()
        age = now - newest
        if age > pd.Timedelta(self.max_market_age):
            raise SkyNomadInputError(
                f"the market table is stale: the newest matching observation ({newest.isoformat()}) is "
                f"{age.total_seconds() / 3600:.2f} h older than the cloud's now ({now.isoformat()}), over the "
                f"{pd.Timedelta(self.max_market_age).total_seconds() / 3600:g} h limit (max_market_age); run the "
                "skynomad_probe DAG; nothing was launched"
            )
        zones = sorted(set(frame["zone"]))
        return zones, (sorted(set(frame["instance_type"])) if types or self.accelerator else None), frame.reset_index(
            drop=True
        )

    # == carrying out decisions =================================================================

    def _view(self, record: JobRecord, config: SkyNomadConfig, cloud: Cloud) -> MarketView:
        from ..market.table import MarketTable

        table = MarketTable(config.market_url)
        try:
            frame = read_market_frame(
                table, record.zones, record.instance_types, cloud_now(cloud) + pd.Timedelta(seconds=1),
                self.market_lookback_hours,
            )
        finally:
            table.close()
        if frame.empty:
            raise RuntimeError(
                f"the market table at {config.display_market_url} has no rows for the job's zones any more"
            )
        return market_view(frame, self._step_hours, int(record.job["instances"]))

    def _decide(self, record: JobRecord, view: MarketView, elapsed: float) -> Decision:
        from ..planner.registry import get_policy

        policy = get_policy(record.policy, **self.policy_params)
        state = JobState.from_dict({**record.state, "elapsed_hours": elapsed})
        decision = policy.decide(JobSpec(**record.job), state, view, elapsed)
        record.note(elapsed, "decide", want=_first(decision), reason=decision.reason)
        return decision

    def _carry_out(self, record, cloud, view, decision, elapsed, store, context) -> None:
        job = JobSpec(**record.job)
        markets = {m.key: m for m in view.markets}
        current = GroupHandle.from_dict(record.group) if record.group else None
        current_option = _option(record.state.get("running")) if current else None
        checkpoint_market = record.state.get("checkpoint_market")
        checkpoint_zone = markets[checkpoint_market].zone if checkpoint_market in markets else None
        meta: dict = {}

        def make_request(option: Option, market: Market) -> LaunchRequest:
            token = f"{record.job_id}-{record.launches + 1}"
            meta.clear()
            meta.update(option=option.to_dict(), elapsed=elapsed)
            return LaunchRequest(
                cloud=market.cloud,
                region=market.region,
                zone=market.zone,
                instance_type=market.instance_type,
                count=job.instances,
                spot=option.mode is Mode.SPOT,
                client_token=token,
                command=tuple(self.command or default_workload(job.work_hours)),
                env={
                    **{str(k): str(v) for k, v in self.env.items()},
                    # The simulated cloud charges this cold start; real clouds simply pass it on.
                    "SKYNOMAD_COLD_START_HOURS": repr(job.cold_start_hours),
                },
                tags=self._tags(record, context),
            )

        def before_launch(request: LaunchRequest) -> None:
            # Persist first: a crash after this line is repaired by re-sending the same request.
            record.launches += 1
            record.pending = _request_dict(request)
            record.pending_meta = dict(meta)
            store.save(record)

        def after_failure(request: LaunchRequest) -> None:
            record.failed_launches += 1
            record.pending = None
            record.pending_meta = None
            record.note(elapsed, "no capacity", zone=request.zone, mode="spot" if request.spot else "on-demand")
            self._observe_zone(record, view, request.zone, available=0)
            store.save(record)

        result = drive(
            cloud,
            decision,
            current=current,
            current_option=current_option,
            checkpoint_zone=checkpoint_zone,
            markets=markets,
            make_request=make_request,
            checkpoint_gb=job.checkpoint_gb,
            gang_size=job.instances,
            before_launch=before_launch,
            after_failure=after_failure,
        )
        self._apply(record, view, result, elapsed, context)
        store.save(record)

    def _apply(self, record: JobRecord, view: MarketView, result: DriveResult, elapsed: float, context) -> None:
        """Fold what the driver did into the record (segments, costs, state)."""
        job = JobSpec(**record.job)
        markets = {m.key: m for m in view.markets}
        for probe in result.probes:
            record.probe_usd += probe.spot_usd_per_hour * job.instances * job.probe_hours
            record.note(elapsed, "probe", zone=probe.zone, available=probe.available)
        state = JobState.from_dict(record.state)
        if not result.launched and result.handle is not None:
            record.pending = None
            record.pending_meta = None
            record.note(elapsed, "stay", zone=result.option.market if result.option else None)
            return
        if result.terminated is not None:
            ended = "migrated" if result.launched else "released"
            seg = record.close_segment(elapsed, ended)
            if seg is not None and not result.launched:
                record.note(elapsed, "release", zone=seg["zone"])
        if result.launched:
            option = result.option
            market = markets[option.market]
            moved = result.moved_from_zone is not None
            if moved:
                src = next((m for m in view.markets if m.zone == result.moved_from_zone), None)
                if src is not None:
                    egress = view.egress_usd_per_gb[view.index(src.key), view.index(market.key)]
                    record.egress_usd += job.checkpoint_gb * float(egress)
                record.migrations += 1
            price = (
                view.spot_usd_per_hour[view.index(market.key)]
                if option.mode is Mode.SPOT
                else view.on_demand_usd_per_hour[view.index(market.key)]
            )
            delay = job.cold_start_hours + job.transfer_hours(moved)
            record.launch_delay_hours = delay
            record.group = result.handle.to_dict()
            record.open_segment(
                Segment(
                    market=market.key, zone=market.zone, region=market.region, mode=option.mode.value,
                    start_hours=elapsed, usd_per_hour=float(price) * job.instances, launch_delay_hours=delay,
                    instance_ids=list(result.handle.instance_ids),
                )
            )
            record.note(
                elapsed,
                "migrate" if moved else "launch",
                zone=market.zone,
                mode=option.mode.value,
                usd_per_h=round(float(price) * job.instances, 3),
                **({"from": result.moved_from_zone} if moved else {}),
            )
            self._observe_zone(record, view, market.zone, available=job.instances)
            state = state.advance(
                running=option, running_since_hours=elapsed, warmup_left_hours=delay,
                checkpoint_market=option.market,
            )
        else:
            record.group = None
            record.launch_delay_hours = 0.0
            state = state.advance(running=None, warmup_left_hours=0.0)
            if result.failed or result.terminated is None:
                record.note(elapsed, "idle", reason="nothing launched" if result.failed else "planner chose idle")
        record.pending = None
        record.pending_meta = None
        record.state = state.advance(elapsed_hours=elapsed).to_dict()

    def _recover_pending(self, record, cloud, view, store, context) -> None:
        """A launch was sent (or about to be) when the last worker died: finish it, same client token."""
        if not record.pending:
            return
        request = LaunchRequest(**_request_args(record.pending))
        meta = record.pending_meta or {}
        elapsed = float(meta.get("elapsed", self._elapsed(record, cloud)))
        self.log.info("Recovering launch %s in %s after a crash (same client token)", request.client_token, request.zone)
        try:
            handle = cloud.launch(request)
        except CapacityError:
            record.failed_launches += 1
            record.note(elapsed, "no capacity", zone=request.zone, mode="spot" if request.spot else "on-demand")
            record.pending = None
            record.pending_meta = None
            store.save(record)
            return
        option = Option.from_dict(meta["option"])
        current = GroupHandle.from_dict(record.group) if record.group else None
        if current is not None and current.instance_ids != handle.instance_ids:
            cloud.terminate(current)
        checkpoint_market = record.state.get("checkpoint_market")
        markets = {m.key: m for m in view.markets}
        moved_from = None
        if checkpoint_market in markets and markets[checkpoint_market].zone != request.zone:
            moved_from = markets[checkpoint_market].zone
            cloud.copy_checkpoint(moved_from, request.zone, float(record.job["checkpoint_gb"]))
        result = DriveResult(
            handle, option, launched=True, terminated=current if current and current != handle else None,
            moved_from_zone=moved_from,
        )
        self._apply(record, view, result, elapsed, context)
        store.save(record)

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
        bill = _cloud_bill(cloud, record.job_id)
        summary = summarize(record, elapsed, bill)
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

    def _elapsed(self, record: JobRecord, cloud: Cloud) -> float:
        return float(cloud.now_hours()) - record.job_start_hours

    def _tags(self, record: JobRecord, context) -> dict[str, str]:
        ti = context["ti"]
        return {
            **{str(k): str(v) for k, v in self.tags.items()},
            "skynomad-job": record.job_id,
            "skynomad-dag": str(ti.dag_id),
            "skynomad-task": str(ti.task_id),
            "skynomad-run": str(ti.run_id),
        }

    def _observe(self, record, view, option: Option | None, available: int, config=None, cloud=None) -> None:
        if option is not None:
            zone = next((m.zone for m in view.markets if m.key == option.market), None)
            if zone:
                self._observe_zone(record, view, zone, available)

    def _observe_zone(self, record: JobRecord, view: MarketView, zone: str, available: int) -> None:
        """Our own launch outcomes and preemptions are market observations: share them via the table."""
        if self._cloud is None:
            return
        try:
            from ..market.table import MarketTable

            market = next(m for m in view.markets if m.zone == zone)
            j = view.index(market.key)
            rows = pd.DataFrame(
                [
                    {
                        "observed_at": cloud_now(self._cloud),
                        "cloud": market.cloud,
                        "region": market.region,
                        "zone": market.zone,
                        "instance_type": market.instance_type,
                        "accelerator": self._accelerator_of(market),
                        "accelerator_count": 1,
                        "requested": int(record.job["instances"]),
                        "available": int(available),
                        "spot_price": float(view.spot_usd_per_hour[j]),
                        "on_demand_price": float(view.on_demand_usd_per_hour[j]),
                    }
                ]
            )
            table = MarketTable(SkyNomadHook(self.skynomad_conn_id).get_config().market_url)
            try:
                table.append(rows, source=f"SkyNomad job {record.job_id}")
            finally:
                table.close()
        except Exception as exc:  # noqa: BLE001 - sharing an observation must never fail the job
            self.log.warning("could not record observation of %s: %s", zone, exc)

    def _accelerator_of(self, market: Market) -> str:
        return self.accelerator or "unknown"


# == deadline =====================================================================================


def resolve_deadline_hours(deadline, dag, context, config: SkyNomadConfig, cloud: Cloud) -> float:
    """Cloud hours from now to the deadline (negative when it is past).

    Relative deadlines count from their anchor (the run's start, or a DeadlineAlert's reference)
    and the wall time already spent since then is subtracted. The simulated cloud accelerates the
    *job*, not Airflow: its pre-task wall time (scheduling, upstream tasks) counts one to one, or a
    few seconds of ``dag.test()`` start-up would eat hours of an accelerated deadline. Absolute
    datetimes are read on the cloud's clock (the simulated cloud's replayed trace time).
    """
    now_wall = datetime.now(timezone.utc)
    anchor, interval, absolute = None, None, None
    if deadline is None:
        anchor, interval, absolute = deadline_from_alert(dag, context)
        if interval is None and absolute is None:
            raise SkyNomadInputError(
                "no deadline: pass deadline= (datetime, timedelta or ISO string) or give the DAG a DeadlineAlert"
            )
    elif isinstance(deadline, timedelta):
        anchor, interval = _run_start(context) or now_wall, deadline
    elif isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
        anchor, interval = _run_start(context) or now_wall, timedelta(hours=float(deadline))
    elif isinstance(deadline, str):
        try:
            absolute = datetime.fromisoformat(deadline.replace("Z", "+00:00"))
        except ValueError:
            raise SkyNomadInputError(f"deadline {deadline!r} is not an ISO 8601 datetime") from None
    elif isinstance(deadline, datetime):
        absolute = deadline
    else:
        raise SkyNomadInputError(f"deadline must be a datetime, timedelta or ISO string, got {type(deadline).__name__}")
    if absolute is not None:
        if absolute.tzinfo is None:
            raise SkyNomadInputError(f"deadline {absolute!r} has no time zone; pass an aware datetime (UTC)")
        reference = cloud_now(cloud).to_pydatetime() if config.cloud == "simulated" else now_wall
        return (absolute - reference).total_seconds() / 3600.0
    spent = max(0.0, (now_wall - anchor).total_seconds())
    return (interval.total_seconds() - spent) / 3600.0


def deadline_from_alert(dag, context) -> tuple[datetime | None, timedelta | None, datetime | None]:
    """(anchor, interval, absolute) from the earliest of the DAG's DeadlineAlerts, or Nones."""
    alerts = getattr(dag, "deadline", None) or []
    if not isinstance(alerts, (list, tuple)):
        alerts = [alerts]
    best = None
    for alert in alerts:
        interval = getattr(alert, "interval", None)
        if not isinstance(interval, timedelta):
            continue  # variable intervals are resolved by the scheduler only
        reference = getattr(alert, "reference", None)
        name = type(reference).__name__
        if name == "FixedDatetimeDeadline":
            candidate = (None, None, reference._datetime + interval)
        elif name == "DagRunLogicalDateDeadline":
            dag_run = context.get("dag_run")
            anchor = getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
            candidate = (anchor or datetime.now(timezone.utc), interval, None)
        elif name == "DagRunQueuedAtDeadline":
            candidate = (_run_start(context) or datetime.now(timezone.utc), interval, None)
        else:
            continue
        best = candidate if best is None else min(best, candidate, key=_deadline_wall)
    return best or (None, None, None)


def _deadline_wall(candidate) -> datetime:
    anchor, interval, absolute = candidate
    return absolute if absolute is not None else anchor + interval


def _run_start(context) -> datetime | None:
    dag_run = context.get("dag_run") if context else None
    return getattr(dag_run, "start_date", None) or getattr(dag_run, "run_after", None)


# == small helpers ================================================================================


def _instance_type_list(value) -> list[str] | None:
    if not value:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        out: list[str] = []
        for types in value.values():
            out.extend([types] if isinstance(types, str) else list(types))
        return out
    return list(value)


def _option(data: dict | None) -> Option | None:
    return Option.from_dict(data) if data else None


def _first(decision: Decision) -> str:
    if not decision.try_in_order:
        return "idle"
    first = decision.try_in_order[0]
    return str(first) if first else "idle"


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


def _request_dict(request: LaunchRequest) -> dict:
    return {
        "cloud": request.cloud,
        "region": request.region,
        "zone": request.zone,
        "instance_type": request.instance_type,
        "count": request.count,
        "spot": request.spot,
        "client_token": request.client_token,
        "command": list(request.command),
        "env": dict(request.env),
        "tags": dict(request.tags),
    }


def _request_args(data: dict) -> dict:
    return {**data, "command": tuple(data.get("command", ()))}


def _cloud_bill(cloud: Cloud, job_id: str) -> dict | None:
    """The cloud's own account of this job's groups (the simulated cloud bills from the trace)."""
    groups = getattr(cloud, "groups", None)
    if not callable(groups):
        return None
    try:
        mine = groups(tags={"skynomad-job": job_id})
    except Exception:  # noqa: BLE001 - the bill is extra information only
        return None
    spot = sum(float(g.get("usd", 0.0)) for g in mine if g.get("spot"))
    on_demand = sum(float(g.get("usd", 0.0)) for g in mine if not g.get("spot"))
    return {
        "groups": len(mine),
        "spot": round(spot, 2),
        "on_demand": round(on_demand, 2),
        "spot_hours": round(sum(float(g.get("hours", 0.0)) for g in mine if g.get("spot")), 3),
        "on_demand_hours": round(sum(float(g.get("hours", 0.0)) for g in mine if not g.get("spot")), 3),
        "instances": round(spot + on_demand, 2),
    }


async def on_deadline_missed(context=None, **kwargs) -> None:
    """DeadlineAlert callback for the example DAGs: log it (runs in the triggerer)."""
    import logging

    dag_run = (context or {}).get("dag_run")
    logging.getLogger(__name__).warning(
        "SkyNomad DAG run %s missed its DeadlineAlert %s", getattr(dag_run, "run_id", "?"), kwargs or ""
    )
