"""Faults injected into a running cluster, one after another, each when its moment has come.

A fault waits until the cluster is in the state it is about (a worker running a fleet task, a
triggerer holding triggers, jobs deferred), injects itself once, and may take a while to finish
(a triggerer kill is finished when the other triggerer holds every trigger the dead one had:
that wait is the recovery time). `Wave` triggers N fleet runs and steps the faults while it
waits for the runs to end.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from cluster import FLEET_DAG, HOG_DAG, PROBE_DAG, Cluster


def fleet_tasks(cluster: Cluster, state: str, hostname: str | None = None) -> int:
    query = "SELECT count(*) FROM task_instance WHERE dag_id=%s AND state=%s"
    args: tuple = (FLEET_DAG, state)
    if hostname is not None:
        query, args = query + " AND hostname=%s", (*args, hostname)
    return cluster.sql(query, args)[0][0]


@dataclass
class Fault:
    """One fault: `ready()` says when, `inject()` does it, `finished()` says when it is over."""

    name: str
    record: dict = field(default_factory=dict)
    injected_at: float | None = None
    done: bool = False

    def ready(self, cluster: Cluster) -> bool:
        return True

    def inject(self, cluster: Cluster) -> None:
        raise NotImplementedError

    def finished(self, cluster: Cluster) -> bool:
        return True


@dataclass
class KillWorker(Fault):
    """``kill -9`` of a Celery worker (and the task processes it runs) while it runs a fleet task:
    a job's start (decision, launch request, launch) or a resume; restarted at once."""

    victim: str = "worker-0"

    def ready(self, cluster):
        running = fleet_tasks(cluster, "running", self.victim)
        self.record["fleet_tasks_running_on_it"] = running
        return running >= 1

    def inject(self, cluster):
        cluster.kill(self.victim)


@dataclass
class KillTriggerer(Fault):
    """``kill -9`` of a triggerer while it holds deferred jobs' triggers; the other must take them
    over. Recovery: from the kill until no trigger is assigned to the dead triggerer any more."""

    victims: tuple[str, ...] = ("triggerer-0", "triggerer-1")
    min_triggers: int = 1
    hold_seconds: float = 60.0
    victim: str | None = None  # the triggerer killed: whichever holds deferred jobs' triggers

    def _job_id(self, cluster, hostname: str):
        rows = cluster.sql(
            "SELECT id FROM job WHERE job_type='TriggererJob' AND hostname=%s AND state='running' "
            "ORDER BY id DESC LIMIT 1",
            (hostname,),
        )
        return rows[0][0] if rows else None

    def ready(self, cluster):
        # Each job defers once and its trigger controls it to the end, so one triggerer may hold
        # every trigger: the victim is the one that holds the most.
        held = {}
        for hostname in self.victims:
            job_id = self._job_id(cluster, hostname)
            if job_id is not None:
                held[hostname] = (
                    cluster.sql("SELECT count(*) FROM trigger WHERE triggerer_id=%s", (job_id,))[0][0],
                    job_id,
                )
        if not held:
            return False
        self.victim = max(held, key=lambda h: held[h][0])
        count, self.job_id = held[self.victim]
        self.record["triggers_held"], self.record["victim"] = count, self.victim
        return count >= self.min_triggers

    def inject(self, cluster):
        self.trigger_ids = [r[0] for r in cluster.sql("SELECT id FROM trigger WHERE triggerer_id=%s", (self.job_id,))]
        cluster.held.add(self.victim)
        cluster.kill(self.victim)

    def finished(self, cluster):
        left = cluster.sql("SELECT count(*) FROM trigger WHERE triggerer_id=%s", (self.job_id,))[0][0]
        waited = time.monotonic() - self.injected_at
        if left == 0 or waited > self.hold_seconds:
            self.record["recovery_seconds"] = round(waited, 2) if left == 0 else None
            self.record["triggers_never_taken_over"] = left
            # Of the dead triggerer's triggers, those another triggerer runs now (the rest fired
            # just before the kill, or their task has resumed since: their rows are gone).
            self.record["taken_over"] = cluster.sql(
                "SELECT count(*) FROM trigger WHERE id = ANY(%s) AND triggerer_id IS NOT NULL", (self.trigger_ids,)
            )[0][0]
            cluster.held.discard(self.victim)  # back up (the service manager's restart)
            return True
        return False


