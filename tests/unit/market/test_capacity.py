import numpy as np

from airflow_provider_skynomad.market.capacity import Holding, first_loss, kept, left, taken_back


def test_a_launch_gets_only_what_the_others_left():
    holdings = [Holding("a", 0.0, 8), Holding("b", 1.0, 4)]
    assert left(16, holdings) == 4
    assert left(10, holdings) == 0


def test_the_youngest_groups_are_taken_back_first_even_when_a_smaller_younger_one_would_fit():
    a, b, c = Holding("a", 0.0, 8), Holding("b", 1.0, 4), Holding("c", 2.0, 2)
    assert kept(10, [c, a, b]) == [a]
    assert {h.key for h in taken_back(10, [a, b, c])} == {"b", "c"}
    assert taken_back(14, [a, b, c]) == []


def test_ties_are_broken_by_key():
    x, y = Holding("x", 1.0, 4), Holding("y", 1.0, 4)
    assert kept(4, [y, x]) == [x]


def test_first_loss_counts_only_what_older_groups_hold():
    available = np.array([16, 16, 10, 16, 4])
    assert first_loss(available, np.array([8, 8, 8, 8, 8]), 4) == 2
    assert first_loss(available, np.zeros(5), 4) is None
    assert first_loss(available, np.array([8, 8, 0, 0, 0]), 4) is None


def test_first_loss_gives_the_same_answer_for_plain_sequences():
    available = [16, 16, 10, 16, 4]
    assert first_loss(available, [8, 8, 8, 8, 8], 4) == 2
    assert first_loss(available, [0] * 5, 4) is None
    assert first_loss(available, [8, 8, 0, 0, 0], 4) is None
