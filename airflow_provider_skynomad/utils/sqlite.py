"""SQLite settings shared by the embedded databases (the market table, the simulated cloud's state).

WAL lets readers run beside the one writer; busy_timeout makes writers wait instead of failing.
synchronous=NORMAL is WAL's usual pairing: a power cut may lose the last commits (a market table
refilled by the next probe round, a simulation), and every commit is not an fsync. Switching a
fresh file to WAL needs an exclusive lock that SQLite does not cover with the busy timeout, so
several processes opening a new database at once retry. PRAGMAs have no SQLAlchemy Core form:
this is the one place with SQL text.
"""

from __future__ import annotations

import random
import sqlite3
import time

BUSY_TIMEOUT_SECONDS = 60.0


def use_wal(dbapi_connection, busy_timeout_seconds: float = BUSY_TIMEOUT_SECONDS) -> None:
    """Put a new DB-API connection in WAL mode with a busy timeout (an engine's "connect" event)."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
        cursor.execute("PRAGMA synchronous = NORMAL")
        deadline = time.monotonic() + busy_timeout_seconds
        while True:
            try:
                if cursor.execute("PRAGMA journal_mode").fetchone()[0] in ("wal", "memory"):
                    break
                cursor.execute("PRAGMA journal_mode = WAL").fetchall()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))
    finally:
        cursor.close()
