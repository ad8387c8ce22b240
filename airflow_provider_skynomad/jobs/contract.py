"""What the worker hands the trigger, and the one answer the trigger gives back: typed on both sides.

The worker validates, starts the job (its first launch), writes the record to the job table
(`jobs.table`) and defers with a `ControllerArgs`: the trigger's keyword arguments are exactly
``ControllerArgs.to_kwargs()``, and nothing else crosses. From then on the trigger controls the
job (`jobs.controller`) and wakes the worker once, at the end, with an `Outcome`.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass

from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.params import JobParams
from airflow_provider_skynomad.jobs.record import job_id_for, task_key_for, task_key_of

MIN_EVENT_SECONDS = 2.0
# Airflow's task supervisor waits for its task's output at most this long between looks (its
# `[workers] min_heartbeat_interval`), so it can notice a deferring task's exit that much late.
DEFAULT_SUPERVISOR_WAIT_SECONDS = 5.0


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

    @property
    def key(self) -> str:
        """The task instance's key: the prefix of every job id it may start, resume, control or end."""
        return task_key_for(self.dag_id, self.run_id, self.task_id, self.map_index)

    def owns(self, job_id: str | None) -> bool:
        """Whether `job_id` is a job of this task instance (its task key is this task's)."""
        return isinstance(job_id, str) and task_key_of(job_id) == self.key

    def check_owns(self, job_id: str | None, where: str) -> str:
        """`job_id` when it is this task instance's job, else `SkyNomadInputError` naming `where` it was found."""
        if self.owns(job_id):
            return job_id
        raise SkyNomadInputError(
            f"{where} names SkyNomad job {shown_id(job_id)}, which is not this task's job (task "
            f"{self.dag_id}/{self.run_id}/{self.task_id}[{self.map_index}] starts jobs {self.key}-*): nothing was "
            "terminated, launched or written. Clear this task's state (task_state_store) to start a new job."
        )


def shown_id(job_id) -> str:
    """A job id found where others can write, as an error may quote it: short, and quoted as data."""
    text = repr(job_id)
    return text if len(text) <= 80 else text[:77] + "..."


class OutcomeKind(enum.StrEnum):
    """How a controlled job ended, as the worker is told.

    FINISHED: the workload finished (the summary is in the record; a missed deadline with
    ``on_deadline_miss="warn"`` is FINISHED too). DEADLINE_MISSED: it finished late and the task
    must fail. FAILED: the group failed or the job could not go on (the message says why).
    """

    FINISHED = "finished"
    DEADLINE_MISSED = "deadline_missed"
    FAILED = "failed"


@dataclass(frozen=True)
class Outcome:
    """The trigger's one event: how the job ended, in words for the task's log."""

    kind: OutcomeKind
    job_id: str
    message: str = ""

    def to_dict(self) -> dict:
        """The outcome as plain data: a `TriggerEvent` payload crosses processes as JSON."""
        return {"kind": self.kind.value, "job_id": self.job_id, "message": self.message}

    @classmethod
    def from_dict(cls, data: dict) -> Outcome:
        """The outcome a trigger event carries; a malformed one is an input error naming what is wrong."""
        try:
            kind = OutcomeKind(data["kind"])
        except (KeyError, ValueError, TypeError):
            raise ValueError(f"not a SkyNomad job outcome: {data!r}") from None
        return cls(kind, str(data.get("job_id", "")), str(data.get("message") or ""))


@dataclass(frozen=True)
class ControllerArgs:
    """Everything the trigger needs to control one job; its kwargs are `to_kwargs()` of this.

    :param job_id: the job's row in the job table.
    :param conn_id: the `skynomad` connection (market database + cloud), resolved in the triggerer.
    :param params: the operator's validated arguments.
    :param task: the task instance (tags, client tokens, the cleared-or-retried rule).
    :param min_event_seconds: the outcome is sent no sooner than this after the trigger starts
        (`first_event_hold_seconds`, on the worker's supervisor's clock).
    """

    job_id: str
    conn_id: str
    params: JobParams
    task: TaskIdentity
    min_event_seconds: float = MIN_EVENT_SECONDS

    def to_kwargs(self) -> dict:
        """The trigger's keyword arguments: Airflow stores them as JSON, so only plain data crosses."""
        return {**asdict(self), "params": self.params.to_dict()}

    @classmethod
    def from_kwargs(cls, kwargs: dict) -> ControllerArgs:
        """The arguments as the trigger receives them back from Airflow, typed again."""
        return cls(
            job_id=str(kwargs["job_id"]),
            conn_id=str(kwargs["conn_id"]),
            params=JobParams.from_dict(kwargs["params"]),
            task=TaskIdentity(**kwargs["task"]),
            min_event_seconds=float(kwargs.get("min_event_seconds", MIN_EVENT_SECONDS)),
        )


def first_event_hold_seconds(try_number: int = 1) -> float:
    """The `min_event_seconds` a worker gives the trigger it defers to (read where that worker runs).

    A deferring task's process exits at once, but its supervisor notices only when its wait for the
    task's output ends, up to `[workers] min_heartbeat_interval` (5 s) later, and the scheduler reads
    the exit in its next loop: an event before that can cost the task a try (apache/airflow#72716).
    In `airflow standalone` on a busy box exits were recorded up to 7.0 s after the deferral. So:
    that wait, MIN_EVENT_SECONDS for the exit and MIN_EVENT_SECONDS for the scheduler's loop, and
    MIN_EVENT_SECONDS more for each retry (up to three): a try lost to the race was on a slow box.
    The hold delays only the news of the end: the trigger has already acted.

    `dag.test()` runs the task and its trigger in one process (Airflow's in-process test
    supervisor): there is no exit to record and no scheduler to race, so only the short hold of
    MIN_EVENT_SECONDS per try (up to four) is kept.
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
