"""SkyNomadTrigger: watch one running (or idle) job and wake the worker when it must act.

Every decision step (simulated minutes on the simulated cloud) it runs one `jobs.watch.Watch`
step in a thread — poll the group, read the progress the last checkpoint proves, ask the
planner — and yields exactly one event when the worker has something to do (finished,
preempted, failed, replan, deadline_pressure), or a ``status`` event every few quiet steps so
the live status stays fresh and Airflow's resume lag keeps being measured. Constructor
arguments are plain JSON data mirrored exactly by ``serialize()``.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..hooks import skynomad as _hooks
from ..hooks.skynomad import SkyNomadHook

# The triggerer imports this module on its event loop: keep it light. pandas, numpy and the
# planner are imported inside the worker threads that use them.

MIN_EVENT_SECONDS = 2.0
PUBLISH_EVERY_SECONDS = 10.0  # wall seconds between two live-status rows (`jobs.live`); a job page reloads every 30 s
# Airflow's task supervisor waits for its task's output at most this long between looks (its
# `[workers] min_heartbeat_interval`), so it can notice a deferring task's exit that much late.
DEFAULT_SUPERVISOR_WAIT_SECONDS = 5.0
# Task states after which nothing of the job may keep running (a cleared task has none yet).
_ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


def first_event_hold_seconds(try_number: int = 1) -> float:
    """The `min_event_seconds` a worker gives the trigger it defers to (read where that worker runs).

    A deferring task's process exits at once, but its supervisor notices only when its wait for the
    task's output ends, up to `[workers] min_heartbeat_interval` (5 s) later, and the scheduler reads
    the exit in its next loop: an event before that costs the task a try (see `run`). In `airflow
    standalone` on a busy box exits were recorded up to 7.0 s after the deferral, and triggers that
    answered 5.5 s after they started lost two tries in six runs. So: that wait, MIN_EVENT_SECONDS
    for the exit and MIN_EVENT_SECONDS for the scheduler's loop, and MIN_EVENT_SECONDS more for each
    retry (up to three): a try lost to the race was on a slow box.

    `dag.test()` runs the task and its trigger in one process (Airflow's in-process test
    supervisor): there is no exit to record and no scheduler to race, so only the short hold of
    MIN_EVENT_SECONDS per try (up to four) is kept. On an accelerated simulated clock the full
    hold is hours of cloud time in which a deferred job could not react.
    """
    tries = min(max(int(try_number), 1), 4)
    if supervised_in_process():
        return MIN_EVENT_SECONDS * tries
    try:
        from airflow.configuration import conf

        wait = conf.getfloat("workers", "min_heartbeat_interval", fallback=DEFAULT_SUPERVISOR_WAIT_SECONDS)
    except Exception:  # noqa: BLE001 - no readable configuration: Airflow's default
        wait = DEFAULT_SUPERVISOR_WAIT_SECONDS
    return max(0.0, wait) + MIN_EVENT_SECONDS * (1 + tries)


def supervised_in_process() -> bool:
    """This task runs under Airflow's in-process test supervisor (`dag.test()`), not a worker's."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # another Airflow layout: assume a real worker (the longer, safe hold)
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)


