"""Layout changes of an existing table that creating what is missing cannot make: a new primary
key, a new column.

Why a module of its own: most layout versions only added a table or an index, which
`database.create_schema` makes on its own. A key in another column order is a change of what is
there, made in place, keeping every row: PostgreSQL rebuilds the key's index in one ALTER TABLE;
SQLite cannot alter a key, so the rows are copied into a table of the new layout that then takes
the old one's name. Both run inside the schema transaction (all or nothing, other creators held
off by its lock), and say so in the log, since on a large table writers wait for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from sqlalchemy import Connection, MetaData, Table, func, inspect, select
from sqlalchemy.schema import CreateTable

log = logging.getLogger(__name__)


def move_primary_key(conn: Connection, table: Table, key: Sequence[str], *, where: str, versions: str) -> bool:
    """Give the stored `table` the primary key `key` (columns, in order) if it has another one.

    `where` names the table in the log lines, `versions` the change (e.g. "3 → 4"). Returns
    whether anything changed. A table that does not exist yet is left to be created.
    """
    found = inspect(conn)
    if not found.has_table(table.name):
        return False
    current = found.get_pk_constraint(table.name)
    if list(current["constrained_columns"]) == list(key):
        return False
    log.warning(
        "%s: migrating the schema from version %s: primary key (%s) becomes (%s); writers (on PostgreSQL "
        "readers too) wait until it is done",
        where,
        versions,
        ", ".join(current["constrained_columns"]),
        ", ".join(key),
    )
    began = time.monotonic()
    if conn.dialect.name == "postgresql":
        _alter_key(conn, table, current["name"], key)
        rows = conn.execute(select(func.count()).select_from(table)).scalar_one()
    else:
        rows = _copy_into_new_layout(conn, table)
    elapsed = time.monotonic() - began
    log.warning("%s: migrated from version %s, %d rows kept, in %.1f s", where, versions, rows, elapsed)
    return True


def drop_indexes(conn: Connection, names: Sequence[str]) -> None:
    """Drop indexes an older layout had and the current one does not (absent ones are fine)."""
    quote = conn.dialect.identifier_preparer.quote
    for name in names:
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {quote(name)}")


def _alter_key(conn: Connection, table: Table, old_name: str | None, key: Sequence[str]) -> None:
    """PostgreSQL: drop the old key and add the new one in one statement (the index is built once)."""
    quote = conn.dialect.identifier_preparer.quote
    columns = ", ".join(quote(c) for c in key)
    add = f"ADD CONSTRAINT {quote(table.primary_key.name)} PRIMARY KEY ({columns})"
    drop = f"DROP CONSTRAINT {quote(old_name)}, " if old_name else ""
    # Every name is this package's constant or the catalog's own; no value is in the text.
    conn.exec_driver_sql(f"ALTER TABLE {quote(table.name)} {drop}{add}")


def _copy_into_new_layout(conn: Connection, table: Table) -> int:
    """SQLite: copy the rows, in the new key's order, into a new table that then takes the old one's
    name (its indexes go with the old table; the caller creates the current ones). Returns the rows."""
    quote = conn.dialect.identifier_preparer.quote
    staging = table.to_metadata(MetaData(), name=f"{table.name}_migrating")
    conn.execute(CreateTable(staging))  # the table alone: its indexes' names are still the old table's
    before = conn.execute(select(func.count()).select_from(table)).scalar_one()
    key = [c.name for c in staging.primary_key.columns]
    columns = ", ".join(quote(c.name) for c in table.columns)
    order = ", ".join(quote(c) for c in key)
    copied = conn.exec_driver_sql(
        f"INSERT INTO {quote(staging.name)} ({columns}) SELECT {columns} FROM {quote(table.name)} ORDER BY {order}"
    ).rowcount
    if copied != before:
        raise RuntimeError(f"migrating {table.name}: copied {copied} of {before} rows; nothing was changed")
    conn.exec_driver_sql(f"DROP TABLE {quote(table.name)}")
    conn.exec_driver_sql(f"ALTER TABLE {quote(staging.name)} RENAME TO {quote(table.name)}")
    return copied


def add_column(conn: Connection, table: Table, name: str, *, where: str, versions: str) -> bool:
    """Add the nullable column `name` of `table` to the stored table if it lacks it.

    Every stored row is kept and reads NULL there (ALTER TABLE ... ADD COLUMN, in place on SQLite
    and PostgreSQL: no row is rewritten). Returns whether anything changed; a table that does not
    exist yet is left to be created.
    """
    found = inspect(conn)
    if not found.has_table(table.name) or name in {c["name"] for c in found.get_columns(table.name)}:
        return False
    column = table.c[name]
    if not column.nullable:
        raise ValueError(f"{table.name}.{name}: only a nullable column can be added to stored rows")
    quote = conn.dialect.identifier_preparer.quote
    kind = column.type.compile(dialect=conn.dialect)
    # The names and the type are this package's constants; no value is in the text.
    conn.exec_driver_sql(f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(name)} {kind}")
    log.info("%s: schema version %s: added the column %s; every row kept", where, versions, name)
    return True
