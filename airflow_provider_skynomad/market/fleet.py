"""What a job sees of its own deployment: the spot capacity the other jobs hold and claim in each market.

Jobs of one deployment compete for the same spot capacity (market.capacity has the rule: a launch
gets only what is left, the youngest groups are taken back first). A job that plans as if it were
alone reads one market table and one forecast like every other job, and they all pick the same
cheapest market. `Fleet` is the shared fact that lets each job plan for the capacity left to *it*:
what the others hold (and are launching) per market, when each group launched (its place in the
youngest-first order), and which markets the others wait for, with their slack, so that a job with
more slack can leave a scarce market to one with less. Each job still decides alone; nothing here
schedules anyone.

Built from plain rows, as the runtime's live job table gives them (`Fleet.from_rows`), one per job:

- ``job_id`` (str): the job; the row of the job that plans (``me``) is its own, not the fleet's.
- ``market`` (str): a market key of the market view (zone, or zone:instance_type); may be None
  for modes that name no market.
- ``mode`` (str): ``"spot"`` a spot group runs there and holds ``count``; ``"launching"`` a spot
  launch is under way there (held, the youngest); ``"waiting"`` the job wants spot there and holds
  none: a claim only; ``"on-demand"`` or ``"idle"``: holds no spot capacity (ignored here).
- ``count`` (int ≥ 1): instances held or wanted (the gang size); a reader of rows other jobs
  wrote bounds it by the largest gang a job may ask for (`claim_of`'s ``max_count``).
- ``since`` (number, datetime or ISO-8601 string): when the group launched (or the launch started,
  or the wait began); any clock shared by the rows, only the order matters. Required for
  ``spot`` and ``launching``.
- ``slack_hours`` (number): the job's slack now, deadline − now − remaining work, in hours.

Pure: numpy arrays over the view's markets, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from airflow_provider_skynomad.exceptions import FleetRowError as FleetRowError

HOLDING_MODES = ("spot", "launching")  # modes that hold spot capacity
MODES = (*HOLDING_MODES, "waiting", "on-demand", "idle")
_CODE = {mode: code for code, mode in enumerate(MODES)}
WAITING = _CODE["waiting"]


@dataclass(frozen=True)
class Claim:
    """One other job's row: it holds (spot, launching) or wants (waiting) `count` instances of `market`."""

    job_id: str
    market: str | None
    mode: str
    count: int
    since: float
    slack_hours: float


class Fleet:
    """The other jobs of this deployment, per market of the view, and this job's own place among them.

    :param keys: the view's market keys (column order of every per-market array).
    :param market: per other job, its market's column (-1: none).
    :param mode: per other job, its mode's code (index into `MODES`).
    :param count, since, slack_hours: per other job, as in the rows.
    :param job_ids: per other job, its id.
    :param own_since: when this job's own running spot group launched, on the rows' clock
        (None: unknown; then every other group counts as older than it).
    """

    def __init__(
        self,
        keys: Sequence[str],
        market: np.ndarray,
        mode: np.ndarray,
        count: np.ndarray,
        since: np.ndarray,
        slack_hours: np.ndarray,
        job_ids: Sequence[str] = (),
        own_since: float | None = None,
    ):
        self.keys = list(keys)
        self.market = np.asarray(market, dtype=np.int64)
        self.mode = np.asarray(mode, dtype=np.int64)
        self.count = np.asarray(count, dtype=np.int64)
        self.since = np.asarray(since, dtype=float)
        self.slack_hours = np.asarray(slack_hours, dtype=float)
        self.job_ids = list(job_ids)
        self.own_since = own_since
        self._holding = (self.mode < len(HOLDING_MODES)) & (self.market >= 0)

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping], markets: Sequence, me: str | None = None) -> Fleet:
        """A fleet from live job-table rows (fields in the module docstring).

        :param markets: the view's markets: keys, or objects with a `key` (market.grid.Market).
        :param me: the planning job's id: its row gives `own_since`, and it is not one of the others.
        A row naming a market outside `markets` is another instance type's or zone's: it holds
        nothing this job could use, and is left out.
        """
        keys = [m if isinstance(m, str) else m.key for m in markets]
        column = {key: i for i, key in enumerate(keys)}
        others: list[Claim] = []
        own_since = None
        seen_ids: set[str] = set()
        for n, row in enumerate(rows):
            claim = claim_of(row, n)
            if claim.job_id in seen_ids:
                raise FleetRowError(f"row {n}: job_id {claim.job_id!r} appears twice; give one row per job")
            seen_ids.add(claim.job_id)
            if claim.job_id == me:
                if claim.mode in HOLDING_MODES:
                    own_since = claim.since
                continue
            others.append(claim)
        inside = [c for c in others if c.market is None or c.market in column]
        return cls(
            keys,
            np.array([column[c.market] if c.market is not None else -1 for c in inside], dtype=np.int64),
            np.array([_CODE[c.mode] for c in inside], dtype=np.int64),
            np.array([c.count for c in inside], dtype=np.int64),
            np.array([c.since for c in inside], dtype=float),
            np.array([c.slack_hours for c in inside], dtype=float),
            [c.job_id for c in inside],
            own_since,
        )

    def claims(self) -> list[Claim]:
        """The other jobs' rows, as read."""
        return [
            Claim(
                self.job_ids[j] if j < len(self.job_ids) else str(j),
                self.keys[m] if m >= 0 else None,
                MODES[c],
                int(n),
                float(s),
                float(slack),
            )
            for j, (m, c, n, s, slack) in enumerate(
                zip(self.market, self.mode, self.count, self.since, self.slack_hours, strict=True)
            )
        ]

    @property
    def held(self) -> np.ndarray:
        """Per market: instances the other jobs hold or are launching now."""
        return self._per_market(self._holding)

    def held_before(self, market: int, since: float | None) -> int:
        """Instances the other jobs hold in column `market` in groups older than one launched at `since`.

        By the youngest-first rule only these come before that group; None (a launch now, or an
        unknown launch time): every group there.
        """
        mine = self._holding & (self.market == market)
        if since is not None:
            mine &= self.since < since
        return int(self.count[mine].sum())

    @property
    def wanting_spot(self) -> int:
        """Instances the other jobs hold, launch or wait for on spot, in this view's markets."""
        rows = (self._holding | (self.mode == WAITING)) & (self.market >= 0)
        return int(self.count[rows].sum())

    def waited_for(self, slack_hours: float) -> np.ndarray:
        """Per market: instances other jobs with less slack than `slack_hours` wait for (claims to yield to)."""
        return self._per_market((self.mode == WAITING) & (self.market >= 0) & (self.slack_hours < slack_hours))

    def _per_market(self, rows: np.ndarray) -> np.ndarray:
        return np.bincount(self.market[rows], weights=self.count[rows], minlength=len(self.keys)).astype(np.int64)


