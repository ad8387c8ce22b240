"""Issue 31, break 7: an error about a connection field names the field and what it expected, never the
value found there. A value typed into the wrong field may be the signing secret or the database
password, and these errors reach the connection form, task logs and `skynomad cleanup`'s stderr."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, SkyNomadConfigError

SECRET = "S3CRET-sign-9f2c71"
PASSWORD = "hunter2-pw-77"


def _conn(extra: dict, conn_type: str = "skynomad") -> SimpleNamespace:
    return SimpleNamespace(
        conn_type=conn_type, host="db.example", login="u", password=PASSWORD, port=5432, schema="m", extra_dejson=extra
    )


MALFORMED = [
    ({"market_url": [f"postgresql://u:{PASSWORD}@db/m"]}, "skynomad", "market_url must be text"),
    ({"cloud_options": f"checkpoint_signing_secret={SECRET}"}, "skynomad", "cloud_options must be a JSON object"),
    ({"cloud_options": json.dumps([SECRET, PASSWORD])}, "skynomad", "cloud_options must be a JSON object"),
    ({"checkpoint_signing_secret": {"value": SECRET}}, "skynomad", "checkpoint_signing_secret must be text"),
    ({"speed": SECRET}, "skynomad", "speed must be a number"),
    ({"probe_budget_usd_per_day": PASSWORD}, "skynomad", "probe_budget_usd_per_day must be a number"),
    ({"cloud": SECRET}, "skynomad", "cloud must be one of simulated, aws, gcp"),
    ({"aws_conn_id": {"password": PASSWORD}}, "skynomad_aws", "aws_conn_id must be text"),
    ({"subnets": "{" + SECRET}, "skynomad_aws", "subnets is not valid JSON"),
]


@pytest.mark.parametrize(("extra", "conn_type", "says"), MALFORMED)
def test_break_7_a_malformed_extra_names_the_field_never_the_secret(extra, conn_type, says):
    with pytest.raises(SkyNomadConfigError) as raised:
        SkyNomadConfig.from_connection(_conn({"checkpoint_signing_secret": SECRET, **extra}, conn_type))
    message = str(raised.value)
    assert says in message, message
    assert SECRET.lower() not in message.lower() and PASSWORD not in message, message


def test_break_7_skynomad_cleanup_names_the_field_on_stderr_never_the_secret(monkeypatch, capsys):
    from airflow_provider_skynomad.cli import main

    connection = {
        "conn_type": "skynomad",
        "host": "db.example",
        "login": "u",
        "password": PASSWORD,
        "extra": {"cloud": "aws", "checkpoint_signing_secret": SECRET, "cloud_options": f"secret={SECRET}"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps(connection))
    assert main(["cleanup", "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert "cloud_options must be a JSON object" in captured.err, captured.err
    for text in (captured.err, captured.out):
        assert SECRET not in text and PASSWORD not in text, text


def test_redact_takes_out_the_password_and_every_signing_secret():
    config = SkyNomadConfig(
        market_url=f"postgresql://u:{PASSWORD}@db/m",
        checkpoint_signing_secret=SECRET,
    )
    said = config.redact(f"failed for postgresql://u:{PASSWORD}@db/m with key {SECRET}")
    assert said == "failed for postgresql://u:***@db/m with key ***"
