"""The timeline's vocabulary: its words are the ones stored records and evaluation reports already hold."""

from __future__ import annotations

import json

import pytest

from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd

# The words job records have been written with: changing one would leave old records unread.
STORED_NOTE_WORDS = {
    "start", "decide", "stay", "launch", "migrate", "release", "preempted", "no capacity", "cloud api",
    "stale market", "idle", "probe", "deadline pressure", "reaction lag", "slow start", "pace",
    "deadline risk", "cost revised", "finished", "failed",
}  # fmt: skip


def test_every_stored_word_is_a_kind_and_every_kind_a_stored_word():
    assert {kind.value for kind in NoteKind} == STORED_NOTE_WORDS


def test_a_kind_is_its_word_in_json_and_in_comparisons():
    assert json.dumps({"event": NoteKind.NO_CAPACITY}) == '{"event": "no capacity"}'
    assert NoteKind.DEADLINE_PRESSURE == "deadline pressure"
    assert f"{SegmentEnd.MIGRATED}" == "migrated"


@pytest.mark.parametrize(
    ("item", "kind"),
    [
        ({"event": "migrate"}, NoteKind.MIGRATE),
        ({"event": "workload output"}, None),  # another version's kind
        ({"event": ["not", "a", "word"]}, None),  # a hand-edited record's
        ({}, None),
    ],
)
def test_the_kind_of_a_note_is_read_or_none(item, kind):
    assert NoteKind.of(item) is kind


def test_only_decisions_and_stays_are_quiet():
    assert {kind for kind in NoteKind if kind.quiet} == {NoteKind.DECIDE, NoteKind.STAY}


def test_segment_ends_hold_the_live_jobs_and_the_replays_words():
    live = {"preempted", "migrated", "released", "finished", "failed"}  # jobs.record's segments
    replay = {"preempted", "moved", "idle", "finished", "deadline"}  # docs/evaluate.md's ended_by
    assert {end.value for end in SegmentEnd} == live | replay
    with pytest.raises(ValueError):
        SegmentEnd("gone")
