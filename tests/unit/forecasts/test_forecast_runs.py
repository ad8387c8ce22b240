"""Run extraction: what counts as a preemption and what is only censored."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_provider_skynomad.forecasts.runs import extract_runs, in_progress_samples, run_age_ticks

# One character per tick: U = seen usable, D = seen not usable, . = not seen.


def history(*columns: str) -> tuple[np.ndarray, np.ndarray]:
    usable = np.array([[c == "U" for c in col] for col in columns]).T
    seen = np.array([[c != "." for c in col] for col in columns]).T
    return usable, seen


def test_preemption_needs_a_seen_unusable_next_tick():
    usable, seen = history("UUDUU.DUUU")
    runs = extract_runs(usable, seen, step_hours=0.5)
    assert runs.start_tick.tolist() == [0, 3, 7]
    assert runs.end_tick.tolist() == [2, 5, 10]
    assert runs.duration_hours.tolist() == [1.0, 1.0, 1.5]
    # Ended by D: preempted. Ended by an unseen tick (we migrated away): censored. End of history: censored.
    assert runs.preempted.tolist() == [True, False, False]
    # The first run began with the history; the last began right after a seen D (not truncated).
    assert runs.left_truncated.tolist() == [True, False, False]


def test_run_after_an_unseen_tick_is_left_truncated():
    usable, seen = history("D.UUD")
    runs = extract_runs(usable, seen, 1.0)
    assert runs.start_tick.tolist() == [2]
    assert runs.preempted.tolist() == [True]
    assert runs.left_truncated.tolist() == [True]


def test_unseen_usable_cells_carry_no_information():
    # "usable" under an unseen tick (stale data from the grid) must not extend or start a run.
    usable = np.array([[True, True, True, True]]).T
    seen = np.array([[True, False, True, True]]).T
    runs = extract_runs(usable, seen, 1.0)
    assert runs.start_tick.tolist() == [0, 2]
    assert runs.end_tick.tolist() == [1, 4]
    assert runs.preempted.tolist() == [False, False]


def test_runs_are_ordered_by_market_then_start():
    usable, seen = history("UDUD", "DUUU", "DDDD")
    runs = extract_runs(usable, seen, 1.0)
    assert runs.market.tolist() == [0, 0, 1]
    assert runs.start_tick.tolist() == [0, 2, 1]
    assert runs.preempted.tolist() == [True, True, False]
    assert len(runs) == 3


def test_empty_history_has_no_runs():
    runs = extract_runs(np.zeros((0, 3), bool), np.zeros((0, 3), bool), 1.0)
    assert len(runs) == 0


def test_run_age_ticks():
    usable, seen = history("UUD.UU")
    assert run_age_ticks(usable, seen)[:, 0].tolist() == [0, 1, -1, -1, 0, 1]


def test_samples_drop_cells_censored_before_the_cap():
    # step 1 h, cap 2 h. Run A (ticks 0-2) preempted at 3; run B (ticks 4-8) censored at the end.
    usable, seen = history("UUUDUUUUU")
    samples = in_progress_samples(usable, seen, 1.0, cap_hours=2.0)
    got = dict(zip(samples.tick.tolist(), samples.remaining_hours.tolist(), strict=True))
    # A: remaining 3, 2, 1 ticks -> capped 2, 2, 1 h. B: at ticks 4..7 the group is seen running
    # through t+1, so it had ≥ 2 h left -> 2 h; at tick 8 only 1 h is proven: unknown, dropped.
    assert got == {0: 2.0, 1: 2.0, 2: 1.0, 4: 2.0, 5: 2.0, 6: 2.0, 7: 2.0}
    assert samples.age_ticks.tolist() == [0, 1, 2, 0, 1, 2, 3]


@pytest.mark.parametrize(
    "usable, seen, step, message",
    [
        (np.ones((4, 2), bool), np.ones((4, 3), bool), 1.0, "seen has shape (4, 3) but usable has shape (4, 2)"),
        (np.ones((4, 2), bool), np.ones((4, 2), bool), -0.5, "step_hours must be a positive number of hours, got -0.5"),
        (np.ones((4, 2), bool), np.ones((4, 2), bool), 0, "step_hours must be a positive number"),
        (np.ones(4, bool), np.ones(4, bool), 1.0, "2-D (ticks × markets)"),
        (np.ones((4, 0), bool), np.ones((4, 0), bool), 1.0, "no markets"),
    ],
)
def test_invalid_history_is_rejected_with_a_clear_message(usable, seen, step, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        extract_runs(usable, seen, step)
