"""SkyNomadTrigger: the job's controller from its first deferral to its end.

Every decision step (simulated minutes on the simulated cloud) it runs one `jobs.controller`
step in a thread: look at the group, and act on what it found (relaunch, move, put up the
on-demand safety net, release) at once. It wakes the worker once, when the job has ended, with
a `jobs.contract.Outcome`. Its keyword arguments are `jobs.contract.ControllerArgs`, nothing else.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_skynomad.hooks import skynomad as _hooks
from airflow_provider_skynomad.hooks.skynomad import SkyNomadHook
from airflow_provider_skynomad.jobs.clock import StepClock, step_wall_seconds
from airflow_provider_skynomad.jobs.contract import ControllerArgs, Outcome, OutcomeKind
from airflow_provider_skynomad.jobs.unanswered import MAX_DB_STEPS, Patience, first_line

# The triggerer imports this module on its event loop: keep it light. pandas, numpy, SQLAlchemy
# and the planner are imported inside the threads that use them.

# Task states after which nothing of the job may keep running (a cleared task has none yet).
_ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class SkyNomadTrigger(BaseTrigger):
    """Control one job: look every decision step, act at once, yield one `Outcome` at the end.

    Its arguments are those of `jobs.contract.ControllerArgs` (`job_id`, `conn_id`, `params`, `task`,
    `min_event_seconds`), as plain data; ``serialize()`` returns exactly them.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.args = ControllerArgs.from_kwargs(kwargs)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", self.args.to_kwargs()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        args, started = self.args, time.monotonic()
        try:
            self._check_task()
            config = await SkyNomadHook(args.conn_id).aget_config()
            controller, table = await self._open_when_the_database_answers(config)
        except Exception as exc:  # noqa: BLE001 - the worker turns this into a clear task failure
            message = f"the job's controller could not start: {type(exc).__name__}: {exc}"
            yield TriggerEvent(Outcome(OutcomeKind.FAILED, args.job_id, message).to_dict())
            return
        try:
            outcome = await self._control(controller, config)
        finally:
            await _release(table)  # also when the generator is closed after its loop has ended
        if outcome is None:
            return  # another copy controls the job now: it will answer
        # Airflow 3.3 can re-queue a task whose trigger fires within moments of its deferral, before
        # the deferral's own exit is recorded (apache/airflow#72716): the news of the end waits that
        # long. The job itself has already ended; only the worker's report is held.
        held = args.min_event_seconds - (time.monotonic() - started)
        if held > 0:
            await asyncio.sleep(held)
        yield TriggerEvent(outcome.to_dict())

    async def _control(self, controller, config) -> Outcome | None:
        """Step on the job's schedule (`jobs.clock.StepClock`) until it ends; None when another copy took control."""
        from airflow_provider_skynomad.jobs.errors import ControlLost

        clock = StepClock.of(
            self.args.job_id, step_wall=self._step_wall(config), wall_per_hour=config.wall_seconds_per_cloud_hour
        )
        while True:
            tick = clock.begin()
            try:
                # In a thread: the look, its effects, its log line, the live status and even the
                # cloud's clock all block or may (a trigger's log is shipped to the task's log).
                look = await asyncio.to_thread(
                    controller.step, tick.late_hours, tick.late_seconds, publish=tick.publish, clock=clock
                )
            except ControlLost as exc:
                self.log.warning("%s", exc)
                return None
            if look.outcome is not None:
                return look.outcome
            await asyncio.sleep(clock.end(tick, look.sleep_seconds))

    def _check_task(self) -> None:
        """The arguments' task is the task instance this trigger was deferred from, and owns the job.

        The triggerer sets ``task_instance``; without one (a test) the arguments' own task is checked.
        """
        task, ti = self.args.task, self.task_instance
        if ti is not None:
            index = -1 if getattr(ti, "map_index", None) is None else int(ti.map_index)
            said = (task.dag_id, task.run_id, task.task_id, task.map_index)
            actual = (str(ti.dag_id), str(ti.run_id), str(ti.task_id), index)
            if said != actual:
                raise ValueError(
                    f"the trigger's arguments name task {'/'.join(map(str, said))}, not the task it was "
                    f"deferred from ({'/'.join(map(str, actual))}): nothing was done"
                )
        task.check_owns(self.args.job_id, "the trigger's arguments")

    def _step_wall(self, config) -> float:
        """Wall seconds of one decision step on the connection's cloud clock."""
        params = self.args.params
        return step_wall_seconds(
            config.wall_seconds_per_cloud_hour, params.step_hours, params.max_wall_seconds_per_step
        )

    async def _open_when_the_database_answers(self, config):
        """The controller, opened in a thread (trace loading, the database and the planner's imports
        all block). A trigger that starts while the database restarts (a triggerer's triggers are
        re-assigned at any moment) tries again each decision step, as a running job's controller
        does (`jobs.unanswered`, `MAX_DB_STEPS`), before the job fails."""
        database = Patience(MAX_DB_STEPS)
        while True:
            opened, down = await asyncio.to_thread(self._open_unless_the_database_is_down, config, database.last_chance)
            if opened is not None:
                return opened
            database.missed()
            self.log.warning(
                "the job's database did not answer (%s); its controller tries again in a decision step", down
            )
            await asyncio.sleep(self._step_wall(config))

    def _open_unless_the_database_is_down(self, config, last: bool):
        """In a thread: ((controller, table), None), or (None, the database's words) when it did not
        answer; on the `last` try that error is raised."""
        from sqlalchemy.exc import DBAPIError

        try:
            return self._open(config), None
        except DBAPIError as exc:
            if last:
                raise
            return None, first_line(exc)

    def _open(self, config):
        from airflow_provider_skynomad.jobs.controller import Controller
        from airflow_provider_skynomad.market.store.table import release_shared, shared_table

        cloud = _hooks.make_cloud(config)
        table = shared_table(config.market_url)  # one per triggerer process, not one per trigger
        try:
            table.create()
            return Controller.open(self.args, config, cloud, table, self.log), table
        except BaseException:
            release_shared(table)
            raise

    async def on_kill(self) -> None:
        """The deferred task was acted on: terminate the job's group once Airflow says the task ended.

        Airflow 3.3 calls this when a user marks the task failed or succeeded or clears it, and when
        its DAG run times out (the scheduler sets the task SKIPPED, the triggerer drops the unused
        trigger). It also calls it when a triggerer that missed its heartbeat finds its trigger
        handed to another triggerer: the task is still deferred then and the job must go on. So the
        task's state is asked first, and only an ended task (success, failed, skipped, ...) has its
        group and any launch in flight terminated. A cleared task (no state yet) and a failed lookup
        end nothing: `skynomad cleanup` in the probe DAG ends what a job that no longer runs left behind.
        """
        try:
            self.args.task.check_owns(self.args.job_id, "the trigger's arguments")
        except ValueError as exc:  # another task's job is never ended from here
            self.log.error("%s", exc)
            return
        state = await self._task_state()
        if state not in _ENDED_STATES:
            self.log.info(
                "trigger cancelled while the task is %s: the job's group keeps running",
                state or "without a known state",
            )
            return
        config = await SkyNomadHook(self.args.conn_id).aget_config()
        await asyncio.to_thread(self._end_job, config, state)

    def _end_job(self, config, state: str) -> None:
        from airflow_provider_skynomad.jobs.table import JobTable

        cloud = _hooks.make_cloud(config)
        with JobTable(config.market_url) as jobs:
            stored = jobs.load(self.args.job_id)
        if stored is None:
            return
        record = stored.record
        self.args.task.check_owns(record.job_id, "the job record table")
        handles = [record.group] if record.group else []
        if record.pending is not None:
            found = cloud.find(record.pending.request.client_token)
            handles += [found] if found else []
        for handle in {json.dumps(h.to_dict(), sort_keys=True): h for h in handles}.values():
            self.log.info("the task is %s: terminating group %s in %s", state, list(handle.instance_ids), handle.zone)
            cloud.terminate(handle)

    async def _task_state(self) -> str | None:
        """This task instance's state from the Airflow API server, None when it cannot be told."""
        ti = self.task_instance
        if ti is None:
            return None
        try:
            states = await asyncio.to_thread(_task_states, ti)
        except Exception as exc:  # noqa: BLE001 - an unknown state ends nothing
            self.log.warning("cannot read the task's state (%s): leaving the group to skynomad cleanup", exc)
            return None
        by_task = states.get(ti.run_id, {})
        key = ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
        state = by_task.get(key)
        return None if state is None else str(getattr(state, "value", state))


def _task_states(ti) -> dict:
    """In a thread: the task's states from the API server (its client's module is imported here too)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    return RuntimeTaskInstance.get_task_states(
        dag_id=ti.dag_id, map_index=ti.map_index, task_ids=[ti.task_id], run_ids=[ti.run_id]
    )


def _give_back(table) -> None:
    from airflow_provider_skynomad.market.store.table import release_shared

    release_shared(table)


async def _release(table) -> None:
    """Give the shared market table back in a thread: the last user closes its database connection.

    Shielded, so a trigger cancelled meanwhile still gives it back; a generator closed after its
    loop has ended (or once the loop's executor is shut down) gives it back inline.
    """
    try:
        pending = asyncio.get_running_loop().run_in_executor(None, _give_back, table)
    except RuntimeError:  # no running loop, or its default executor is shut down
        _give_back(table)
        return
    await asyncio.shield(pending)
