"""The words a job's history is written in: the kinds of its timeline notes and how a segment ended.

One vocabulary for the planner's replays (`planner.result`), the job's record (`jobs.record`), what
it says (`jobs.narrate`, `jobs.summary`) and the pages (`plugin.facts`). It lives in the planner,
the lowest of those layers, so the replays can use it without importing the job runtime.

Both are str-valued enums: a member is its word (``NoteKind.LAUNCH == "launch"``), so the JSON of
a job record and of an evaluation report says the same words it always said, and a record written
before these types existed loads as it is. Code compares members, never spelled-out words.
"""

from __future__ import annotations

import enum


class NoteKind(enum.StrEnum):
    """What one timeline note of a job is about (the record's ``"event"`` field)."""

    START = "start"  # the job started: its work, deadline, zones and policy
    DECIDE = "decide"  # what the planner wanted and why (its numbers: for the page's table, not the story)
    STAY = "stay"  # the planner kept the running group
    LAUNCH = "launch"  # a group was launched without carrying a checkpoint
    MIGRATE = "migrate"  # a group was launched and the checkpoint copied to it from another zone
    RELEASE = "release"  # the planner let a group go without a launch in its place
    PREEMPTED = "preempted"  # the cloud took the group back
    NO_CAPACITY = "no capacity"  # a launch found no capacity
    CLOUD_API = "cloud api"  # the cloud API did not take a launch
    STALE_MARKET = "stale market"  # a market's rows were late (written by older versions, still said)
    IDLE = "idle"  # no group: the job waits
    PROBE = "probe"  # a capacity probe and what it found
    DEADLINE_PRESSURE = "deadline pressure"  # the job went to on-demand to keep its deadline
    REACTION_LAG = "reaction lag"  # the controller acted late; the planner keeps a margin for it
    SLOW_START = "slow start"  # a group's first checkpoint came later than the declared cold start
    PACE = "pace"  # the checkpoints say the work runs slower or faster than declared
    DEADLINE_RISK = "deadline risk"  # even on-demand from now would finish late
    COST_REVISED = "cost revised"  # the final cost is below what was said while the job ran
    FINISHED = "finished"  # the workload finished
    FAILED = "failed"  # the group (or the job) failed

    @classmethod
    def of(cls, item: dict) -> NoteKind | None:
        """The kind of timeline note `item`, or None when this version has no such kind (a record
        written by another version, or a hand-edited one): callers then show its fields plainly."""
        try:
            return cls(item.get("event"))
        except (TypeError, ValueError):
            return None

    @property
    def quiet(self) -> bool:
        """Kept in the record but not told as the job's story (log lines, the page's story list)."""
        return self in (NoteKind.DECIDE, NoteKind.STAY)


class SegmentEnd(enum.StrEnum):
    """How a stretch on one group (a live job's) or one option (a replay's) ended.

    A live job's record and a replay's report each keep the words their JSON has always had: where
    a live job's group was replaced by a launch it says MIGRATED, a replay says MOVED; where the
    planner let the group go and waited, RELEASED and IDLE.
    """

    PREEMPTED = "preempted"  # the cloud took the instances back
    FINISHED = "finished"  # the workload finished on it
    FAILED = "failed"  # the group failed (live jobs)
    MIGRATED = "migrated"  # a live job's group replaced by another launch (in its zone or elsewhere)
    RELEASED = "released"  # a live job's group let go by the planner, nothing launched in its place
    MOVED = "moved"  # a replay switched to another option
    IDLE = "idle"  # a replay let the option go and waited
    DEADLINE = "deadline"  # a replay reached the deadline unfinished on it
