"""When the probe DAG last completed a round of each market: what a job's freshness check follows.

A market row is stamped with the cloud's clock at the moment of its probe. On a busy box the
probe DAG itself runs slowly against that clock (4 min 40 s of wall time is 23 cloud hours at
300x), so a job queued minutes after a successful probe run finds rows "hours old" that the probe
DAG vouched for moments ago. So each region's probe task, once every market it was given is
probed or judged fresh enough, stamps those markets here: when its plan was made (``planned_at``:
the ages it judged) and when the round ended, on the cloud's clock. A job trusts the table while
these completions keep their own pace (market/freshness.py, `rounds_verdict`), whatever the rows'
ages say about the box's speed.

One table, ``probe_rounds``, in the market database (same URL, engine, UTC times), versioned under
the component ``probe_rounds``; insert-or-ignore on its key, so a retried task stamps its round
once; only the newest `KEEP_PER_MARKET` rounds of a market are kept (the rule reads two).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Column, Index, MetaData, PrimaryKeyConstraint, String, Table, delete, select
from sqlalchemy.engine import URL

from airflow_provider_skynomad.market.freshness import CompletedRound
from airflow_provider_skynomad.market.store.database import INSERT, MarketDatabase, UtcDateTime, utc

SCHEMA_VERSION = 1
"""Bump when the table's layout changes, and teach `create()` to migrate from the old one."""
KEEP_PER_MARKET = 10

metadata = MetaData()

probe_rounds = Table(
    "probe_rounds",
    metadata,
    Column("ended_at", UtcDateTime, nullable=False),
    Column("planned_at", UtcDateTime, nullable=False),
    Column("cloud", String, nullable=False),
    Column("region", String, nullable=False),
    Column("zone", String, nullable=False),
    Column("instance_type", String, nullable=False),
    PrimaryKeyConstraint("zone", "instance_type", "ended_at", name="pk_probe_rounds"),
    Index("ix_probe_rounds_ended_at", "ended_at"),
)


class ProbeRoundTable(MarketDatabase):
    """The probe DAG's completed rounds per market, in the market table's database.

    :param url: SQLAlchemy URL of the market database (`default_market_url()` when omitted).
    :param market: an open store of the same database whose engine to share.
    """

    component = "probe_rounds"
    layout_version = SCHEMA_VERSION
    tables = (probe_rounds,)
    label = "probe round table"

    def __init__(self, url: str | URL | None = None, *, market: MarketDatabase | None = None):
        super().__init__(url, share=market)

    def record(self, rounds: Iterable[CompletedRound]) -> int:
        """Stamp each market's completed round; return how many were new (a retried task's are kept)."""
        rows = []
        for done in rounds:
            if not done.planned_at <= done.ended_at:
                raise ValueError(f"a round cannot end before it was planned: {done}")
            rows.append(
                {
                    "ended_at": utc(done.ended_at),
                    "planned_at": utc(done.planned_at),
                    "cloud": done.cloud,
                    "region": done.region,
                    "zone": done.zone,
                    "instance_type": done.instance_type,
                }
            )
        if not rows:
            return 0
        self._ensure()
        t = probe_rounds
        statement = (
            INSERT[self.dialect](t)
            .on_conflict_do_nothing(index_elements=["zone", "instance_type", "ended_at"])
            .returning(t.c.zone)
        )
        with self.engine.begin() as conn:
            new = len(conn.execute(statement, rows).all())
            for row in rows:
                same = (t.c.zone == row["zone"]) & (t.c.instance_type == row["instance_type"])
                oldest_kept = (
                    select(t.c.ended_at).where(same).order_by(t.c.ended_at.desc()).offset(KEEP_PER_MARKET - 1).limit(1)
                ).scalar_subquery()
                conn.execute(delete(t).where(same, t.c.ended_at < oldest_kept))
        return new

    def recent(self, until, markets: Iterable[tuple[str, str]], per_market: int = 2) -> list[CompletedRound]:
        """The newest `per_market` rounds ended by `until` of each (zone, instance_type) of `markets`, oldest first."""
        wanted = set(markets)
        if not wanted:
            return []
        self._ensure()
        t = probe_rounds
        zones = sorted({zone for zone, _ in wanted})
        statement = select(*t.c).where(t.c.ended_at <= utc(until), t.c.zone.in_(zones)).order_by(t.c.ended_at.desc())
        kept: dict[tuple[str, str], list[CompletedRound]] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(statement):
                key = (row.zone, row.instance_type)
                if key in wanted and len(kept.setdefault(key, [])) < per_market:
                    kept[key].append(_round(row))
        return sorted((r for rounds in kept.values() for r in rounds), key=lambda r: r.ended_at)

    def newest(self, until) -> CompletedRound | None:
        """The newest round of any market ended by `until` (is the probe DAG completing rounds at all?)."""
        self._ensure()
        t = probe_rounds
        statement = select(*t.c).where(t.c.ended_at <= utc(until)).order_by(t.c.ended_at.desc()).limit(1)
        with self.engine.connect() as conn:
            row = conn.execute(statement).first()
        return None if row is None else _round(row)


def _round(row) -> CompletedRound:
    return CompletedRound(
        cloud=row.cloud,
        region=row.region,
        zone=row.zone,
        instance_type=row.instance_type,
        planned_at=utc(row.planned_at),
        ended_at=utc(row.ended_at),
    )
