"""Provider metadata for Airflow's ProvidersManager (`apache_airflow_provider` entry point)."""

from __future__ import annotations

from airflow_provider_skynomad import __version__

MARKET_FORM = {
    "hidden-fields": ["extra"],
    "relabeling": {
        "host": "Market DB host (PostgreSQL; empty = embedded SQLite)",
        "schema": "Market DB database",
        "login": "Market DB user",
        "password": "Market DB password",
        "port": "Market DB port",
    },
    "placeholders": {"host": "127.0.0.1", "port": "5432", "schema": "skynomad"},
}
MARKET_URL_FIELD = {
    "label": "Market table URL",
    "description": "SQLAlchemy URL of the market table; overrides the host fields. "
    "Empty and no host: sqlite under $SKYNOMAD_HOME.",
    "schema": {"type": ["string", "null"]},
}
PROBE_BUDGET_FIELD = {
    "label": "Probe budget (USD per day)",
    "description": "The most the skynomad_probe DAG spends per day on launch probes in this connection's "
    "clouds; free signals (placement scores, price history) cost nothing.",
    "schema": {"type": ["number", "null"], "minimum": 0},
}


def _cloud_connection(conn_type: str, hook: str, name: str, cloud: str) -> dict:
    """A per-cloud form: the market table's fields, then one field per argument of the cloud's class
    (generated into `hooks/cloud_forms.py` by hooks/forms.py, so nothing heavy is imported here)."""
    from airflow_provider_skynomad.hooks.cloud_forms import CLOUD_FIELDS

    return {
        "connection-type": conn_type,
        "hook-class-name": f"airflow_provider_skynomad.hooks.skynomad.{hook}",
        "hook-name": name,
        "ui-field-behaviour": MARKET_FORM,
        "conn-fields": {
            "market_url": MARKET_URL_FIELD,
            "probe_budget_usd_per_day": PROBE_BUDGET_FIELD,
            **CLOUD_FIELDS[cloud],
        },
    }


def get_provider_info() -> dict:
    """What ProvidersManager reads without importing the hooks; tests/unit/test_packaging.py checks it."""
    return {
        "package-name": "airflow-provider-skynomad",
        "name": "SkyNomad",
        "description": "Deadline-bound GPU batch jobs on spot instances across regions (SkyNomad planner).",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "SkyNomad",
                "external-doc-url": "https://github.com/andylizf/skynomad-artifact",
                "tags": ["service"],
            }
        ],
        "operators": [
            {
                "integration-name": "SkyNomad",
                "python-modules": [
                    "airflow_provider_skynomad.operators.skynomad",
                    "airflow_provider_skynomad.operators.probe",
                ],
            }
        ],
        "triggers": [
            {"integration-name": "SkyNomad", "python-modules": ["airflow_provider_skynomad.triggers.skynomad"]}
        ],
        "hooks": [{"integration-name": "SkyNomad", "python-modules": ["airflow_provider_skynomad.hooks.skynomad"]}],
        "extra-links": [
            "airflow_provider_skynomad.links.skynomad.SkyNomadGroupLink",
            "airflow_provider_skynomad.links.job.SkyNomadJobLink",
        ],
        "plugins": [{"name": "skynomad", "plugin-class": "airflow_provider_skynomad.plugin.SkyNomadPlugin"}],
        "connection-types": [
            {
                "connection-type": "skynomad",
                "hook-class-name": "airflow_provider_skynomad.hooks.skynomad.SkyNomadHook",
                "hook-name": "SkyNomad",
                "ui-field-behaviour": MARKET_FORM,
                "conn-fields": {
                    "market_url": MARKET_URL_FIELD,
                    "probe_budget_usd_per_day": PROBE_BUDGET_FIELD,
                    "cloud": {
                        "label": "Cloud",
                        "description": "Where jobs run: simulated (replays a trace, no account). For AWS or GCP "
                        "use a 'SkyNomad on AWS' / 'SkyNomad on GCP' connection; aws and gcp here take their "
                        "settings from Cloud options.",
                        "schema": {"type": "string", "enum": ["simulated", "aws", "gcp"], "default": "simulated"},
                    },
                    "trace_path": {
                        "label": "Simulated: trace file",
                        "description": "Market trace the simulated cloud replays (default: bundled GCP H100 week).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "state_dir": {
                        "label": "Simulated: state directory",
                        "description": "Shared by worker, triggerer and retries (default: $SKYNOMAD_HOME/cloud).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "speed": {
                        "label": "Simulated: speed",
                        "description": "Simulated seconds per wall-clock second (3600 = one hour per second).",
                        "schema": {"type": ["number", "null"], "minimum": 0, "default": 3600},
                    },
                    "cloud_connections": {
                        "label": "Several clouds: their connections",
                        "description": "To plan over AWS and GCP zones at once: the ids of a 'SkyNomad on AWS' "
                        "and a 'SkyNomad on GCP' connection, comma-separated (Cloud is then ignored).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "cloud_options": {
                        "label": "Cloud options",
                        "description": "JSON object of further arguments for the cloud, e.g. "
                        '{"preemption_notice_seconds": 120} (simulated); unknown keys are refused, naming the '
                        "accepted ones.",
                        "schema": {"type": ["object", "null"]},
                    },
                },
            },
            _cloud_connection("skynomad_aws", "SkyNomadAwsHook", "SkyNomad on AWS", "aws"),
            _cloud_connection("skynomad_gcp", "SkyNomadGcpHook", "SkyNomad on GCP", "gcp"),
        ],
    }
