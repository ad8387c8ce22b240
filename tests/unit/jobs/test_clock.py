"""The trigger's step clock: first look at once, then at the job's phase, a step apart; how late a
look is; and the live status on its two clocks."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.jobs.clock import (
    PUBLISH_EVERY_SECONDS,
    PUBLISH_MIN_SECONDS,
    StepClock,
    phase_of,
    step_wall_seconds,
)


class Wall:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_the_first_look_is_at_once_the_second_at_the_jobs_phase_then_a_step_apart():
    wall = Wall()
    clock = StepClock(step_wall=10.0, wall_per_hour=3600.0, phase=0.25, now=wall)
    tick = clock.begin()
    assert tick.late_seconds == 0.0 and tick.publish
    assert clock.end(tick, wanted=10.0) == pytest.approx(2.5)  # the phase: a quarter of a step
    wall.t += 2.5
    tick = clock.begin()
    assert tick.late_seconds == 0.0 and not tick.publish  # published 2.5 s ago: every 10 s
    assert clock.end(tick, wanted=10.0) == pytest.approx(10.0)


def test_a_late_look_counts_how_late_it_started_and_how_long_the_last_one_took():
    wall = Wall()
    clock = StepClock(step_wall=10.0, wall_per_hour=3600.0, phase=1.0, now=wall)
    tick = clock.begin()
    wall.t += 3.0  # the look took 3 s
    sleep = clock.end(tick, wanted=10.0)
    wall.t += sleep + 4.0  # the loop woke 4 s late
    tick = clock.begin()
    assert tick.late_seconds == pytest.approx(7.0) and tick.late_hours == pytest.approx(7.0 / 3600)


def test_a_workload_about_to_end_is_looked_at_sooner_but_not_back_to_back():
    wall = Wall()
    clock = StepClock(step_wall=10.0, wall_per_hour=12.0, phase=1.0, now=wall)
    clock.end(clock.begin(), wanted=10.0)
    wall.t += 10.0
    assert clock.end(clock.begin(), wanted=0.0) == 0.0  # never sooner than now
    assert clock.end(clock.begin(), wanted=0.5) == pytest.approx(0.5)


def test_the_status_is_published_on_the_faster_of_its_two_clocks():
    slow = StepClock(step_wall=10.0, wall_per_hour=3600.0)  # a real clock: every 10 s
    fast = StepClock(step_wall=10.0, wall_per_hour=12.0)  # 300x: a tenth of a cloud hour is 1.2 s
    assert slow.publish_every == PUBLISH_EVERY_SECONDS and fast.publish_every == pytest.approx(1.2)
    assert StepClock(step_wall=1.0, wall_per_hour=1.0).publish_every == PUBLISH_MIN_SECONDS


def test_the_phase_is_stable_per_job_and_a_step_is_capped():
    assert phase_of("job-a") == phase_of("job-a") and 0.0 < phase_of("job-b") <= 1.0
    assert step_wall_seconds(12.0, 1 / 6, None) == pytest.approx(2.0)
    assert step_wall_seconds(3600.0, 1 / 6, 60.0) == 60.0
