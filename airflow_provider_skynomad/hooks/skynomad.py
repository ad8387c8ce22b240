"""The `skynomad` connection's hooks: read a connection into a `SkyNomadConfig` (config.py says what it
holds), and hand out its market table and its cloud (clouds/factory.py).

``SkyNomadHook`` reads any SkyNomad connection type; ``SkyNomadAwsHook`` and ``SkyNomadGcpHook``
exist so Airflow shows each real cloud's own connection form ("SkyNomad on AWS", "SkyNomad on
GCP"). A missing ``skynomad_default`` connection means "all embedded defaults". The config names
are re-exported here, where they were imported from before config.py.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_skynomad.clouds.base import Cloud
from airflow_provider_skynomad.clouds.factory import make_cloud
from airflow_provider_skynomad.config import (  # noqa: F401 - re-exported: imported from here before config.py
    CLOUD_CHOICES,
    CLOUD_CONN_TYPES,
    CLOUD_KINDS,
    CONFIG_FIELDS,
    DEFAULT_CONN_ID,
    DEFAULT_TRACE,
    SkyNomadConfig,
    bundled_trace,
    cloud_connection_ids,
    skynomad_home,
)
from airflow_provider_skynomad.exceptions import SkyNomadConfigError

__all__ = ["SkyNomadAwsHook", "SkyNomadConfig", "SkyNomadConfigError", "SkyNomadGcpHook", "SkyNomadHook", "make_cloud"]


class SkyNomadHook(BaseHook):
    """Market table and cloud behind one `skynomad` connection.

    :param skynomad_conn_id: the connection; when it is ``skynomad_default`` and does not exist,
        the embedded defaults are used (SQLite market table, simulated cloud, bundled trace).
    """

    conn_name_attr = "skynomad_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "skynomad"
    hook_name = "SkyNomad"

    def __init__(self, skynomad_conn_id: str = DEFAULT_CONN_ID, **kwargs) -> None:
        super().__init__(**kwargs)
        self.skynomad_conn_id = skynomad_conn_id
        self._config: SkyNomadConfig | None = None

    # -- configuration -------------------------------------------------------------------------

    def get_config(self) -> SkyNomadConfig:
        if self._config is None:
            self._config = self._config_from(self._lookup_sync())
        return self._config

    async def aget_config(self) -> SkyNomadConfig:
        """Same as get_config, without blocking the triggerer's event loop."""
        if self._config is None:
            import asyncio

            conn = await self._lookup_async()
            self._config = await asyncio.to_thread(self._config_from, conn)
        return self._config

    def _config_from(self, found: tuple[Any, list[Any]] | None) -> SkyNomadConfig:
        if found is None:
            return SkyNomadConfig.default()
        conn, part_conns = found
        parts = tuple(SkyNomadConfig.from_connection(part) for part in part_conns)
        return SkyNomadConfig.from_connection(conn, parts=parts)

    def _lookup_sync(self):
        conn = self._get(self.get_connection, self.skynomad_conn_id)
        if conn is None:
            return None
        return conn, [self._get(self.get_connection, i, part_of=True) for i in self._part_ids(conn)]

    async def _lookup_async(self):
        conn = await self._aget(self.skynomad_conn_id)
        if conn is None:
            return None
        return conn, [await self._aget(i, part_of=True) for i in self._part_ids(conn)]

    def _part_ids(self, conn) -> list[str]:
        ids = cloud_connection_ids(conn)
        if ids and (getattr(conn, "conn_type", None) or "skynomad") != "skynomad":
            raise SkyNomadConfigError(
                f"connection {self.skynomad_conn_id!r}: cloud_connections belongs on a 'skynomad' connection"
            )
        return ids

    def _get(self, get, conn_id: str, part_of: bool = False):
        try:
            conn = get(conn_id)
        except Exception as exc:  # AirflowNotFoundException and its SDK twin
            return self._missing(exc, conn_id, part_of)
        self._check_type(conn, conn_id, part_of)
        return conn

    async def _aget(self, conn_id: str, part_of: bool = False):
        try:
            conn = await self.aget_connection(conn_id)
        except Exception as exc:
            return self._missing(exc, conn_id, part_of)
        self._check_type(conn, conn_id, part_of)
        return conn

    def _check_type(self, conn, conn_id: str, part_of: bool) -> None:
        conn_type = getattr(conn, "conn_type", None)
        if part_of and conn_type not in CLOUD_CONN_TYPES:
            raise SkyNomadConfigError(
                f"connection {self.skynomad_conn_id!r}: cloud_connections lists {conn_id!r}, of type {conn_type!r}; "
                f"it must be one of {', '.join(CLOUD_CONN_TYPES)}"
            )

    def _missing(self, exc: Exception, conn_id: str, part_of: bool):
        if "defined" in str(exc) or "NotFound" in type(exc).__name__:
            if conn_id == DEFAULT_CONN_ID and not part_of:
                return None
            where = f"listed in cloud_connections of {self.skynomad_conn_id!r} " if part_of else ""
            raise SkyNomadConfigError(
                f"connection {conn_id!r} {where}is not defined; create a connection of type "
                f"'skynomad', 'skynomad_aws' or 'skynomad_gcp', or use {DEFAULT_CONN_ID!r} (embedded defaults)"
            ) from exc
        raise exc

    # -- verbs ---------------------------------------------------------------------------------

    def get_conn(self) -> Cloud:
        return self.get_cloud()

    def get_cloud(self) -> Cloud:
        return make_cloud(self.get_config())

    def get_market_table(self):
        from airflow_provider_skynomad.market.store.table import MarketTable

        return MarketTable(self.get_config().market_url)

    def test_connection(self) -> tuple[bool, str]:
        """Reach the market table, then ask the cloud what would stop a launch (nothing is launched)."""
        try:
            config = self.get_config()
        except Exception as exc:  # noqa: BLE001 - reported to the UI, not raised
            return False, str(exc)
        try:
            table = self.get_market_table()
            table.create()
            latest = table.latest_observed_at()
            table.close()
        except Exception as exc:  # noqa: BLE001
            return False, config.redact(f"market table at {config.display_market_url}: {exc}")
        try:
            problems = make_cloud(config).check()
        except Exception as exc:  # noqa: BLE001 - a missing extra, refused options, unreachable API
            return False, config.redact(f"{config.cloud} cloud: {type(exc).__name__}: {exc}")
        if problems:
            return False, f"{config.cloud} cloud: " + "; ".join(problems)
        return True, f"market table reachable (newest observation: {latest}); {config.cloud} cloud ready"


class SkyNomadAwsHook(SkyNomadHook):
    """The `skynomad_aws` connection ("SkyNomad on AWS"): market table + the AWS cloud's own fields.

    Reading it is `SkyNomadHook`'s job (any SkyNomad connection type works there); this class
    exists so Airflow shows a form with the AWS fields only and tests it with `test_connection`.
    """

    conn_type = "skynomad_aws"
    hook_name = "SkyNomad on AWS"


class SkyNomadGcpHook(SkyNomadHook):
    """The `skynomad_gcp` connection ("SkyNomad on GCP"): market table + the GCP cloud's own fields."""

    conn_type = "skynomad_gcp"
    hook_name = "SkyNomad on GCP"
