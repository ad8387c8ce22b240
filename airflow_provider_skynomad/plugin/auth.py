"""The api-server's own auth dependencies, imported when a request comes rather than when the plugin loads.

Every Airflow process loads plugins (scheduler, triggerer, task workers), but only the api-server
serves these pages: importing ``airflow.api_fastapi.core_api.security`` (and the page code, with
pandas and scikit-learn behind it) at plugin load would cost every task process seconds. These
wrappers call exactly the api-server's dependencies: ``get_user`` (bearer token, else the UI's
``_token`` cookie; 401 without one, 403 for an invalid one) and ``requires_access_dag`` (403 when
the auth manager says no). `same_origin` is the plugin's own: the check of a form's origin that the
api-server leaves to whoever serves forms.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request


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


def same_origin(request: Request) -> None:
    """Refuse a form posted by a page of another origin with the user's session cookie (CSRF).

    SameSite=lax keeps the cookie off POSTs from other *sites*, not from another port or subdomain of
    the same site. So, as Django and Flask-WTF's strict mode do, a POST counts only when its ``Origin``
    (or, without one, its ``Referer``) is this server's own origin or ``[api] base_url``'s; browsers
    send ``Origin`` with every POST. A request that carries its token in an ``Authorization`` header
    was not sent by a browser on a page's behalf (no page can add that header to another origin).
    """
    if request.headers.get("authorization", "").lower().startswith("bearer "):
        return
    sent = request.headers.get("origin") or origin_of(request.headers.get("referer") or "")
    allowed = {origin_of(str(request.base_url)), origin_of(_configured_base_url())} - {""}
    if sent not in allowed:
        raise HTTPException(
            403,
            f"this form came from origin {sent or 'unknown'!r}, not from this Airflow ({', '.join(sorted(allowed))})",
        )


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of `url` as browsers send it in ``Origin`` (default port left out); "" if none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ""
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def _configured_base_url() -> str:
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="") or ""
