"""Which SkyNomad connection a page may read, and its settings: what the markets page and the job pages share.

Kept apart from the markets page's data (plugin/markets.py), which imports pandas and the forecasters:
the jobs dashboard and job pages read their jobs' live statuses through a connection too, and a cold
api-server should not load the forecasting stack to show them.
"""

from __future__ import annotations

from fastapi import HTTPException

from airflow_provider_skynomad.config import DEFAULT_CONN_ID

SKYNOMAD_CONN_TYPES = ("skynomad", "skynomad_aws", "skynomad_gcp")


def market_config(conn_id: str, may_read_connection):
    """The SkyNomadConfig of a SkyNomad connection (its market URL holds the password: it never leaves this process).

    The page must not become a way to use other connections' credentials: only SkyNomad connection
    types are read, and one other than the default only for users the auth manager lets read it
    (`may_read_connection(conn_id)`).
    """
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig

    if conn_id != DEFAULT_CONN_ID and not may_read_connection(conn_id):
        raise HTTPException(403, f"you may not read connection {conn_id!r}")
    try:
        conn = Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        if conn_id == DEFAULT_CONN_ID:
            return SkyNomadConfig.default()
        raise HTTPException(404, f"no connection {conn_id!r}") from None
    if conn.conn_type not in SKYNOMAD_CONN_TYPES:
        raise HTTPException(400, f"connection {conn_id!r} is not a SkyNomad connection ({conn.conn_type!r})")
    try:
        return SkyNomadConfig.from_connection(conn)
    except ValueError as exc:
        raise HTTPException(400, f"connection {conn_id!r}: {exc}") from None
