"""An auth manager that lets one user see every page: the UI benchmarks time the plugin's pages, not
Airflow's login (the tests check the real auth manager refuses what it should)."""

from __future__ import annotations


class AllowAll:
    """Stands in for Airflow's auth manager: every token is user "bench", every DAG readable."""

    async def get_user_from_token(self, token):
        return type("User", (), {"get_name": lambda self: "bench", "get_id": lambda self: "bench"})()

    def is_authorized_dag(self, **_):
        return True

    def get_authorized_dag_ids(self, **_):
        return {"skynomad_fine_tune", "secret_dag"}
