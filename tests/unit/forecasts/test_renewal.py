"""Up/down spell means: events ÷ exposure, censoring, unseen cells, priors, recency weighting."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_provider_skynomad.forecasts.renewal import PRIOR_DOWN_HOURS, PRIOR_UP_HOURS, spell_means


def _cycle(up: int, down: int, repeats: int) -> np.ndarray:
    return np.tile(np.r_[np.ones(up, bool), np.zeros(down, bool)], repeats)


def test_a_regular_market_gets_its_spell_lengths_back():
    usable = _cycle(6, 2, 200)[:, None]  # 1 h up, 20 min down at 10-minute steps
    spells = spell_means(usable, np.ones_like(usable), 1 / 6, half_life_hours=1e6)
    assert spells.up_hours[0] == pytest.approx(1.0, rel=0.02)
    assert spells.down_hours[0] == pytest.approx(1 / 3, rel=0.05)


def test_flaky_and_calm_markets_are_told_apart():
    flaky, calm = _cycle(2, 1, 100), _cycle(60, 1, 5)[:300]
    spells = spell_means(np.c_[flaky, calm], np.ones((300, 2), bool), 1 / 6)
    assert spells.up_hours[1] > 5 * spells.up_hours[0]


def test_unseen_cells_count_for_nothing():
    usable = _cycle(6, 2, 100)[:, None]
    seen = np.ones_like(usable)
    hidden = seen.copy()
    hidden[::2] = False  # every other tick unobserved: no spell boundary can be seen across a gap
    assert spell_means(usable, hidden, 1 / 6).up_hours[0] != spell_means(usable, seen, 1 / 6).up_hours[0]
    nothing = spell_means(usable, np.zeros_like(usable), 1 / 6)
    assert nothing.up_hours[0] == pytest.approx(PRIOR_UP_HOURS)
    assert nothing.down_hours[0] == pytest.approx(PRIOR_DOWN_HOURS)


def test_an_unfinished_spell_is_censored_not_ended():
    usable = np.ones((60, 1), bool)  # 10 h up, never lost: exposure but no event
    spells = spell_means(usable, np.ones_like(usable), 1 / 6, half_life_hours=1e6)
    assert spells.up_hours[0] > 10.0


def test_recent_behaviour_weighs_more():
    calm_then_flaky = np.r_[np.ones(600, bool), _cycle(2, 1, 100)][:, None]
    flaky_then_calm = np.r_[_cycle(2, 1, 100), np.ones(600, bool)][:, None]
    seen = np.ones_like(calm_then_flaky)
    assert spell_means(calm_then_flaky, seen, 1 / 6).up_hours[0] < spell_means(flaky_then_calm, seen, 1 / 6).up_hours[0]


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="matching"):
        spell_means(np.ones((3, 2), bool), np.ones((3, 1), bool), 1 / 6)
