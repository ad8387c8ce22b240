"""The runtime measures the real work from the checkpoints: a workload 25 % slower than declared
is said at once and planned with, so the safety net switches in time; a faster one never shows
more than 100 %."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.clouds.base import GroupStatus
from tests.support.paced_workload import PacedWorkload


def _drive(job, cloud, real_work_hours: float, cold_start: float = 0.2, until: float = 12.0, spot_until=None):
    """Run the controller step by step; the fake workload makes progress at its real pace on
    whatever group runs, after each group's cold start. From `spot_until` on, spot is gone: the
    group running then is preempted and no zone grants spot again. The outcome and the record."""
    controller = job.controller()
    workload = PacedWorkload(cloud, real_work_hours, cold_start)
    while workload.t < until:
        t = workload.tick()
        if spot_until is not None and t >= spot_until and not cloud.full:
            cloud.full.update(request.zone for request in cloud.launches)
            cloud.full.update(job.record().zones)
            if controller.steps.record.group is not None and controller.steps.record.group.spot:
                cloud.status[workload.token] = GroupStatus.PREEMPTED
        workload.work(controller.steps.record.group)
        outcome = controller.step().outcome
        if outcome is not None:
            return outcome, job.record()
    raise AssertionError("the job never ended")


def test_a_workload_slower_than_declared_is_said_and_its_deadline_still_met(started, cloud):
    job = started(work_hours=4.0, deadline_hours=6.0)  # it really needs 5 h: all on-demand takes 5.2 h
    outcome, record = _drive(job, cloud, real_work_hours=5.0, spot_until=3.0)
    assert outcome.kind.value == "finished" and record.summary["deadline_met"], record.summary
    first, *_, last = [n for n in record.timeline if n["event"] == "pace"] * 2
    assert first["at_hours"] < 2.0  # said early, not at the end
    assert last["ratio"] == pytest.approx(1.25, abs=0.05)
    assert record.job.work_hours >= 5.0  # planned with the measured work, not the declared 4 h


def test_with_the_declared_work_planned_with_the_same_job_misses(started, cloud, monkeypatch):
    """What the measured pace prevents: after spot is gone the job waits for it until the declared
    4 h of work just fit, and the 5 h it really needs then cannot."""
    from airflow_provider_skynomad.planner.pace import Pace

    monkeypatch.setattr(Pace, "work_hours_bound", property(lambda self: self.declared_work_hours))
    monkeypatch.setattr(Pace, "ratio_to_declared", lambda self: None)
    job = started(work_hours=4.0, deadline_hours=6.0)
    outcome, record = _drive(job, cloud, real_work_hours=5.0, spot_until=3.0)
    assert outcome.kind.value in ("finished", "deadline_missed") and not record.summary["deadline_met"]


def test_a_workload_faster_than_declared_finishes_sanely(started, cloud, caplog):
    import logging

    job = started(work_hours=5.0, deadline_hours=7.0)  # it really needs 4 h
    with caplog.at_level(logging.INFO, logger="test.jobs"):
        outcome, record = _drive(job, cloud, real_work_hours=4.0)
    assert outcome.kind.value == "finished" and record.summary["deadline_met"]
    assert record.summary["elapsed_hours"] < 5.0
    assert all(n.get("ratio", 1.0) <= 1.0 for n in record.timeline if n["event"] == "pace")
    said = [r for r in caplog.records if "faster than declared" in r.getMessage()]
    assert said and all(r.levelno == logging.INFO for r in said)  # good news is no warning


def test_even_on_demand_too_late_is_said_hours_before_the_deadline(started, cloud, monkeypatch):
    called = []
    monkeypatch.setattr(
        "airflow_provider_skynomad.jobs.learn.call_deadline_risk",
        lambda path, record, task, message, log: called.append(message),
    )
    job = started(work_hours=4.0, deadline_hours=5.0)  # it really needs 6 h: no plan can make 5 h
    outcome, record = _drive(job, cloud, real_work_hours=6.0)
    (risk,) = [n for n in record.timeline if n["event"] == "deadline risk"]
    assert risk["at_hours"] < 2.5 and len(called) == 1 and "DEADLINE AT RISK" in called[0]
    assert outcome.kind.value == "deadline_missed"
    assert "the work measured is more than declared" in called[0]


def test_a_deadline_at_risk_names_lost_time_when_the_work_is_as_declared():
    """A job on its declared pace that two preemptions and a late triggerer pushed past the point
    where on-demand still makes it must not blame the work (the standalone recipe at trace hour 120:
    measured 8.03 h of 8 h declared)."""
    from airflow_provider_skynomad.jobs.narrate import say

    item = {"at_hours": 4.31, "event": "deadline risk", "finish_h": 10.03, "deadline_h": 10.0}
    lost = say({**item, "cause": "time lost"})
    assert "DEADLINE AT RISK" in lost and "preemptions, relaunches and waiting" in lost
    assert "more than declared" not in lost
    assert "the work measured is more than declared" in say({**item, "cause": "slower work"})


def test_every_group_runs_the_command_of_the_first_whatever_the_pace_says(started, cloud):
    """The bundled workload is paced to the declared work: a relaunch after the pace moved the
    planning bound must run the same command, or it would refuse the first group's checkpoints."""
    job = started(work_hours=4.0, deadline_hours=6.0)
    _drive(job, cloud, real_work_hours=5.0, spot_until=3.0)
    commands = {request.command for request in cloud.launches}
    assert len(cloud.launches) >= 2 and len(commands) == 1, commands


