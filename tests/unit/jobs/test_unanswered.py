"""One rule for what does not answer: so many steps in a row, then the job fails."""

from __future__ import annotations

from sqlalchemy.exc import OperationalError

from airflow_provider_skynomad.jobs.unanswered import MAX_DB_STEPS, Patience, first_line


def test_patience_gives_up_on_the_limit_and_starts_again_on_an_answer():
    patience = Patience(3)
    assert not patience.missed() and not patience.missed() and patience.last_chance
    patience.answered()
    assert not patience.last_chance
    assert [Patience(MAX_DB_STEPS).missed() for _ in range(1)] == [False]
    patience = Patience(2)
    assert not patience.missed() and patience.missed() and patience.misses == 2


def test_the_databases_own_first_line_is_said():
    exc = OperationalError("SELECT 1", {}, Exception("server closed the connection\nmore"))
    assert first_line(exc) == "server closed the connection"
    assert first_line(ValueError("")) == "ValueError"
