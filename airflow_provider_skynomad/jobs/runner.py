"""The job runtime: start a job, reconnect to it after a crash, and handle each trigger event.

`JobRunner` is everything the worker side does; `SkyNomadOperator` only hands it Airflow's
context and turns its answer into a deferral or a return value:

- `start()` validates everything (deadline, feasibility, zones, market freshness, the cloud)
  before anything is written or launched, asks the planner, carries the decision out;
- `resume()` is a retry after a worker crash: it finishes a launch left in flight (found by its
  client token) and waits again on the group it already has;
- `handle(event)` carries out what a trigger event asks (finished / preempted / failed / replan /
  deadline pressure / status) and answers `Defer` or `Finish`.

The time from a trigger event to this code acting on it (a worker slot, process start, a busy
box; on the accelerated simulated cloud, simulated hours) is measured on every event and the
slowest lag seen becomes the job's `reaction_hours`, which the planner's safety net plans with:
a change may start that late, a rescue two lags late. Status events every few decision steps
keep the measurement (and the live status) fresh long before a rescue is ever needed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pandas as pd

from ..clouds.base import Cloud
from ..market.source import MarketInputError, MarketSource, select_markets
from ..market.view import MarketView
from ..planner.actions import Decision, Mode
from ..planner.job import JobSpec, JobSpecError, JobState
from ..planner.registry import get_policy
from ..triggers.skynomad import first_event_hold_seconds
from .carry_out import Workload, apply_result, carry_out, recover_pending
from .errors import SkyNomadDeadlineMissed, SkyNomadInputError, SkyNomadJobFailed
from .events import JobEvent
from .narrate import live_status, say, status_line, why_move
from .params import JobParams
from .record import JOB_TAG, JobRecord, StateStore, job_id_for
from .rescue import Rescue, adoption
from .stale import StaleGuard, held_rows
from .summary import deadline_line, format_timeline, job_bill, summarize

MAX_LAGS_KEPT = 50
WEIGHED_DECISIONS_KEPT = 8  # decisions whose weighed options the record keeps (the job page shows them)
GUARD_LAGS = 1.0  # the planner already lets a rescue come two lags late; one more lag of margin
# Half a step: a tenth to see a finished workload (the trigger polls faster then), the rest for a
# start-up beyond the declared cold start before the group's first checkpoint has measured it.
MARGIN_STEPS = 0.5


def guard_hours(step_hours: float, max_lag_hours: float) -> float:
    """How much earlier than the task's deadline the planner aims: Airflow's own lag, a few times over.

    The planner's safety net lets a change start one lag late and a rescue come two lags late;
    lags grow when the box gets busier, so the job plans against a deadline one more lag earlier,
    and by half a decision step (seeing the workload's end, and a slower start than declared).
    """
    return GUARD_LAGS * max_lag_hours + MARGIN_STEPS * step_hours


@dataclass(frozen=True)
class TaskIdentity:
    """Which task instance runs the job (ids for the job id, tags and client tokens)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    max_tries: int | None = None
    try_id: str = "0"  # Airflow's id of this try (a UUID, new for every try)

    @property
    def job_id(self) -> str:
        """The id of the job this try starts when the task state holds none."""
        return job_id_for(self.dag_id, self.run_id, self.task_id, self.map_index, self.try_id)


@dataclass(frozen=True)
class Defer:
    """Wait for the next event: the trigger's keyword arguments (plain data)."""

    trigger_kwargs: dict


@dataclass(frozen=True)
class Finish:
    summary: dict


class JobRunner:
    """Runs one job for one task instance: see the module docstring.

    :param deadline_hours: the task's deadline in cloud hours from now (the DAG's, minus any
        downstream reserve), already resolved by the caller; None on resume and events.
    """

    def __init__(
        self,
        params: JobParams,
        config,
        cloud: Cloud,
        store: StateStore,
        task: TaskIdentity,
        conn_id: str,
        log,
        table_factory,
    ):
        self.params = params
        self.config = config
        self.cloud = cloud
        self.store = store
        self.task = task
        self.conn_id = conn_id
        self.log = log
        self._table_factory = table_factory
        self._table = None
        self._source: MarketSource | None = None
        self._stale = StaleGuard()
        self.record: JobRecord | None = None

    # == entry points =========================================================================

    def start(
        self, deadline_hours: float, dag_deadline_hours: float | None = None, retire: JobRecord | None = None
    ) -> Defer | Finish:
        """A new job. `retire`: a cleared task's last job, ended only once every check has passed."""
        job = self._job_spec(deadline_hours)
        now = self.cloud.now_timestamp()
        try:
            selection, _ = select_markets(
                self.table,
                now,
                zones=self.params.zones,
                regions=self.params.regions,
                clouds=self.params.clouds,
                instance_types=self.params.instance_types,
                accelerator=self.params.accelerator,
                lookback_hours=self.params.market_lookback_hours,
                max_market_age=self.params.max_market_age,
                where=self.config.display_market_url,
            )
        except MarketInputError as exc:
            raise SkyNomadInputError(str(exc)) from exc
        try:
            policy = get_policy(self.params.policy, **self.params.policy_params)
        except (ValueError, TypeError) as exc:
            raise SkyNomadInputError(str(exc)) from exc
        self._check_cloud(selection.zones, selection.instance_types)
        since = now - pd.Timedelta(hours=self.params.market_lookback_hours)
        record = JobRecord(
            job_id=self.task.job_id,
            job=job,
            job_start_hours=float(self.cloud.now_hours()),
            deadline_hours=deadline_hours,
            dag_deadline_hours=dag_deadline_hours,
            zones=selection.zones,
            instance_types=selection.instance_types,
            policy=self.params.policy,
            state=JobState(),
            all_on_demand_usd=0.0,
            market_since=since.isoformat(),
            max_tries=self.task.max_tries,
        )
        self.record = record
        view = self.view()
        cheapest = float(view.on_demand_usd_per_hour.min())
        record.all_on_demand_usd = cheapest * job.instances * (job.work_hours + job.cold_start_hours)
        decision = policy.decide(job, JobState(), view, 0.0)
        self._say(
            record.note(
                0.0,
                "start",
                work_h=job.work_hours,
                deadline_h=round(deadline_hours, 3),
                zones=len(selection.zones),
                policy=self.params.policy,
            )
        )
        self._decided(0.0, decision, view)
        if retire is not None:
            self.retire(retire)
        self.store.save(record)  # first write: only after every check above passed
        self._carry_out(view, decision, 0.0)
        return self._defer()

    def _check_cloud(self, zones: list[str], instance_types: list[str] | None) -> None:
        """What the cloud says would stop a launch in these zones fails the task now, naming the
        setting, before anything is launched or written (a zone with no subnet, a missing bucket)."""
        problems = []
        for instance_type in instance_types or [None]:
            problems += [p for p in self.cloud.check(zones, instance_type) if p not in problems]
        if problems:
            raise SkyNomadInputError(f"the {self.config.cloud} cloud cannot run this job yet: " + "; ".join(problems))

    def cleared_since(self, record: JobRecord) -> bool:
        """Whether the task was cleared after the job started: Airflow raises `max_tries` on a
        clear, never on a retry. A clear asks for the job to run again, not for its last result."""
        return None not in (record.max_tries, self.task.max_tries) and self.task.max_tries != record.max_tries

    def retire(self, record: JobRecord) -> None:
        """A cleared task's last job: end what it may have left before a new job starts."""
        self.log.info(
            "The task was cleared after job %s started: starting a new job with its own checkpoints", record.job_id
        )
        self.on_kill(record)

    def resume(self, record: JobRecord) -> Defer | Finish:
        """A retry of the task: reconnect to what the job already has."""
        self.record = record
        self.log.info(
            "Reconnecting to SkyNomad job %s (try %s): %s", record.job_id, self.task.try_number, _where(record)
        )
        if record.finished:
            self.log.info("The job had already finished before this try; returning its summary.")
            return Finish(record.summary)
        if record.pending is not None:
            recover_pending(record, self.cloud, self.view(), self.store, self._observe, self.log)
        self._adopt_rescue(self.elapsed(), None)
        return self._defer()

    def handle(self, record: JobRecord, event: JobEvent) -> Defer | Finish:
        self.record = record
        if event.seq != record.seq:
            self.log.info("Ignoring a repeated trigger event (answers deferral %s, now at %s)", event.seq, record.seq)
            if record.finished:
                return Finish(record.summary)
            return self._defer(bump=False)  # keep waiting on the current deferral
        if record.pending is not None:
            recover_pending(record, self.cloud, self.view(), self.store, self._observe, self.log)
        now = self.elapsed()
        at = event.elapsed_hours if event.elapsed_hours is not None else now
        self._learn_lag(at, now, event.sent_wall)
        self._learn_warmup(at, event.warmup_hours)
        rescued = event.rescued
        if rescued is not None:  # the trigger launched the job itself, then carried on watching
            record.state = record.state.progressed(rescued["progress_hours"])
            if rescued.get("cause") == "preempted":
                self._preempted(rescued["at_hours"], rescued["progress_hours"])  # before the launch it led to
        elif event.kind == "preempted":
            if event.progress_hours is not None:
                record.state = record.state.progressed(event.progress_hours)
            self._preempted(at, event.progress_hours)
        # A trigger's launch whose report was lost (a re-run trigger) shows as the old group gone, so
        # only a preemption (or a retry, in `resume`) needs the cloud asked for it by token.
        adopted = (rescued is not None or event.kind == "preempted") and self._adopt_rescue(
            rescued["at_hours"] if rescued else at, rescued
        )
        if adopted and rescued is not None and event.kind == "preempted":
            # The group the trigger launched was preempted in its turn: this event is about that one.
            if event.progress_hours is not None:
                record.state = record.state.progressed(event.progress_hours)
            self._preempted(at, event.progress_hours)
            adopted = False
        if event.progress_hours is not None:
            record.state = record.state.progressed(event.progress_hours)
        if adopted and event.kind in ("preempted", "deadline_pressure", "replan"):
            return self._defer()  # the rescue is what the job does now
        if event.kind == "finished":
            return self._finish(at)
        if event.kind == "failed":
            self._release(at, "failed")
            detail = f"\nlast lines of the workload's output:\n{event.detail}" if event.detail else ""
            self._say(record.note(at, "failed", reason=event.reason or event.status))
            raise SkyNomadJobFailed(f"SkyNomad job {record.job_id} failed: {event.reason or event.status}{detail}")
        if event.kind == "status":
            self._publish(now)
            return self._defer()
        view = self.view()
        decision = event.decision
        if decision is not None and event.kind != "deadline_pressure" and now - at > self.params.step_hours:
            # Airflow resumed the task a step or more after the trigger decided (a full pool, a
            # restarted scheduler): a move that was safe then may not be now. Decide again (a
            # decision under deadline pressure is carried out as made: it is what keeps the deadline).
            self.log.info(
                "[t=%.2f h] Airflow resumed the job %.2f cloud h after the trigger decided; deciding again",
                now,
                now - at,
            )
            decision = None
        if decision is None:
            decision = self._decide(view, now)
        if event.kind == "deadline_pressure":
            why = why_move(record, view, record.state, decision.first, at)
            self._say(record.note(at, "deadline pressure", why=why))
            first = decision.first
            record.on_safety_net |= first is not None and first.mode is Mode.ON_DEMAND
        self._decided(now, decision, view)
        self._carry_out(view, decision, now)
        return self._defer()

    def _preempted(self, at: float, progress_hours: float | None) -> None:
        record = self.record
        lost = record.state.running
        record.preemptions += 1
        zone = record.group.zone if record.group else None
        self._say(record.note(at, "preempted", zone=zone, progress=_pct(record, progress_hours)))
        if lost is not None:
            self._observe(lost.market, 0)
        self._release(at, "preempted")
        record.state = record.state.advance(last_preempted_market=lost.market if lost else None)

    def _adopt_rescue(self, at: float, rescued: dict | None) -> bool:
        """Record the launch the trigger made for this deferral, if it did (`jobs.rescue`)."""
        record = self.record
        view = self.view()
        result = adoption(self.cloud, view, record.job_id, record.seq, rescued, record.groups_used)
        if result is None:
            return False
        old = record.group
        if old is not None and old != result.handle:
            self.cloud.terminate(old)  # the trigger did; again is harmless
        result.terminated = old
        # A launch found only by its token tells no cause: on-demand is taken as the safety net.
        safety_net = rescued.get("safety_net", True) if rescued else result.option.mode is Mode.ON_DEMAND
        if safety_net:
            record.on_safety_net = True
            why = "the triggerer launched the on-demand safety net without waiting"
            self._say(record.note(at, "deadline pressure", why=why))
        before, state = len(record.timeline), record.state
        apply_result(record, view, result, at, self._observe)
        plain = "on-demand keeps the deadline safe" if safety_net else "relaunched without waiting for a worker"
        self._tell(before, view, state, result.option, at, plain)
        self.store.save(record)
        self._publish(self.elapsed())
        return True

    def on_kill(self, record: JobRecord) -> None:
        """Terminate what the job has: its group, and a launch in flight *if it exists* (never launch one)."""
        if record.group is not None:
            self.log.info("on_kill: terminating group %s in %s", list(record.group.instance_ids), record.group.zone)
            self.cloud.terminate(record.group)
        if record.pending is not None:
            handle = self.cloud.find(record.pending.request.client_token)
            if handle is not None:
                self.log.info("on_kill: terminating launch %s in flight", handle.client_token)
                self.cloud.terminate(handle)

    # == pieces ================================================================================

    @property
    def table(self):
        if self._table is None:
            self._table = self._table_factory()
            self._table.create()
        return self._table

    def close(self) -> None:
        if self._table is not None:
            self._table.close()
            self._table = None

    def elapsed(self) -> float:
        return float(self.cloud.now_hours()) - self.record.job_start_hours

    def view(self) -> MarketView:
        record = self.record
        if self._source is None:
            self._source = MarketSource(
                self.table,
                record.zones,
                record.instance_types,
                pd.Timestamp(record.market_since),
                self.params.step_hours,
                record.job.instances,
            )
        now = self.cloud.now_timestamp()
        try:
            view = self._source.view(now + pd.Timedelta(seconds=1))
        except MarketInputError as exc:
            raise SkyNomadJobFailed(str(exc)) from exc
        running = record.state.running.market if record.state.running else None
        view, warnings = self._stale.apply(view, held_rows(self._source), now, running)  # jobs/stale.py
        for words in warnings:
            self.log.warning("%s", words)
        return view

    def _job_spec(self, deadline_hours: float) -> JobSpec:
        if deadline_hours <= 0:
            raise SkyNomadInputError(
                f"the deadline is already past ({-deadline_hours:.2f} cloud hours ago); nothing was launched"
            )
        try:
            job = JobSpec(
                work_hours=float(self.params.work_hours),
                deadline_hours=deadline_hours,
                cold_start_hours=float(self.params.cold_start_hours),
                checkpoint_gb=float(self.params.checkpoint_gb),
                instances=int(self.params.instances),
                checkpoint_interval_hours=self.params.checkpoint_interval_hours,
                final_checkpoint_on_notice=self.params.final_checkpoint_on_notice,
            )
            job.require_feasible()
        except JobSpecError as exc:
            raise SkyNomadInputError(f"{exc}; nothing was launched") from exc
        guarded = replace(job, deadline_hours=deadline_hours - guard_hours(self.params.step_hours, 0.0))
        return guarded if guarded.feasible else job

    def _decide(self, view: MarketView, elapsed: float) -> Decision:
        policy = get_policy(self.record.policy, **self.params.policy_params)
        state = self.record.state.advance(elapsed_hours=elapsed)
        return policy.decide(self.record.job, state, view, elapsed)

    def _decided(self, at: float, decision: Decision, view: MarketView | None = None) -> None:
        first = str(decision.first) if decision.first else "idle"
        item = self.record.note(at, "decide", want=first, reason=decision.reason)
        options = self._weighed(view, at, decision) if view is not None else []
        if options:
            item["options"] = options
            explained = [t for t in self.record.timeline if "options" in t]
            for older in explained[:-WEIGHED_DECISIONS_KEPT]:  # the task state stays small
                del older["options"]
        self.log.debug("planner at %.2f h wants %s: %s", at, first, decision.reason)

    def _weighed(self, view: MarketView, at: float, decision: Decision) -> list[dict]:
        """The best few options the skynomad policy weighed now (for the job page), ranked by the order
        `decision` (the one carried out, maybe the trigger's) tries them; [] for other policies."""
        if self.record.policy != "skynomad":
            return []
        from ..planner.explain import weighed

        try:
            policy = get_policy(self.record.policy, **self.params.policy_params)
            state = self.record.state.advance(elapsed_hours=at)
            return weighed(policy, self.record.job, state, view, at, decision=decision)
        except Exception as exc:  # noqa: BLE001 - an explanation must never stop the job
            self.log.debug("could not explain the decision at %.2f h: %s", at, exc)
            return []

    def _carry_out(self, view: MarketView, decision: Decision, elapsed: float) -> None:
        record = self.record
        before, state = len(record.timeline), record.state
        carry_out(record, self.cloud, view, decision, elapsed, self.store, self._workload(), self._observe)
        words = decision_words(decision)
        self._tell(before, view, state, record.state.running, elapsed, words, quiet=("decide", "stay"))
        self._publish(elapsed)

    def _tell(self, before: int, view: MarketView, state: JobState, option, at: float, plain: str, quiet=()) -> None:
        """Say the timeline's items from index `before` on (but the `quiet` events); a move from
        `state` to `option` says why, in `plain` words when the planner's terms name no reason."""
        for item in self.record.timeline[before:]:
            if item["event"] == "migrate":
                item["why"] = why_move(self.record, view, state, option, at) or plain
            if item["event"] not in quiet:
                self._say(item)

    def _workload(self) -> Workload:
        return Workload(*self._workload_parts())

    def _workload_parts(self) -> tuple[tuple[str, ...], dict[str, str], dict[str, str]]:
        from ..workload import default_workload

        command = self.params.command or tuple(default_workload(self.record.job.work_hours))
        env = {**self.params.env, "SKYNOMAD_COLD_START_HOURS": repr(self.params.cold_start_hours)}
        return tuple(command), env, self._tags()

    def _tags(self) -> dict[str, str]:
        return {
            **{str(k): str(v) for k, v in self.params.tags.items()},
            JOB_TAG: self.record.job_id,
            "skynomad-dag": self.task.dag_id,
            "skynomad-task": self.task.task_id,
            "skynomad-run": self.task.run_id,
            "skynomad-try": str(self.task.try_number),
        }

    def _observe(self, market_key: str, available: int) -> None:
        """Our own launch outcomes and preemptions are market observations: share them via the table."""
        try:
            self.view()
            view = self._source.view(self.cloud.now_timestamp() + pd.Timedelta(seconds=1))  # the prices as observed
            row = self._source.observation_row(view, market_key, available, self.cloud.now_timestamp().floor("us"))
            self.table.append(pd.DataFrame([row]), source=f"SkyNomad job {self.record.job_id}")
        except Exception as exc:  # noqa: BLE001 - sharing an observation must never fail the job
            self.log.warning("could not record an observation of %s: %s", market_key, exc)

    def _learn_lag(self, at: float, now: float, sent_wall: float | None) -> None:
        """Keep every trigger-event → worker lag; plan with the slowest seen (see the module docstring)."""
        record = self.record
        lag = max(0.0, now - at)
        record.lags_hours = [*record.lags_hours, round(lag, 5)][-MAX_LAGS_KEPT:]
        if lag > record.job.reaction_hours:
            aim = record.deadline_hours - guard_hours(self.params.step_hours, lag)
            # Aim earlier only while one on-demand run could still make that (a huge lag must not make
            # the spec itself impossible: the job keeps its last aim and plans with the lag).
            feasible = aim >= record.job.work_hours + record.job.cold_start_hours
            deadline = aim if feasible else record.job.deadline_hours
            record.job = replace(record.job, reaction_hours=lag, deadline_hours=deadline)
            wall = max(0.0, time.time() - sent_wall) if sent_wall else lag * self.config.wall_seconds_per_cloud_hour
            margin = 2 * lag + (record.deadline_hours - deadline)
            self._say(
                record.note(
                    now,
                    "reaction lag",
                    hours=round(lag, 3),
                    wall_seconds=round(wall, 2),
                    planned_hours=round(margin, 3),
                )
            )

    def _learn_warmup(self, at: float, warmup: float | None) -> None:
        """A group took `warmup` hours from launch to its first checkpoint: plan later launches with the slowest."""
        record = self.record
        if warmup is None or record.progress_at_launch is None:
            return
        record.progress_at_launch = None
        record.warmups_hours = [*record.warmups_hours, round(warmup, 5)][-MAX_LAGS_KEPT:]
        moved = record.segments[-1].launch_delay_hours - record.job.cold_start_hours if record.segments else 0.0
        cold_start = warmup - max(0.0, moved)  # a checkpoint transfer is planned for separately
        if cold_start > record.job.cold_start_hours + 1e-6:
            record.job = replace(record.job, cold_start_hours=cold_start)
            self._say(record.note(at, "slow start", hours=round(cold_start, 3), declared=self.params.cold_start_hours))

    def _release(self, at: float, end: str) -> None:
        record = self.record
        if record.group is not None:
            self.cloud.terminate(record.group)
        record.close_segment(at, end)
        record.group = None
        record.state = record.state.advance(running=None, warmup_left_hours=0.0)
        self.store.save(record)

    def _finish(self, at: float) -> Finish:
        record = self.record
        if record.group is not None:
            self.cloud.terminate(record.group)
        record.close_segment(at, "finished")
        last_zone = record.group.zone if record.group else (record.segments[-1].zone if record.segments else None)
        record.group = None
        record.finished = True
        record.state = record.state.progressed(record.job.work_hours).advance(running=None)
        self._say(record.note(at, "finished"))
        summary = summarize(record, at, job_bill(self.cloud, record.job_id, self.log))
        summary["probing_usd"] = self._probing_cost(record, at)
        output = self.cloud.output_location(record.job_id, last_zone) if last_zone else None
        if output:
            summary["output_dir"] = output  # where the workload's final files are
        record.summary = summary
        self.store.save(record)
        self._publish(at, summary)
        self.log.info("%s", format_timeline(record, summary))
        if not summary["deadline_met"]:
            message = f"SkyNomad job {record.job_id} {deadline_line(summary)}"
            if self.params.on_deadline_miss == "fail":
                raise SkyNomadDeadlineMissed(message)
            self.log.warning("%s", message)
        return Finish(summary)

    def _probing_cost(self, record: JobRecord, elapsed: float) -> float:
        """What the probe DAG spent on the markets this job considered while it ran (shared
        infrastructure: reported beside the job's own cost, not in it)."""
        from ..market.probing import probe_cost_for

        end = self.cloud.now_timestamp()
        try:
            usd = probe_cost_for(record.zones, end - pd.Timedelta(hours=elapsed), end, url=self.config.market_url)
        except Exception as exc:  # noqa: BLE001 - a finished job must not fail on its report
            self.log.warning("could not read the probe spend for job %s (%s)", record.job_id, exc)
            return 0.0
        return round(usd, 2)

    def _publish(self, elapsed: float, summary: dict | None = None) -> None:
        """The live status in the task state store, and one line of it in the log."""
        record = self.record
        # While running: the estimate at launch-time prices (the cloud's bill is read once, at the end).
        spend = summary["cost_usd"]["total"] if summary else summarize(record, elapsed)["cost_usd"]["total"]
        status = live_status(record, elapsed, spend)
        status["conn_id"] = self.conn_id  # where the trigger publishes what it sees later (jobs/live.py)
        if summary is not None:
            status["deadline_met"] = summary["deadline_met"]
        self.store.save_status(status)
        self.log.info("%s", status_line(status))

    def _live_base(self) -> dict:
        """The live status at deferral, with the spend rate of the group, for the trigger to carry on."""
        record = self.record
        elapsed = self.elapsed()
        status = live_status(record, elapsed, summarize(record, elapsed)["cost_usd"]["total"])
        running = record.segments[-1] if record.segments and record.segments[-1].end_hours is None else None
        return {**status, "at_hours": elapsed, "usd_per_hour": running.usd_per_hour if running else 0.0}

    def _defer(self, bump: bool = True) -> Defer:
        record = self.record
        if bump:
            record.seq += 1
            self.store.save(record)
        return Defer(
            {
                "job": record.job.to_dict(),
                "job_start_hours": record.job_start_hours,
                "state": record.state.to_dict(),
                "group": record.group.to_dict() if record.group else None,
                "launch_delay_hours": record.launch_delay_hours,
                "zones": record.zones,
                "instance_types": record.instance_types,
                "policy": record.policy,
                "policy_params": self.params.policy_params,
                "decision_step_hours": self.params.step_hours,
                "seq": record.seq,
                "skynomad_conn_id": self.conn_id,
                "market_lookback_hours": self.params.market_lookback_hours,
                "max_wall_seconds_per_step": self.params.max_wall_seconds_per_step,
                "market_since": record.market_since,
                # Until Airflow's resume lag has been measured once, ask for it after the first step.
                "status_every_steps": self.params.status_every_steps if record.lags_hours else 1,
                "rescue": Rescue(record.job_id, *self._workload_parts()).to_dict(),
                "progress_at_launch": record.progress_at_launch,
                "on_safety_net": record.on_safety_net,
                # No answer before this deferral's own exit can have been recorded (an Airflow race,
                # triggers/skynomad.py), on this worker's supervisor's clock; longer on a retry.
                "min_event_seconds": first_event_hold_seconds(self.task.try_number),
                "live": self._live_base(),
            }
        )

    def _say(self, item: dict) -> None:
        self.log.info("%s", say(item))


def decision_words(decision: Decision) -> str:
    first = decision.first
    if first is None:
        return "the planner prefers to wait"
    return "on-demand keeps the deadline safe" if first.mode is Mode.ON_DEMAND else "a better spot market"


def _pct(record: JobRecord, progress) -> str | None:
    if progress is None:
        return None
    return f"{100.0 * float(progress) / record.job.work_hours:.0f}%"


def _where(record: JobRecord) -> str:
    if record.group is not None:
        return f"group {list(record.group.instance_ids)} in {record.group.zone}"
    if record.pending is not None:
        return f"launch {record.pending.request.client_token} in {record.pending.request.zone} in flight"
    return "idle"


__all__ = ["Defer", "Finish", "JobParams", "JobRunner", "TaskIdentity"]
