"""A migrated Airflow metadata database with seeded SkyNomad jobs, a market table behind a connection, and
the plugin's app mounted as the api-server mounts it, with a stand-in auth manager behind the api-server's
own security dependencies (get_user, requires_access_dag): tokens name users, each user may read some DAGs.

The metadata database is the session's (tests/support/airflow_env.py, set up by tests/conftest.py).
"""

from __future__ import annotations

import pytest
from jwt import InvalidTokenError
from sqlalchemy import select

MARKER_PASSWORD = "Marker-Pa55word-never-shown"
CONN_ID = "skynomad_plugin_test"


@pytest.fixture(scope="session")
def seeded(airflow_db, tmp_path_factory):
    """Metadata DB migrated (the session's, `airflow_db`: one `airflow db migrate` per worker, not one per
    folder), the jobs of seed.py written, a market table behind connection CONN_ID."""
    from tests.support import plugin_seed as seed

    market_db = tmp_path_factory.mktemp("market") / "market.db"
    url = f"sqlite:///{market_db}"
    rows = seed.seed_market(url, seed.market_frame())
    seed.declare_dag("skynomad_fine_tune", ("fine_tune", "train"), CONN_ID)
    seed.seed_jobs()
    seed.add_connection(CONN_ID, url, MARKER_PASSWORD)
    return {"market_url": url, "rows": rows}


class User:
    def __init__(self, name: str, dags: set[str] | None, can_run: bool = False):
        self.name, self.dags, self.can_run = name, dags, can_run

    def get_name(self) -> str:
        return self.name

    def get_id(self) -> str:
        return self.name


USERS = {
    "admin-token": User("admin", None, can_run=True),
    "viewer-token": User("viewer", {"skynomad_fine_tune"}),
}


class StubAuthManager:
    """What get_user and requires_access_dag ask of an auth manager."""

    async def get_user_from_token(self, token: str) -> User:
        try:
            return USERS[token]
        except KeyError:
            raise InvalidTokenError("unknown token") from None

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        dag_id = details.id if details else None
        readable = user.dags is None or dag_id in user.dags
        return readable and (method == "GET" or user.can_run)

    def is_authorized_connection(self, *, method, user, details=None) -> bool:
        return user.can_run  # the admin reads connections, the viewer does not

    def get_authorized_dag_ids(self, *, user, method="GET", session=None) -> set[str]:
        if user.dags is not None:
            return set(user.dags)
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session

        with create_session() as db:
            return set(db.scalars(select(DagModel.dag_id))) | {"skynomad_probe"}


@pytest.fixture
def client(seeded, monkeypatch):
    from airflow.api_fastapi.core_api import security
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_provider_skynomad.plugin import SkyNomadPlugin

    monkeypatch.setattr(security, "get_auth_manager", lambda: StubAuthManager())
    root = FastAPI()
    (mounted,) = SkyNomadPlugin.fastapi_apps
    root.mount(mounted["url_prefix"], mounted["app"])
    return TestClient(root)


def as_user(name: str) -> dict:
    return {"headers": {"Cookie": f"_token={name}-token"}}
