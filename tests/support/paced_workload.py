"""A fake workload for controller tests: it makes progress at its real pace on whatever group the
controller runs, after each group's cold start, and succeeds when its real work is done.

The tests step the controller as its trigger does, one decision step of cloud time at a time, and
call `work` before each step so the look sees the progress the fake cloud now reports.
"""

from __future__ import annotations

from airflow_provider_skynomad.clouds.base import GroupStatus

STEP = 1.0 / 6.0  # the jobs' decision step (10 minutes), in cloud hours


class PacedWorkload:
    """The progress of one job's workload on a `FakeCloud`, group after group.

    :param real_work_hours: the work it really takes (the declared work may differ).
    :param cold_start: hours each new group runs before its work starts counting.
    :param finish_hours: hours from its last checkpoint to its exit (writing its result).
    """

    def __init__(self, cloud, real_work_hours: float, cold_start: float, step: float = STEP, finish_hours: float = 0.0):
        self.cloud, self.real_work_hours, self.cold_start, self.step = cloud, real_work_hours, cold_start, step
        self.token, self.started = cloud.launches[-1].client_token, 0.0  # the group running and when it launched
        self.done, self.t = 0.0, 0.0
        self.finish_hours, self.worked_at = finish_hours, None  # when all the work was done

    def tick(self) -> float:
        """The cloud's clock one step on (the hours since the job's start)."""
        self.t += self.step
        return self.t

    def work(self, group) -> None:
        """The step's work on `group` (the record's group now), told to the cloud; succeeded when all is done."""
        t = self.t
        if group is not None and group.client_token != self.token:
            self.token, self.started = group.client_token, t - self.step
        if group is not None and self.cloud.status[self.token] is GroupStatus.RUNNING:
            self.done += max(0.0, t - max(self.started + self.cold_start, t - self.step))
        self.cloud.hours, self.cloud.progress_fraction = t, min(1.0, self.done / self.real_work_hours)
        if self.done >= self.real_work_hours and self.worked_at is None:
            self.worked_at = t - (self.done - self.real_work_hours)
        if self.worked_at is not None and t >= self.worked_at + self.finish_hours - 1e-9:
            self.cloud.status[self.token] = GroupStatus.SUCCEEDED
