"""Shared fixtures: real databases for code that talks to one.

`postgres_url` gives each test a fresh, uniquely named schema on the local PostgreSQL
(127.0.0.1:5432, database `test`, trust auth as `postgres` or else `root`) and drops it
afterwards, so tests can run in parallel and leave nothing behind. The issue requires the
PostgreSQL tests to *run* in CI: with CI=true an unreachable server fails the test instead
of skipping it. Set SKYNOMAD_TEST_POSTGRES_URL to use another server or database.

The Airflow environment (a throwaway AIRFLOW_HOME, `airflow_db`, `skynomad_home`, `gcp_frame`) comes
from tests/support/airflow_env.py, imported here so that it is set before any test imports Airflow,
whichever part of the tree a session runs (`tests/unit`, `tests/integration` or both).
"""

from __future__ import annotations

import importlib.util
import os
import uuid

import pytest
from sqlalchemy import create_engine, make_url
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.schema import CreateSchema, DropSchema

from tests.support.airflow_env import airflow_db, gcp_frame, skynomad_home  # noqa: F401 - fixtures, and Airflow's env

_DRIVER = "psycopg2" if importlib.util.find_spec("psycopg2") else "psycopg"
_CANDIDATES = [f"postgresql+{_DRIVER}://{user}@127.0.0.1:5432/test" for user in ("postgres", "root")]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _try_connect(url: URL) -> Engine | None:
    """An engine on `url`, creating the database when only it is missing; None if unreachable."""
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect():
            return engine
    except OperationalError as exc:
        engine.dispose()
        if "does not exist" not in str(exc) or not url.database:
            return None
    # The server answers but has no such database yet (a fresh CI service): create it.
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{url.database}"')
    except (OperationalError, ProgrammingError):
        pass  # unreachable, or created meanwhile by a parallel worker: the retry below decides
    finally:
        admin.dispose()
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect():
            return engine
    except OperationalError:
        engine.dispose()
        return None


@pytest.fixture(scope="session")
def _postgres_admin() -> Engine | str:
    """A session-wide engine on the test database, or the reason none could be opened."""
    override = os.environ.get("SKYNOMAD_TEST_POSTGRES_URL")
    candidates = [make_url(override)] if override else [make_url(u) for u in _CANDIDATES]
    # A bare postgresql:// means psycopg 3 to SQLAlchemy 2.1; use the driver that is installed.
    candidates = [u.set(drivername=f"postgresql+{_DRIVER}") if u.drivername == "postgresql" else u for u in candidates]
    for url in candidates:
        engine = _try_connect(url)
        if engine is not None:
            yield engine
            engine.dispose()
            return
    tried = ", ".join(u.render_as_string(hide_password=True) for u in candidates)
    yield f"PostgreSQL unreachable (tried {tried})"


@pytest.fixture
def postgres_url(_postgres_admin) -> str:
    """URL of a fresh schema (set as search_path) on the test PostgreSQL; dropped afterwards."""
    if isinstance(_postgres_admin, str):
        if _in_ci():
            pytest.fail(f"{_postgres_admin}; CI=true requires the PostgreSQL tests to run")
        pytest.skip(_postgres_admin)
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with _postgres_admin.begin() as conn:
        conn.execute(CreateSchema(schema))
    url = _postgres_admin.url.update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with _postgres_admin.begin() as conn:
            conn.execute(DropSchema(schema, cascade=True))


@pytest.fixture(params=["sqlite", "postgresql"])
def market_url(request, tmp_path) -> str:
    """A fresh, empty market database on each backend the table supports."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'market.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def fresh_postgres_database():
    """(url, admin connection, name) of a fresh PostgreSQL *database* on 127.0.0.1:5432, dropped
    afterwards, for what needs a whole database (Airflow's metadata DB, several processes' cloud
    state) rather than the schema `postgres_url` gives. Fails in CI when PostgreSQL is unreachable."""
    import psycopg2

    name = f"skynomad_test_{uuid.uuid4().hex[:10]}"
    admin, error = None, None
    for user in ("postgres", "root"):
        try:
            admin = psycopg2.connect(host="127.0.0.1", port=5432, dbname="test", user=user, connect_timeout=5)
            break
        except psycopg2.OperationalError as exc:
            error = exc
    if admin is None:
        if _in_ci():
            pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is required in CI: {error}")
        pytest.skip(f"no PostgreSQL at 127.0.0.1:5432: {error}")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg2://{user}@127.0.0.1:5432/{name}", admin, name
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Give `xdist_group` tests their group's suffix, as `--dist loadgroup` expects.

    pytest-xdist 3.8 sets the suffix through `item._nodeid`, which pytest 9.2 no longer reads
    (a node's id is `item._id`), so its loadgroup scheduler saw no groups and sent the tests that
    start Airflow's services to both workers at once. Runs after xdist's own hook; a suffix that
    is already there (a fixed xdist) is left alone.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        marks = item.iter_markers("xdist_group")
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks}
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(sorted(names))}")