def test_a_faster_workload_on_a_tight_deadline_raises_no_false_alarm(started, cloud):
    """The pace is said at a look between two actions: the work left is the share the checkpoints
    do not prove at that look, not at the last action (hours earlier, with nothing done yet)."""
    job = started(work_hours=3.0, deadline_hours=3.6)  # it really needs 2.5 h
    outcome, record = _drive(job, cloud, real_work_hours=2.5)
    assert outcome.kind.value == "finished" and record.summary["deadline_met"]
    assert not [n for n in record.timeline if n["event"] == "deadline risk"], record.timeline
    for note in (n for n in record.timeline if n["event"] == "pace"):
        assert note["left_h"] < note["declared_left_h"] < 3.0, note  # faster, and some work already done


def test_the_pace_is_said_as_measured_with_the_planning_margin_apart_at_warning(started, cloud, caplog):
    """A workload 25 % slower: the line says 25 % (the checkpoints' estimate), and the bound the
    planner plans with beside it as a margin, never the bound as if it were the measurement."""
    import logging

    job = started(work_hours=4.0, deadline_hours=6.0)
    with caplog.at_level(logging.INFO, logger="test.jobs"):
        _drive(job, cloud, real_work_hours=5.0, spot_until=3.0)
    record = job.record()
    first = next(n for n in record.timeline if n["event"] == "pace")
    assert first["ratio"] == pytest.approx(1.25, abs=0.01)  # what the checkpoints measured
    assert first["planning_ratio"] > first["ratio"]  # the bound, kept apart, with its margin
    # The hours agree with the ratios they stand beside.
    assert first["left_h"] == pytest.approx(first["declared_left_h"] * first["ratio"], abs=0.02)
    assert first["planned_left_h"] == pytest.approx(first["declared_left_h"] * first["planning_ratio"], abs=0.02)
    (line,) = [r for r in caplog.records if "than declared" in r.getMessage()][:1]
    assert line.levelno == logging.WARNING
    text = line.getMessage()
    assert "runs 25 % slower than declared" in text, text
    margin = round(100 * (first["planning_ratio"] - 1))
    assert f"planning with up to {margin} % slower ({first['planned_left_h']:.1f} h left) to be safe" in text, text


def test_the_pace_words_keep_measurement_and_margin_apart():
    from airflow_provider_skynomad.jobs.narrate import say

    item = {"at_hours": 1.0, "event": "pace", "ratio": 1.25, "planning_ratio": 1.32, "left_h": 6.0}
    text = say({**item, "planned_left_h": 6.34, "declared_left_h": 4.8})
    assert text == (
        "[t=1.00 h] the workload runs 25 % slower than declared: about 6.0 h of work left, not 4.8 h; "
        "planning with up to 32 % slower (6.3 h left) to be safe"
    )
    same = say({**item, "planning_ratio": 1.25, "planned_left_h": 6.0, "declared_left_h": 4.8})
    assert same.endswith("not 4.8 h; planning with that")
    faster = {"at_hours": 1.0, "event": "pace", "ratio": 0.8, "planning_ratio": 1.0, "left_h": 3.2}
    text = say({**faster, "planned_left_h": 4.0, "declared_left_h": 4.0})
    assert "runs 20 % faster than declared: about 3.2 h of work left, not 4.0 h" in text
    assert text.endswith("planning with 4.0 h left until more checkpoints confirm it")