@dataclass
class KillScheduler(Fault):
    """``kill -9`` of the scheduler while jobs are deferred; restarted after `down_seconds`."""

    down_seconds: float = 3.0

    def ready(self, cluster):
        return fleet_tasks(cluster, "deferred") >= 1

    def inject(self, cluster):
        cluster.held.add("scheduler")
        cluster.kill("scheduler")

    def finished(self, cluster):
        if time.monotonic() - self.injected_at >= self.down_seconds:
            cluster.held.discard("scheduler")
            return True
        return False


@dataclass
class RestartPostgres(Fault):
    """PostgreSQL (metadata DB and market table) restarted while jobs are deferred, i.e. while their
    triggers run decision steps that read the market table."""

    min_deferred: int = 2

    def ready(self, cluster):
        return fleet_tasks(cluster, "deferred") >= self.min_deferred

    def inject(self, cluster):
        # In a thread: the harness's own DB polls fail while the server is down; the wave loop goes on.
        def restart():
            self.record["restart_seconds"] = round(cluster.pg.restart(), 2)

        self._thread = threading.Thread(target=restart, daemon=True)
        self._thread.start()

    def finished(self, cluster):
        return not self._thread.is_alive()


@dataclass
class RestartPostgresUnderProbes(Fault):
    """A probe DAG run triggered while the jobs run, and PostgreSQL restarted once its tasks are
    queued or running (probing and writing the market table): a task that loses its connection
    fails, its retry writes its rows. Over when the restart is; the run itself is waited for after."""

    run_id: str | None = None

    def ready(self, cluster):
        return fleet_tasks(cluster, "deferred") >= 1

    def inject(self, cluster):
        self.run_id = cluster.trigger(PROBE_DAG)
        self._thread: threading.Thread | None = None

    def finished(self, cluster):
        if self._thread is None:
            busy = cluster.sql(
                "SELECT count(*) FROM task_instance WHERE dag_id=%s AND run_id=%s AND state IN ('queued', 'running')",
                (PROBE_DAG, self.run_id),
            )[0][0]
            if not busy:
                return False
            self.record["tasks_busy"] = busy

            def restart():
                self.record["restart_seconds"] = round(cluster.pg.restart(), 2)

            self._thread = threading.Thread(target=restart, daemon=True)
            self._thread.start()
        return not self._thread.is_alive()


@dataclass
class SaturatePool(Fault):
    """Every worker slot taken by another team's tasks while jobs are deferred, so resumes wait."""

    seconds: float = 20.0

    def ready(self, cluster):
        return fleet_tasks(cluster, "deferred") >= 1

    def inject(self, cluster):
        slots = cluster.workers * cluster.worker_concurrency
        self.record["hog_tasks"] = slots
        self.record["hog_run"] = cluster.trigger(HOG_DAG, {"tasks": slots, "seconds": self.seconds})


@dataclass
class Wave:
    """N fleet runs, the faults injected one after another (at least `gap_seconds` apart)."""

    cluster: Cluster
    work_hours: list[float]
    faults: list[Fault] = field(default_factory=list)
    gap_seconds: float = 3.0
    log: list[str] = field(default_factory=list)

    def run(self, timeout: float) -> dict[str, str]:
        self.run_ids = [self.cluster.trigger(FLEET_DAG, {"work_hours": h}) for h in self.work_hours]
        self.began = time.monotonic()
        self._queue, self._last = list(self.faults), self.began
        return self.cluster.wait_runs(FLEET_DAG, self.run_ids, timeout, during=self._step)

    def _step(self, elapsed: float) -> None:
        if not self._queue:
            return
        fault = self._queue[0]
        try:
            if fault.injected_at is None:
                if time.monotonic() - self._last >= self.gap_seconds and fault.ready(self.cluster):
                    fault.injected_at = time.monotonic()
                    fault.record["at_seconds"] = round(fault.injected_at - self.began, 1)
                    fault.inject(self.cluster)
                    self.log.append(f"{fault.injected_at - self.began:6.1f} s  {fault.name}: injected {fault.record}")
            elif fault.finished(self.cluster):
                fault.done, self._last = True, time.monotonic()
                self._queue.pop(0)
                self.log.append(f"{self._last - self.began:6.1f} s  {fault.name}: over {fault.record}")
        except Exception as exc:  # noqa: BLE001 - e.g. the database is restarting: look again next second
            self.log.append(f"{time.monotonic() - self.began:6.1f} s  {fault.name}: cannot look yet ({exc!r:.80})")
