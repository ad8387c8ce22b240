"""Optional extras: `cloud: aws` / `gcp` without [aws] / [gcp] is a clear ImportError saying what to install."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_skynomad.utils.extras import (
    EXTRAS,
    NEEDS_NO_EXTRA,
    MissingExtraError,
    is_installed,
    require_extra,
)

PACKAGE = Path(__file__).resolve().parents[3] / "airflow_provider_skynomad"


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_missing_extra_says_what_to_install(extra, monkeypatch):
    monkeypatch.setitem(sys.modules, EXTRAS[extra], None)  # what a missing module looks like to import
    with pytest.raises(MissingExtraError) as exc:
        require_extra(extra)
    assert isinstance(exc.value, ImportError)
    assert f"install airflow-provider-skynomad[{extra}]" in str(exc.value)
    assert EXTRAS[extra] in str(exc.value) and exc.value.name == EXTRAS[extra] and exc.value.extra == extra


def test_a_missing_parent_package_counts_as_missing():
    assert not is_installed("skynomad_no_such_package.sub")
    with pytest.raises(MissingExtraError, match=r"install airflow-provider-skynomad\[aws\]"):
        require_extra("aws", "skynomad_no_such_package.sub")


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_installed_extras_pass(extra):
    # the dev extra (what `make` installs for the tests) includes both clouds
    require_extra(extra)


def test_simulated_needs_no_extra_even_without_the_providers(monkeypatch):
    for module in EXTRAS.values():
        monkeypatch.setitem(sys.modules, module, None)
    for kind in NEEDS_NO_EXTRA:
        require_extra(kind)


def test_unknown_extra_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown extra 'azure'"):
        require_extra("azure")


def test_every_cloud_kind_is_covered():
    from airflow_provider_skynomad.get_provider_info import get_provider_info
    from airflow_provider_skynomad.hooks.skynomad import CLOUD_CONN_TYPES

    types = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
    kinds = types["skynomad"]["conn-fields"]["cloud"]["schema"]["enum"]
    assert sorted(kinds) == sorted([*EXTRAS, *NEEDS_NO_EXTRA])
    assert sorted(CLOUD_CONN_TYPES.values()) == sorted(EXTRAS)  # each real cloud's own connection type


@pytest.mark.parametrize("extra, source", [("aws", "clouds/aws/cloud.py"), ("gcp", "clouds/gcp/cloud.py")])
def test_each_extra_names_the_provider_its_cloud_imports(extra, source):
    imported = set(re.findall(r"from (airflow\.providers\.\w+)", (PACKAGE / source).read_text()))
    assert imported == {EXTRAS[extra]}


def test_checking_an_extra_imports_nothing_but_parent_packages():
    # make_cloud runs where airflow is imported already (and, with it, each provider's package
    # __init__); the check itself must import nothing more: no hook modules, no boto3 or google client.
    code = (
        "import sys, airflow.sdk; before = set(sys.modules); "
        "from airflow_provider_skynomad.utils.extras import require_extra; require_extra('aws'); require_extra('gcp'); "
        "print(sorted(set(sys.modules) - before - {'airflow_provider_skynomad.utils.extras', "
        "'airflow_provider_skynomad.utils', 'airflow_provider_skynomad.exceptions'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
