"""What one look at the job found (jobs/events.py): a kind from plain words is checked when made."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_provider_skynomad.jobs.events import EventKind, JobEvent


def test_a_kind_given_as_a_word_is_typed():
    event = JobEvent(kind="preempted", seq=3)
    assert event.kind is EventKind.PREEMPTED and event.seq == 3
    assert event.decision is None and event.reason == ""


def test_a_kind_no_step_acts_on_is_refused():
    with pytest.raises(ValueError, match="vanished"):
        JobEvent(kind="vanished", seq=1)


def test_an_event_cannot_be_changed_after_the_look():
    event = JobEvent(kind=EventKind.FINISHED, seq=1, elapsed_hours=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.seq = 2
