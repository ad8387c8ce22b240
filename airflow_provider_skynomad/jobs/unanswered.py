"""One rule for what does not answer: the database, the market table, the cloud API.

Why: a job whose group runs must not be given up because its status, its markets or its record
could not be read for a moment (a database restart, a throttled API). A step that could not be
done leaves the job as it is and is tried again at the next decision step; only so many steps in
a row fail the job, naming what did not answer. The trigger opening the controller, the
controller writing the record and the watch reading the group and the markets all count with
`Patience`, each with its own limit below.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_DB_STEPS = 5  # decision steps in a row the job's database may fail to answer before the job fails
MAX_API_STEPS = 3  # decision steps in a row the cloud API (or the market table) may leave unanswered


@dataclass
class Patience:
    """Steps in a row something did not answer, against the most it may (`limit`)."""

    limit: int
    misses: int = 0

    def missed(self) -> bool:
        """Count one more step without an answer; True when that was the last one allowed (give up)."""
        self.misses += 1
        return self.misses >= self.limit

    @property
    def last_chance(self) -> bool:
        """Whether the next miss is the last one allowed (its error is then raised, not retried)."""
        return self.misses + 1 >= self.limit

    def answered(self) -> None:
        """Something answered: the count starts again."""
        self.misses = 0


def first_line(exc: BaseException) -> str:
    """The database's own first line of an error, for a log line (the driver's text, not SQLAlchemy's)."""
    text = str(getattr(exc, "orig", exc)).strip()
    return text.splitlines()[0] if text else type(getattr(exc, "orig", exc)).__name__
