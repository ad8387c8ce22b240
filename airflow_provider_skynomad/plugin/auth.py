"""The api-server's own auth dependencies, imported when a request comes rather than when the plugin loads.

Every Airflow process loads plugins (scheduler, triggerer, task workers), but only the api-server
serves these pages: importing ``airflow.api_fastapi.core_api.security`` (and the page code, with
pandas and scikit-learn behind it) at plugin load would cost every task process seconds. These
wrappers call exactly the api-server's dependencies: ``get_user`` (bearer token, else the UI's
``_token`` cookie; 401 without one, 403 for an invalid one) and ``requires_access_dag`` (403 when
the auth manager says no).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request


async def current_user(request: Request):
    """The signed-in user, as the api-server's ``get_user`` resolves it."""
    from airflow.api_fastapi.core_api import security

    bearer = await security.bearer_scheme(request)
    return await security.get_user(request, None, bearer)


def dag_access(method: str, entity: str | None, dag_id: str | None = None):
    """``requires_access_dag(method, DagAccessEntity[entity])`` on the DAG in the path, or on `dag_id`."""

    def check(request: Request, user: Annotated[object, Depends(current_user)]) -> None:
        from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
        from airflow.api_fastapi.core_api import security

        access_entity = DagAccessEntity[entity] if entity else None
        security.requires_access_dag(method=method, access_entity=access_entity, param_dag_id=dag_id)(request, user)

    return check


def auth_manager():
    """The api-server's auth manager (what its security dependencies ask)."""
    from airflow.api_fastapi.core_api import security

    return security.get_auth_manager()


def may_run(user, dag_id: str) -> bool:
    """Whether `user` may start runs of `dag_id`."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return auth_manager().is_authorized_dag(
        method="POST", access_entity=DagAccessEntity.RUN, details=DagDetails(id=dag_id), user=user
    )


def may_read_connection(user, conn_id: str) -> bool:
    """Whether `user` may read connection `conn_id`."""
    from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails

    return auth_manager().is_authorized_connection(method="GET", details=ConnectionDetails(conn_id=conn_id), user=user)
