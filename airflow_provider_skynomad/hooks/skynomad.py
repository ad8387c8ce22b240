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

Each real cloud also has a connection type of its own, whose form shows that cloud's fields only:
``skynomad_aws`` ("SkyNomad on AWS") and ``skynomad_gcp`` ("SkyNomad on GCP"). Each field of
theirs is an argument of the cloud's constructor (`clouds/aws.py`, `clouds/gcp.py`), next to the
market database fields. To plan over several clouds at once, a ``skynomad`` connection lists
them in ``cloud_connections`` (``skynomad_aws_prod,skynomad_gcp_prod``): the market table is its
own, the clouds are theirs.

A missing ``skynomad_default`` connection means "all embedded defaults", so the demo and the
example DAGs run on a fresh install. Passwords never leave this module unredacted: use
``SkyNomadConfig.display_market_url`` in messages.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_skynomad.clouds.base import Cloud
from airflow_provider_skynomad.extras import require_extra

CLOUD_CHOICES = ("simulated", "aws", "gcp")
"""What a `skynomad` connection's ``cloud`` field may say."""
CLOUD_KINDS = (*CLOUD_CHOICES, "multi")
"""Every config's ``cloud``: ``multi`` is a `skynomad` connection with ``cloud_connections``."""
CLOUD_CONN_TYPES = {"skynomad_aws": "aws", "skynomad_gcp": "gcp"}
"""The per-cloud connection types and the cloud each one runs."""
CONFIG_FIELDS = {
    "aws": {
        "aws_conn_id": "aws_conn_id",
        "checkpoint_bucket": "checkpoint_bucket",
        "checkpoint_signing_secret": "checkpoint_signing_secret",
    },
    "gcp": {
        "gcp_conn_id": "gcp_conn_id",
        "project_id": "gcp_project",
        "checkpoint_signing_secret": "checkpoint_signing_secret",
    },
}
"""Per cloud: constructor argument → the config field that holds it; every other argument is a cloud option."""
_NOT_CLOUD_OPTIONS = ("market_url", "cloud", "probe_budget_usd_per_day", "cloud_options")
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
    :param cloud_options: extra keyword arguments for the cloud constructor (a per-cloud
        connection's fields land here).
    :param probe_budget_usd_per_day: what the probe DAG may spend on launch probes per day in
        this connection's clouds (None: the probe operator's own default).
    :param parts: ``multi``: the config of each cloud connection listed in ``cloud_connections``.
    :param checkpoint_signing_secret: aws / gcp clouds: the deployment's secret each job's checkpoint
        signing key is derived from (docs/agent.md); an extra field Airflow masks ("secret" in its
        name). Never in `to_dict`, `repr` or a log.
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
    probe_budget_usd_per_day: float | None = None
    parts: tuple = ()
    checkpoint_signing_secret: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.cloud not in CLOUD_KINDS:
            raise SkyNomadConfigError(f"skynomad connection: cloud must be one of {CLOUD_KINDS}, got {self.cloud!r}")
        speed = self.speed
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not (math.isfinite(speed) and speed > 0):
            raise SkyNomadConfigError(f"skynomad connection: speed must be a finite number > 0, got {speed!r}")
        budget = self.probe_budget_usd_per_day
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 <= budget < math.inf
        ):
            raise SkyNomadConfigError(
                f"skynomad connection: probe_budget_usd_per_day must be a number of USD ≥ 0, got {budget!r}"
            )
        if self.cloud == "multi":
            kinds = [part.cloud for part in self.parts]
            if not kinds or len(set(kinds)) != len(kinds) or "simulated" in kinds or "multi" in kinds:
                raise SkyNomadConfigError(
                    "skynomad connection: cloud_connections must name one skynomad_aws and/or one skynomad_gcp "
                    f"connection, got clouds {kinds}"
                )

    @property
    def clouds(self) -> tuple[str, ...]:
        """The real cloud kinds this config runs on (``("simulated",)`` for the simulated one)."""
        return tuple(part.cloud for part in self.parts) if self.cloud == "multi" else (self.cloud,)

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

    def market_now(self):
        """Now on the clock this connection's market rows are stamped with (a UTC pandas Timestamp).

        A real cloud's probes are stamped with the wall clock. The simulated cloud stamps them with
        its replayed trace's time (a week in 2025, run `speed` times faster): measured from the wall
        clock, every row is months old, so a window from now would be empty and every market stale.
        Its clock is read from the state directory every process shares (no trace is loaded);
        before the first job or probe has created it there are no rows of it either.
        """
        import pandas as pd

        wall = pd.Timestamp.now(tz="UTC")
        if self.cloud != "simulated":
            return wall
        from airflow_provider_skynomad.clouds.simulated_clock import SimClock, read_shared_settings

        try:
            settings = read_shared_settings(Path(self.state_dir).expanduser())
            epoch, speed, start = settings["epoch_wall"], settings["speed"], settings["trace_start"]
            clock = SimClock(float(epoch), float(speed), pd.Timestamp(start))
        except (OSError, ValueError, KeyError, TypeError):
            return wall
        return clock.now()

    def to_dict(self) -> dict:
        data = asdict(self)
        data["parts"] = [part.to_dict() for part in self.parts]
        data.pop("checkpoint_signing_secret", None)  # a secret: never in plain data that may be shown
        return data

    @classmethod
    def default(cls) -> SkyNomadConfig:
        from airflow_provider_skynomad.market.table import default_market_url

        return cls(market_url=default_market_url())

    @classmethod
    def from_connection(cls, conn: Any, parts: tuple[SkyNomadConfig, ...] = ()) -> SkyNomadConfig:
        """Read a `skynomad`, `skynomad_aws` or `skynomad_gcp` Connection (standard fields + extra),
        see the module docstring. `parts`: the configs of the connections its ``cloud_connections``
        lists, already read (the hook reads them)."""
        from airflow_provider_skynomad.market.table import default_market_url

        extra = _extra_of(conn)
        conn_type = getattr(conn, "conn_type", None) or "skynomad"

        if conn_type in CLOUD_CONN_TYPES:  # a per-cloud form names fields as its cloud's arguments
            extra = {CONFIG_FIELDS[CLOUD_CONN_TYPES[conn_type]].get(k, k): v for k, v in extra.items()}

        def pick(name: str, default=None):
            # Connection forms store plain keys; older UIs stored extra__<conn type>__<name>.
            for key in (name, f"extra__skynomad__{name}", f"extra__{conn_type}__{name}"):
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
        speed = _number("speed", pick("speed", 3600.0))
        for name in ("market_url", "trace_path", "state_dir", "aws_conn_id", "gcp_conn_id", "gcp_project", "cloud"):
            value = pick(name)
            if value is not None and not isinstance(value, str):
                raise SkyNomadConfigError(f"skynomad connection: {name} must be text, got {value!r}")
        options = _json_field("cloud_options", pick("cloud_options", {})) or {}
        if not isinstance(options, dict):
            raise SkyNomadConfigError(f"skynomad connection: cloud_options must be a JSON object, got {options!r}")
        cloud = str(pick("cloud", "simulated")).lower()
        if conn_type in CLOUD_CONN_TYPES:
            cloud = CLOUD_CONN_TYPES[conn_type]
            own = ("speed", "trace_path", "state_dir", *CONFIG_FIELDS[cloud].values(), *_NOT_CLOUD_OPTIONS)
            fields = {k.removeprefix(f"extra__{conn_type}__"): v for k, v in extra.items() if v not in (None, "")}
            options = {**options, **{k: _json_field(k, v) for k, v in fields.items() if k not in own}}
        elif parts:
            cloud = "multi"
        budget = pick("probe_budget_usd_per_day")
        budget = None if budget is None else _number("probe_budget_usd_per_day", budget)
        return cls(
            market_url=market_url or default_market_url(),
            cloud=cloud,
            trace_path=str(Path(pick("trace_path", defaults["trace_path"])).expanduser()),
            state_dir=str(Path(pick("state_dir", defaults["state_dir"])).expanduser()),
            speed=speed,
            aws_conn_id=pick("aws_conn_id", "aws_default"),
            gcp_conn_id=pick("gcp_conn_id", "google_cloud_default"),
            gcp_project=pick("gcp_project"),
            checkpoint_bucket=pick("checkpoint_bucket"),
            cloud_options=dict(options),
            probe_budget_usd_per_day=budget,
            parts=tuple(parts),
            checkpoint_signing_secret=pick("checkpoint_signing_secret"),
        )

    @staticmethod
    def default_fields() -> dict:
        return {"trace_path": bundled_trace(), "state_dir": str(skynomad_home() / "cloud")}