class SkyNomadTrigger(BaseTrigger):
    """Poll the cloud and ask the planner every decision step; yield when the worker must act.

    :param job: JobSpec as a dict (hours are cloud hours).
    :param job_start_hours: the cloud clock when the job started.
    :param state: JobState dict at deferral time.
    :param group: GroupHandle dict of the running group, or None when idle.
    :param launch_delay_hours: cold start (+ transfer) the running group pays after launch.
    :param zones: market zones the job may use.
    :param instance_types: instance types the job may use (None = any in the market table).
    :param policy: planner policy name (``planner.registry``).
    :param policy_params: keyword arguments for the policy.
    :param decision_step_hours: how often to ask the planner, in cloud hours.
    :param seq: which deferral this trigger answers; echoed in every event.
    :param skynomad_conn_id: the `skynomad` connection; resolved in the triggerer.
    :param market_lookback_hours: how much market history the planner sees.
    :param max_wall_seconds_per_step: cap on one sleep (keeps real-cloud jobs responsive in tests).
    :param market_since: ISO start of the job's market window (default: lookback before now).
    :param status_every_steps: quiet steps between two ``status`` events (None: never).
    :param rescue: ``{job_id, command, env, tags}``: lets the trigger launch the on-demand safety net
        itself under deadline pressure (see `jobs.watch`); None: leave every change to the worker.
    :param progress_at_launch: the running group's progress when it launched, while its first
        checkpoint (and so its real warm-up) is still to be seen; None otherwise.
    :param on_safety_net: deadline pressure moved the job to on-demand: it stays there to the end.
    :param min_event_seconds: answer no sooner than this after starting (see `run`; None:
        MIN_EVENT_SECONDS); the worker passes `first_event_hold_seconds`.
    :param live: the job's live status at deferral with its group's spend rate: the trigger
        publishes where the job stands from it (`jobs.live`); None: publish nothing.
    """

    def __init__(
        self,
        *,
        job: dict,
        job_start_hours: float,
        state: dict,
        group: dict | None,
        launch_delay_hours: float,
        zones: list[str],
        instance_types: list[str] | None,
        policy: str,
        policy_params: dict | None,
        decision_step_hours: float,
        seq: int,
        skynomad_conn_id: str,
        market_lookback_hours: float = 72.0,
        max_wall_seconds_per_step: float | None = None,
        market_since: str | None = None,
        status_every_steps: int | None = None,
        rescue: dict | None = None,
        progress_at_launch: float | None = None,
        on_safety_net: bool = False,
        min_event_seconds: float | None = None,
        live: dict | None = None,
    ) -> None:
        super().__init__()
        self.job = job
        self.job_start_hours = job_start_hours
        self.state = state
        self.group = group
        self.launch_delay_hours = launch_delay_hours
        self.zones = list(zones)
        self.instance_types = list(instance_types) if instance_types else None
        self.policy = policy
        self.policy_params = dict(policy_params or {})
        self.decision_step_hours = decision_step_hours
        self.seq = seq
        self.skynomad_conn_id = skynomad_conn_id
        self.market_lookback_hours = market_lookback_hours
        self.max_wall_seconds_per_step = max_wall_seconds_per_step
        self.market_since = market_since
        self.status_every_steps = status_every_steps
        self.rescue = rescue
        self.progress_at_launch = progress_at_launch
        self.on_safety_net = on_safety_net
        self.min_event_seconds = None if min_event_seconds is None else float(min_event_seconds)
        self.live = live
        self._rescue_handle: dict | None = None  # an on-demand rescue this trigger launched (for on_kill)
        self._published = -math.inf  # monotonic time of the last live-status row

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job": self.job,
                "job_start_hours": self.job_start_hours,
                "state": self.state,
                "group": self.group,
                "launch_delay_hours": self.launch_delay_hours,
                "zones": self.zones,
                "instance_types": self.instance_types,
                "policy": self.policy,
                "policy_params": self.policy_params,
                "decision_step_hours": self.decision_step_hours,
                "seq": self.seq,
                "skynomad_conn_id": self.skynomad_conn_id,
                "market_lookback_hours": self.market_lookback_hours,
                "max_wall_seconds_per_step": self.max_wall_seconds_per_step,
                "market_since": self.market_since,
                "status_every_steps": self.status_every_steps,
                "rescue": self.rescue,
                "progress_at_launch": self.progress_at_launch,
                "on_safety_net": self.on_safety_net,
                "min_event_seconds": self.min_event_seconds,
                "live": self.live,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            config = await SkyNomadHook(self.skynomad_conn_id).aget_config()
            # Trace loading, database connection and the planner's imports all block: not on the loop.
            watch, cloud, source, policy, board = await asyncio.to_thread(self._setup, config)
        except Exception as exc:  # noqa: BLE001 - the worker turns this into a clear task failure
            yield TriggerEvent(
                {"kind": "failed", "seq": self.seq, "reason": f"trigger could not start: {type(exc).__name__}: {exc}"}
            )
            return
        wall_per_hour = config.wall_seconds_per_cloud_hour
        step_wall = wall_per_hour * self.decision_step_hours
        if self.max_wall_seconds_per_step is not None:
            step_wall = min(step_wall, self.max_wall_seconds_per_step)
        # The first look is at once when the job has a group: the worker may just have launched it, or
        # learned something new. A job with none was just left idle by the worker, or its launch was
        # refused: looking at once could only propose that launch again and wake the worker in a
        # loop, so its first look keeps its place in the schedule (at least half a step away).
        quiet, first, started = 0, watch.group is not None, time.monotonic()
        # Steps keep to a fixed schedule (no drift by their own duration), offset per job so that
        # the many triggers of one triggerer don't all step at the same instant and queue for
        # its few threads at once (a triggerer that took over another's triggers starts them together).
        due = started + step_wall * self._phase()
        try:
            while True:
                if not first:
                    # The clouds' clocks are arithmetic (Cloud.now_hours): no thread needed.
                    wanted = watch.sleep_seconds(step_wall, wall_per_hour, cloud.now_hours())
                    now = time.monotonic()
                    # Never step back to back: a step that ran long moves the schedule, it is not
                    # caught up (the workload and the worker share the CPU with this loop).
                    rest = min(wanted, step_wall / 2)
                    if due < now + rest:
                        due += step_wall * math.ceil((now + rest - due) / step_wall)
                    await asyncio.sleep(min(wanted, due - now))
                first = False
                event, words = await asyncio.to_thread(self._look, watch, cloud, source, policy, board)
                self._rescue_handle = (watch.rescued or {}).get("handle")
                quiet += 1
                if event is None and self.status_every_steps and quiet >= self.status_every_steps:
                    event = await asyncio.to_thread(watch.status_event, cloud, self.decision_step_hours)
                # Airflow 3.3 can re-queue a task whose trigger fires within moments of its deferral,
                # before the deferral's own exit is recorded, and then kill the resumed attempt
                # (apache/airflow#72716): never answer sooner than `min_event_seconds` after starting.
                # The hold is ours, not Airflow's, and on a fast simulated clock it can span steps:
                # after it the trigger looks again, so the worker gets a decision as fresh as the event.
                hold = MIN_EVENT_SECONDS if self.min_event_seconds is None else self.min_event_seconds
                held = hold - (time.monotonic() - started) if event is not None else 0.0
                if held > 0:
                    await asyncio.sleep(held)
                    first = True
                    continue
                if words:
                    self.log.info("%s", words)
                if event is not None:
                    yield TriggerEvent(event.to_dict())
                    return
        finally:
            from ..market.table import release_shared

            release_shared(source.table)  # also when the generator is closed after its loop has ended

    def _look(self, watch, cloud, source, policy, board):
        """One decision step, then the live status when one is due (both block: in a thread)."""
        answer = watch.step(cloud, source, policy)
        if board is None or time.monotonic() - self._published < PUBLISH_EVERY_SECONDS:
            return answer
        status = watch.live(self.live)
        if status is not None:
            self._published = time.monotonic()
            try:
                board.publish(status["job_id"], status)
            except Exception as exc:  # noqa: BLE001 - the page can wait for the worker's next visit
                self.log.warning("could not publish the job's live status: %s", exc)
        return answer

    def _phase(self) -> float:
        """Where in its step this job's decisions fall, in (0, 1]: stable for the job and deferral."""
        key = f"{(self.group or {}).get('client_token', '')}/{self.job_start_hours!r}/{self.seq}"
        return (1 + zlib.crc32(key.encode()) % 1000) / 1000

    def _setup(self, config):
        import pandas as pd

        from ..jobs.live import LiveStatusTable
        from ..jobs.watch import Watch
        from ..market.source import MarketSource
        from ..market.table import release_shared, shared_table
        from ..planner.job import JobSpec
        from ..planner.registry import get_policy

        cloud = _hooks.make_cloud(config)
        table = shared_table(config.market_url)  # one per triggerer process, not one per trigger
        try:
            table.create()
            job = JobSpec(**self.job)
            since = (
                pd.Timestamp(self.market_since)
                if self.market_since
                else cloud.now_timestamp() - pd.Timedelta(hours=self.market_lookback_hours)
            )
            source = MarketSource(
                table, self.zones, self.instance_types, since, self.decision_step_hours, job.instances
            )
        except BaseException:
            release_shared(table)
            raise
        watch = Watch.from_kwargs(
            self.job,
            self.job_start_hours,
            self.state,
            self.group,
            self.launch_delay_hours,
            self.seq,
            self.rescue,
            self.progress_at_launch,
            self.on_safety_net,
        )
        board = LiveStatusTable(market=table) if self.live else None
        return watch, cloud, source, get_policy(self.policy, **self.policy_params), board

    async def on_kill(self) -> None:
        """The deferred task was acted on: terminate the job's group once Airflow says the task ended.

        Airflow 3.3 calls this when a user marks the task failed or succeeded or clears it, and when
        its DAG run times out (the scheduler sets the task SKIPPED, the triggerer drops the unused
        trigger). It also calls it when a triggerer that missed its heartbeat finds its trigger
        handed to another triggerer: the task is still deferred then and the job must go on. So the
        task's state is asked first, and only an ended task (success, failed, skipped, ...) has its
        group — and the on-demand rescue this trigger may have launched — terminated. A cleared task
        (no state yet, its next try reconnects to the group) and a failed lookup end nothing:
        `skynomad cleanup` in the probe DAG ends what a job that no longer runs left behind.
        """
        handles = [h for h in (self.group, self._rescue_handle) if h]
        if not handles:
            return
        state = await self._task_state()
        if state not in _ENDED_STATES:
            self.log.info(
                "trigger cancelled while the task is %s: the job's group keeps running",
                state or "without a known state",
            )
            return
        from ..clouds.base import GroupHandle

        config = await SkyNomadHook(self.skynomad_conn_id).aget_config()
        cloud = await asyncio.to_thread(_hooks.make_cloud, config)
        for data in {json.dumps(h, sort_keys=True): h for h in handles}.values():
            handle = GroupHandle.from_dict(data)
            self.log.info("the task is %s: terminating group %s in %s", state, list(handle.instance_ids), handle.zone)
            await asyncio.to_thread(cloud.terminate, handle)

    async def _task_state(self) -> str | None:
        """This task instance's state from the Airflow API server, None when it cannot be told."""
        ti = self.task_instance
        if ti is None:
            return None
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            states = await asyncio.to_thread(
                RuntimeTaskInstance.get_task_states,
                dag_id=ti.dag_id,
                map_index=ti.map_index,
                task_ids=[ti.task_id],
                run_ids=[ti.run_id],
            )
        except Exception as exc:  # noqa: BLE001 - an unknown state ends nothing
            self.log.warning("cannot read the task's state (%s): leaving the group to skynomad cleanup", exc)
            return None
        by_task = states.get(ti.run_id, {})
        key = ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
        state = by_task.get(key)
        return None if state is None else str(getattr(state, "value", state))
