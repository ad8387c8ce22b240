"""The `skynomad` connection: where the market table lives and which cloud runs the jobs.

One connection carries both halves so a DAG names a single `skynomad_conn_id`:

- market database: the connection's host/port/login/password/schema make a PostgreSQL URL;
  `market_url` in extra overrides it with any SQLAlchemy URL; with neither, the embedded SQLite
  file under ``$SKYNOMAD_HOME`` is used.
- cloud: extra ``cloud`` is ``simulated`` (default: replays a trace, no account needed), ``aws``
  (EC2 through the amazon provider's ``aws_conn_id``) or ``gcp`` (Compute Engine through the google
  provider's ``gcp_conn_id`` and ``gcp_project``). The simulated cloud reads ``trace_path``
  (default: the bundled GCP H100 week), keeps its state in ``state_dir`` so the worker, the
  triggerer and retries share it, and runs ``speed`` simulated seconds per wall second.

A missing ``skynomad_default`` connection means "all embedded defaults", so the demo and the
example DAGs run on a fresh install. Passwords never leave this module unredacted: use
``SkyNomadConfig.display_market_url`` in messages.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from ..clouds.base import Cloud
from ..extras import require_extra

CLOUD_KINDS = ("simulated", "aws", "gcp")
DEFAULT_CONN_ID = "skynomad_default"
DEFAULT_TRACE = "gcp-h100-2025-first-week.csv.gz"


class SkyNomadConfigError(ValueError):
    """The `skynomad` connection is incomplete or contradictory; the message names the field."""


def skynomad_home() -> Path:
    return Path(os.environ.get("SKYNOMAD_HOME") or Path.home() / ".skynomad").expanduser()


def bundled_trace(name: str = DEFAULT_TRACE) -> str:
    return str(resources.files("airflow_provider_skynomad") / "data" / name)


@dataclass(frozen=True)
class SkyNomadConfig:
    """Everything the operator and the trigger need from a `skynomad` connection; plain data.

    :param market_url: SQLAlchemy URL of the market table (may hold a password: never log it).
    :param cloud: ``simulated``, ``aws`` or ``gcp``.
    :param trace_path: simulated cloud: the trace it replays.
    :param state_dir: simulated cloud: where launched groups, checkpoints and bills live.
    :param speed: simulated cloud: simulated seconds per wall-clock second (3600 = 1 h per s).
    :param aws_conn_id: aws cloud: the amazon provider connection.
    :param gcp_conn_id: gcp cloud: the google provider connection.
    :param gcp_project: gcp cloud: project id (defaults to the connection's project).
    :param checkpoint_bucket: aws cloud: S3 bucket name pattern for checkpoints, ``{region}`` filled in.
    :param cloud_options: extra keyword arguments for the cloud constructor (advanced/testing).
    """

    market_url: str
    cloud: str = "simulated"
    trace_path: str = field(default_factory=bundled_trace)
    state_dir: str = field(default_factory=lambda: str(skynomad_home() / "cloud"))
    speed: float = 3600.0
    aws_conn_id: str = "aws_default"
    gcp_conn_id: str = "google_cloud_default"
    gcp_project: str | None = None
    checkpoint_bucket: str | None = None
    cloud_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cloud not in CLOUD_KINDS:
            raise SkyNomadConfigError(f"skynomad connection: cloud must be one of {CLOUD_KINDS}, got {self.cloud!r}")
        if not self.speed or float(self.speed) <= 0:
            raise SkyNomadConfigError(f"skynomad connection: speed must be > 0, got {self.speed!r}")

    def __repr__(self) -> str:
        """Every field but the market URL's password (a config in a log or a traceback leaks nothing)."""
        fields = {**self.to_dict(), "market_url": self.display_market_url}
        return f"SkyNomadConfig({', '.join(f'{k}={v!r}' for k, v in fields.items())})"

    @property
    def display_market_url(self) -> str:
        from sqlalchemy.engine import make_url

        try:
            return make_url(self.market_url).render_as_string(hide_password=True)
        except Exception:  # noqa: BLE001 - never echo an unparsable URL: it may hold a secret
            return "<unparsable market URL>"

    @property
    def wall_seconds_per_cloud_hour(self) -> float:
        """How long one hour of cloud time takes on the wall clock (1 h for real clouds)."""
        return 3600.0 / float(self.speed) if self.cloud == "simulated" else 3600.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def default(cls) -> SkyNomadConfig:
        from ..market.table import default_market_url

        return cls(market_url=default_market_url())

    @classmethod
    def from_connection(cls, conn: Any) -> SkyNomadConfig:
        """Read a `skynomad` Connection (standard fields + extra), see the module docstring."""
        from ..market.table import default_market_url

        extra = _extra_of(conn)

        def pick(name: str, default=None):
            # Connection forms store plain keys; older UIs stored extra__skynomad__<name>.
            for key in (name, f"extra__skynomad__{name}"):
                value = extra.get(key)
                if value not in (None, ""):
                    return value
            return default

        market_url = pick("market_url")
        if not market_url and getattr(conn, "host", None):
            from sqlalchemy.engine import URL

            market_url = URL.create(
                "postgresql",
                username=conn.login or None,
                password=conn.password or None,
                host=conn.host,
                port=conn.port or None,
                database=conn.schema or None,
            ).render_as_string(hide_password=False)
        defaults = cls.default_fields()
        try:
            speed = float(pick("speed", 3600.0))
        except (TypeError, ValueError):
            raise SkyNomadConfigError(f"skynomad connection: speed must be a number, got {pick('speed')!r}") from None
        options = pick("cloud_options", {}) or {}
        if isinstance(options, str):
            import json

            options = json.loads(options)
        return cls(
            market_url=market_url or default_market_url(),
            cloud=str(pick("cloud", "simulated")).lower(),
            trace_path=str(Path(pick("trace_path", defaults["trace_path"])).expanduser()),
            state_dir=str(Path(pick("state_dir", defaults["state_dir"])).expanduser()),
            speed=speed,
            aws_conn_id=pick("aws_conn_id", "aws_default"),
            gcp_conn_id=pick("gcp_conn_id", "google_cloud_default"),
            gcp_project=pick("gcp_project"),
            checkpoint_bucket=pick("checkpoint_bucket"),
            cloud_options=dict(options),
        )

    @staticmethod
    def default_fields() -> dict:
        return {"trace_path": bundled_trace(), "state_dir": str(skynomad_home() / "cloud")}


def _extra_of(conn: Any) -> dict:
    extra = getattr(conn, "extra_dejson", None)
    if extra is None:
        import json

        raw = getattr(conn, "extra", None)
        extra = json.loads(raw) if raw else {}
    return dict(extra or {})


def make_cloud(config: SkyNomadConfig) -> Cloud:
    """The cloud a config names. Imports lazily: a simulated run never loads boto3 or google.

    `cloud_options` go to the cloud's constructor; a key it does not take, or one the connection
    sets through its own field, is refused with SkyNomadConfigError naming it and the accepted keys.
    """
    import inspect

    require_extra(config.cloud)  # aws / gcp without their extra: say which to install
    if config.cloud == "simulated":
        from ..clouds.simulated import SimulatedCloud as cls

        fixed = {"trace_path": config.trace_path, "state_dir": config.state_dir, "speed": config.speed}
        fields = {"trace_path": "trace_path", "state_dir": "state_dir", "speed": "speed"}
    elif config.cloud == "aws":
        from ..clouds.aws import AwsCloud as cls

        fixed = {"aws_conn_id": config.aws_conn_id, "checkpoint_bucket": config.checkpoint_bucket}
        fields = {"aws_conn_id": "aws_conn_id", "checkpoint_bucket": "checkpoint_bucket"}
    else:
        from ..clouds.gcp import GcpCloud as cls

        fixed = {"gcp_conn_id": config.gcp_conn_id, "project_id": config.gcp_project}
        fields = {"gcp_conn_id": "gcp_conn_id", "project_id": "gcp_project"}
    parameters = inspect.signature(cls).parameters.values()
    takes = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    accepted = [name for name in takes if name not in fixed]
    options = dict(config.cloud_options or {})
    for name in options:
        if name in fixed:
            raise SkyNomadConfigError(
                f"skynomad connection: cloud_options.{name} is set by the connection's own field "
                f"{fields[name]!r}; set it there (cloud_options the {config.cloud} cloud accepts: "
                f"{', '.join(accepted) or 'none'})"
            )
    unknown = [name for name in options if name not in accepted]
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in parameters):
        raise SkyNomadConfigError(
            f"skynomad connection: the {config.cloud} cloud does not accept cloud_options "
            f"{', '.join(repr(n) for n in unknown)}; accepted: {', '.join(accepted) or 'none'}"
        )
    return cls(**fixed, **options)


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

    def _config_from(self, conn: Any | None) -> SkyNomadConfig:
        return SkyNomadConfig.default() if conn is None else SkyNomadConfig.from_connection(conn)

    def _lookup_sync(self):
        try:
            return self.get_connection(self.skynomad_conn_id)
        except Exception as exc:  # AirflowNotFoundException and its SDK twin
            return self._missing(exc)

    async def _lookup_async(self):
        try:
            return await self.aget_connection(self.skynomad_conn_id)
        except Exception as exc:
            return self._missing(exc)

    def _missing(self, exc: Exception):
        if "not defined" in str(exc) or "NotFound" in type(exc).__name__:
            if self.skynomad_conn_id == DEFAULT_CONN_ID:
                return None
            raise SkyNomadConfigError(
                f"connection {self.skynomad_conn_id!r} is not defined; create a connection of type "
                f"'skynomad' or use {DEFAULT_CONN_ID!r} (embedded defaults)"
            ) from exc
        raise exc

    # -- verbs ---------------------------------------------------------------------------------

    def get_conn(self) -> Cloud:
        return self.get_cloud()

    def get_cloud(self) -> Cloud:
        return make_cloud(self.get_config())

    def get_market_table(self):
        from ..market.table import MarketTable

        return MarketTable(self.get_config().market_url)

    def test_connection(self) -> tuple[bool, str]:
        """Reach the market table (the cloud is reached on first launch)."""
        try:
            table = self.get_market_table()
            table.create()
            latest = table.latest_observed_at()
            table.close()
        except Exception as exc:  # noqa: BLE001 - reported to the UI, not raised
            return False, f"market table at {self.get_config().display_market_url}: {exc}"
        return True, f"market table reachable; newest observation: {latest}"