def _number(name: str, value) -> float:
    """A finite number from a form field (text or JSON number; never a JSON true/false), else a config error."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SkyNomadConfigError(f"skynomad connection: {name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise SkyNomadConfigError(f"skynomad connection: {name} must be a finite number, got {value!r}")
    return number


def _json_field(name: str, value):
    """A form field holding a JSON object or list arrives as text: parse it, naming the field if it is not JSON."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        import json

        try:
            return json.loads(value)
        except ValueError as exc:
            raise SkyNomadConfigError(f"skynomad connection: {name} is not valid JSON: {exc}") from None
    return value


def cloud_connection_ids(conn: Any) -> list[str]:
    """The connection ids a `skynomad` connection's ``cloud_connections`` field lists (comma-separated or a list)."""
    value = _extra_of(conn).get("cloud_connections")
    if value in (None, "", []):
        return []
    ids = value if isinstance(value, list) else str(value).split(",")
    return [str(i).strip() for i in ids if str(i).strip()]


def _extra_of(conn: Any) -> dict:
    extra = getattr(conn, "extra_dejson", None)
    if extra is None:
        import json

        raw = getattr(conn, "extra", None)
        extra = json.loads(raw) if raw else {}
    return dict(extra or {})


def make_cloud(config: SkyNomadConfig) -> Cloud:
    """The cloud a config names, behind bounded API retries. Imports lazily: a simulated run never
    loads boto3 or google.

    `cloud_options` go to the cloud's constructor; a key it does not take, or one the connection
    sets through its own field, is refused with SkyNomadConfigError naming it and the accepted keys.
    """
    import inspect

    if config.cloud == "multi":
        from airflow_provider_skynomad.clouds.multi import MultiCloud

        return MultiCloud({part.cloud: make_cloud(part) for part in config.parts})
    require_extra(config.cloud)  # aws / gcp without their extra: say which to install
    if config.cloud == "simulated":
        from airflow_provider_skynomad.clouds.simulated import SimulatedCloud as cls

        fixed = {"trace_path": config.trace_path, "state_dir": config.state_dir, "speed": config.speed}
        fields = {"trace_path": "trace_path", "state_dir": "state_dir", "speed": "speed"}
    elif config.cloud == "aws":
        from airflow_provider_skynomad.clouds.aws import AwsCloud as cls

        fields = CONFIG_FIELDS["aws"]
        fixed = {arg: getattr(config, name) for arg, name in fields.items()}
    else:
        from airflow_provider_skynomad.clouds.gcp import GcpCloud as cls

        fields = CONFIG_FIELDS["gcp"]
        fixed = {arg: getattr(config, name) for arg, name in fields.items()}
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
    from airflow_provider_skynomad.clouds.retry import with_retries

    return with_retries(cls(**fixed, **options))  # every caller gets bounded API retries (clouds/retry.py)


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
        from airflow_provider_skynomad.market.table import MarketTable

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
            return False, f"market table at {config.display_market_url}: {exc}"
        try:
            problems = make_cloud(config).check()
        except Exception as exc:  # noqa: BLE001 - a missing extra, refused options, unreachable API
            return False, f"{config.cloud} cloud: {type(exc).__name__}: {exc}"
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
