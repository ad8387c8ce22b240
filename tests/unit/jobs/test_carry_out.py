"""Carrying out a decision returns what happened (`Carried`): the record holds it, every request was
saved before it was sent, and the caller shares the observations and stops the job when it must."""

from __future__ import annotations

from airflow_provider_skynomad.clouds.retry import CloudApiError
from airflow_provider_skynomad.jobs.carry_out import carry_out
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option


class Saves:
    """A store that keeps what each save saw: the pending launch's token, or None."""

    durable = False

    def __init__(self):
        self.pending: list[str | None] = []

    def save(self, record):
        self.pending.append(record.pending.request.client_token if record.pending else None)

    def save_status(self, status):
        pass


def _carry(started, cloud, options):
    job = started(work_hours=4.0)
    run = job.controller().steps.run
    record, view = run.record, run.view()
    decision = Decision(tuple(options(record, view)), reason="test")
    store = Saves()
    carried = carry_out(record, cloud, view, decision, 1.0, store, run.workload())
    return record, store, carried


def _spot_elsewhere(record, view, count=2):
    zones = [m for m in view.markets if m.zone != record.group.zone][:count]
    return [Option(m.key, Mode.SPOT) for m in zones]


def test_a_full_zone_is_an_observation_for_the_caller_and_the_next_option_launches(started, cloud):
    def options(record, view):
        tries = _spot_elsewhere(record, view)
        cloud.full.add(view.markets[view.index(tries[0].market)].zone)
        return tries

    record, store, carried = _carry(started, cloud, options)
    assert carried.stopped is None and carried.result.launched
    first, second = cloud.launches[-2:]
    assert store.pending[:3] == [first.client_token, None, second.client_token]  # saved before each send
    assert carried.observations[0].available == 0
    assert carried.observations[-1].available == record.job.instances
    assert record.group.client_token == second.client_token and record.failed_launches == 1


def test_a_cloud_api_that_refuses_every_launch_stops_a_job_with_nothing_running(started, cloud, monkeypatch):
    def refuse(request):
        raise CloudApiError("throttled")

    def options(record, view):
        tries = _spot_elsewhere(record, view)
        record.group = None  # nothing runs: a refused move cannot keep the job where it is
        monkeypatch.setattr(cloud, "launch", refuse)
        return tries

    record, store, carried = _carry(started, cloud, options)
    assert carried.result is None and "throttled" in carried.stopped and "nothing of this job" in carried.stopped
    assert carried.observations == []  # a throttled API says nothing about spot capacity
    assert [n["event"] for n in record.timeline].count("cloud api") == 2 and store.pending[-1] is None