def claim_of(row: Mapping, n: int = 0, max_count: int | None = None) -> Claim:
    """One row checked field by field (row `n` of its list); the error names the row and the field.

    A reader of rows other jobs wrote checks each alone, to leave out a bad one rather than all.
    """
    if not isinstance(row, Mapping):
        raise FleetRowError(f"row {n}: expected a mapping of fields, got {type(row).__name__}")
    missing = [f for f in ("job_id", "mode", "count", "slack_hours") if f not in row]
    if missing:
        raise FleetRowError(f"row {n}: missing field(s) {', '.join(missing)} (fields: see market.fleet)")
    job_id, mode = row["job_id"], row["mode"]
    if not isinstance(job_id, str) or not job_id:
        raise FleetRowError(f"row {n}: job_id must be a non-empty string, got {job_id!r}")
    if mode not in MODES:
        raise FleetRowError(f"row {n} ({job_id}): mode must be one of {', '.join(MODES)}, got {mode!r}")
    market = row.get("market")
    if mode in (*HOLDING_MODES, "waiting") and (not isinstance(market, str) or not market):
        raise FleetRowError(f"row {n} ({job_id}): mode {mode!r} needs a market key, got {market!r}")
    count = row["count"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise FleetRowError(f"row {n} ({job_id}): count must be an integer ≥ 1, got {count!r}")
    if max_count is not None and count > max_count:
        raise FleetRowError(f"row {n} ({job_id}): count must be an integer from 1 to {max_count}, got {count!r}")
    slack = _number(row["slack_hours"], n, job_id, "slack_hours")
    since = row.get("since")
    if since is None:
        if mode in HOLDING_MODES:
            raise FleetRowError(f"row {n} ({job_id}): mode {mode!r} needs `since`, when the group launched")
        since_value = math.inf
    else:
        since_value = _instant(since, n, job_id)
    return Claim(job_id, market, mode, count, since_value, slack)


def _number(value, n: int, job_id: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FleetRowError(f"row {n} ({job_id}): {field} must be a finite number, got {value!r}")
    return float(value)


def _instant(value, n: int, job_id: str) -> float:
    """`since` as a number on one clock: numbers as they are, datetimes (and ISO strings) as epoch seconds."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            message = f"row {n} ({job_id}): since must be a number or an ISO-8601 time, got {value!r}"
            raise FleetRowError(message) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise FleetRowError(f"row {n} ({job_id}): since {value.isoformat()} has no time zone; give UTC")
        return value.timestamp()
    return _number(value, n, job_id, "since")
