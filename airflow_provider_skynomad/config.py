"""`SkyNomadConfig`: what a `skynomad` connection says, as plain data (read by hooks/skynomad.py).

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
theirs is an argument of the cloud's constructor (`clouds/aws/cloud.py`, `clouds/gcp/cloud.py`), next to the
market database fields. To plan over several clouds at once, a ``skynomad`` connection lists
them in ``cloud_connections`` (``skynomad_aws_prod,skynomad_gcp_prod``): the market table is its
own, the clouds are theirs.

A missing ``skynomad_default`` connection means "all embedded defaults", so the demo and the
example DAGs run on a fresh install. Passwords never leave this module unredacted: use
``SkyNomadConfig.display_market_url`` in messages. An error about a field names the field and what
it expected, never the value found (a value typed into the wrong field may be a secret, and these
errors reach the connection form, task logs and the CLI's stderr); `SkyNomadConfig.redact` takes
this config's secrets out of any other text shown.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from airflow_provider_skynomad.exceptions import SkyNomadConfigError

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
            raise SkyNomadConfigError(f"skynomad connection: cloud must be one of {', '.join(CLOUD_CHOICES)}")
        speed = self.speed
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not (math.isfinite(speed) and speed > 0):
            raise SkyNomadConfigError(f"skynomad connection: speed must be a finite number > 0, got {_kind(speed)}")
        budget = self.probe_budget_usd_per_day
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 <= budget < math.inf
        ):
            raise SkyNomadConfigError(
                f"skynomad connection: probe_budget_usd_per_day must be a number of USD ≥ 0, got {_kind(budget)}"
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

    def redact(self, text: str) -> str:
        """`text` with this config's secrets (the market URL's password, every signing secret, its
        parts' too) replaced by ``***``: for messages built from errors raised elsewhere."""
        for secret in self._secrets():
            text = text.replace(secret, "***")
        return text

    def _secrets(self) -> list[str]:
        from sqlalchemy.engine import make_url

        found = [self.checkpoint_signing_secret]
        try:
            found.append(make_url(self.market_url).password)
        except Exception:  # noqa: BLE001 - an unparsable URL: hide all of it
            found.append(self.market_url)
        found += [secret for part in self.parts for secret in part._secrets()]
        return sorted({str(s) for s in found if s}, key=len, reverse=True)

    @property
    def wall_seconds_per_cloud_hour(self) -> float:
        """How long one hour of cloud time takes on the wall clock (1 h for real clouds)."""
        return 3600.0 / float(self.speed) if self.cloud == "simulated" else 3600.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data["parts"] = [part.to_dict() for part in self.parts]
        data.pop("checkpoint_signing_secret", None)  # a secret: never in plain data that may be shown
        return data

    @classmethod
    def default(cls) -> SkyNomadConfig:
        from airflow_provider_skynomad.market.store.table import default_market_url

        return cls(market_url=default_market_url())

    @classmethod
    def from_connection(cls, conn: Any, parts: tuple[SkyNomadConfig, ...] = ()) -> SkyNomadConfig:
        """Read a `skynomad`, `skynomad_aws` or `skynomad_gcp` Connection (standard fields + extra),
        see the module docstring. `parts`: the configs of the connections its ``cloud_connections``
        lists, already read (the hook reads them)."""
        from airflow_provider_skynomad.market.store.table import default_market_url

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
        texts = ("market_url", "trace_path", "state_dir", "aws_conn_id", "gcp_conn_id", "gcp_project", "cloud")
        for name in (*texts, "checkpoint_signing_secret"):
            value = pick(name)
            if value is not None and not isinstance(value, str):
                raise SkyNomadConfigError(f"skynomad connection: {name} must be text, got {_kind(value)}")
        options = _json_field("cloud_options", pick("cloud_options", {})) or {}
        if not isinstance(options, dict):
            raise SkyNomadConfigError(
                'skynomad connection: cloud_options must be a JSON object such as {"regions": ["us-east-1"]}, '
                f"got {_kind(options)}"
            )
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
        raise SkyNomadConfigError(f"skynomad connection: {name} must be a number, got {_kind(value)}") from None
    if not math.isfinite(number):
        raise SkyNomadConfigError(f"skynomad connection: {name} must be a finite number, got {_kind(number)}")
    return number


def _kind(value) -> str:
    """What kind of value a field held, in words, for an error that must not show the value itself."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float) and not math.isfinite(value):
        return "an infinite number or NaN"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "empty text" if not value.strip() else "text that is not one"
    return {list: "a list", dict: "an object"}.get(type(value), f"a {type(value).__name__}")


def _json_field(name: str, value):
    """A form field holding a JSON object or list arrives as text: parse it, naming the field if it is not JSON."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        import json

        try:
            return json.loads(value)
        except ValueError as exc:
            raise SkyNomadConfigError(f"skynomad connection: {name} is not valid JSON: {exc}") from None
    return value


def declared_speed(conn_id: str = DEFAULT_CONN_ID, environ=None) -> float | None:
    """Cloud seconds per wall second of connection `conn_id` as the environment defines it, or None.

    A DAG file is parsed by the dag-processor under a 30 s import timeout and must look up no
    connection and open no database (each lookup is a round trip to Airflow's metadata database,
    which a busy box can hold locked for longer). What a DAG needs at parse time (the probe DAG's
    schedule, a `DeadlineAlert` interval) depends only on how fast the connection's clock runs, and
    the recipes (README, `skynomad demo`, the tests) define the connection in the environment
    (``AIRFLOW_CONN_<ID>``, JSON or URI): this reads that text and nothing else. 1.0 for a real
    cloud; the simulated cloud's ``speed`` (default 3600). None when the environment does not define
    the connection (it may live in the metadata database or a secrets backend, which a parse must
    not ask): callers then take a real cloud's clock and say so when the task runs.
    """
    environ = os.environ if environ is None else environ
    raw = environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if not raw:
        return None
    conn_type, extra = _environment_connection(conn_id, raw)
    if conn_type in CLOUD_CONN_TYPES or extra.get("cloud_connections"):
        return 1.0
    cloud = str(extra.get("cloud") or extra.get("extra__skynomad__cloud") or "simulated").lower()
    if cloud != "simulated":
        return 1.0
    speed = _number("speed", extra.get("speed", extra.get("extra__skynomad__speed", 3600.0)))
    if not speed > 0:
        raise SkyNomadConfigError(f"skynomad connection {conn_id!r}: speed must be a finite number > 0, got {speed!r}")
    return speed


def _environment_connection(conn_id: str, raw: str) -> tuple[str, dict]:
    """(conn_type, extra) of an ``AIRFLOW_CONN_<ID>`` value, in Airflow's JSON or URI form."""
    import json

    text = raw.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SkyNomadConfigError(f"AIRFLOW_CONN_{conn_id.upper()} is not valid JSON: {exc}") from None
        extra = _json_field("extra", data.get("extra") or {})
        return str(data.get("conn_type") or "skynomad"), dict(extra) if isinstance(extra, dict) else {}
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(text)
    query = dict(parse_qsl(parts.query))
    extra = _json_field("__extra__", query.pop("__extra__")) if "__extra__" in query else query
    return parts.scheme.replace("-", "_") or "skynomad", dict(extra) if isinstance(extra, dict) else {}


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
