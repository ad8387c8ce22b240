"""Packaging as Airflow providers do it: one version, clouds as extras, provider info that matches the code."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from importlib import resources
from pathlib import Path

import pytest

# Importing hooks and operators imports airflow, which reads its configuration on import: keep it
# out of ~/airflow when this file runs on its own (tests/support/airflow_env.py sets a home when it runs first).
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="skynomad-packaging-"))

import airflow_provider_skynomad  # noqa: E402
from airflow_provider_skynomad.get_provider_info import get_provider_info  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_provider_skynomad"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


# ------------------------------------------------------------------------------------ the version


def test_the_version_has_one_source():
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "airflow_provider_skynomad/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\S*)", airflow_provider_skynomad.__version__)
    # no hand-typed second copy in the provider info
    assert airflow_provider_skynomad.__version__ not in (PACKAGE / "get_provider_info.py").read_text()
    assert '"versions": [__version__]' in (PACKAGE / "get_provider_info.py").read_text()


def test_provider_info_and_installed_metadata_report_the_package_version():
    assert get_provider_info()["versions"] == [airflow_provider_skynomad.__version__]
    assert importlib.metadata.version("airflow-provider-skynomad") == airflow_provider_skynomad.__version__


# ------------------------------------------------------------------------------- the dependencies


def test_clouds_are_extras_not_hard_dependencies():
    required = names(PROJECT["dependencies"])
    assert {"apache-airflow", "scikit-learn", "pandas", "sqlalchemy", "numpy"} <= required
    assert not {"apache-airflow-providers-amazon", "apache-airflow-providers-google"} & required
    assert "apache-airflow>=3.3,<4" in PROJECT["dependencies"]
    assert any(r.lower().startswith("sqlalchemy>=2") for r in PROJECT["dependencies"])
    extras = PROJECT["optional-dependencies"]
    assert names(extras["aws"]) == {"apache-airflow-providers-amazon"}
    assert names(extras["gcp"]) == {"apache-airflow-providers-google"}


def test_the_dev_extra_that_make_installs_brings_both_clouds():
    dev = PROJECT["optional-dependencies"]["dev"]
    (itself,) = [r for r in dev if r.startswith("airflow-provider-skynomad[")]
    assert {"aws", "gcp"} <= set(itself.split("[")[1].rstrip("]").split(","))
    assert {"pytest", "hatchling"} <= names(dev)
    assert "pip install --quiet -e '.[dev]'" in (ROOT / "Makefile").read_text()
    # and they are installed here (what the AWS and GCP tests use)
    for provider in ("apache-airflow-providers-amazon", "apache-airflow-providers-google"):
        importlib.metadata.version(provider)


def test_the_wheel_ships_the_example_dags_inside_the_package():
    wheel = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["sources"] == {"example_dags": "airflow_provider_skynomad/example_dags"}
    assert set(wheel["only-include"]) == {"airflow_provider_skynomad", "example_dags"}


# ------------------------------------------------------------------- provider info against the code


def test_provider_info_follows_airflows_schema():
    import jsonschema

    schema = json.loads((resources.files("airflow") / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)
    assert get_provider_info()["package-name"] == PROJECT["name"]


def test_listed_modules_exist():
    info = get_provider_info()
    for section in ("operators", "triggers", "hooks"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)


def _import_class(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_connection_types_are_the_hooks():
    types = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
    assert set(types) == {"skynomad", "skynomad_aws", "skynomad_gcp"}
    for conn_type, connection in types.items():
        hook = _import_class(connection["hook-class-name"])
        assert hook.conn_type == conn_type
        assert hook.hook_name == connection["hook-name"]


def test_connection_fields_are_the_ones_the_hook_reads():
    from airflow_provider_skynomad.hooks.skynomad import CLOUD_CHOICES, SkyNomadConfig

    types = {c["connection-type"]: c["conn-fields"] for c in get_provider_info()["connection-types"]}
    fields = types["skynomad"]
    source = (PACKAGE / "config.py").read_text()  # what the hook reads a connection with
    read = set(re.findall(r'pick\("(\w+)"', source)) | set(re.findall(r'_extra_of\(conn\)\.get\("(\w+)"', source))
    # read, shown on the per-cloud forms
    legacy = {"aws_conn_id", "checkpoint_bucket", "gcp_conn_id", "gcp_project", "checkpoint_signing_secret"}
    assert set(fields) == read - legacy
    assert fields["cloud"]["schema"]["enum"] == list(CLOUD_CHOICES)
    defaults = SkyNomadConfig(market_url="sqlite://")
    for name, field in fields.items():
        if "default" in field["schema"]:
            assert getattr(defaults, name) == field["schema"]["default"], name


def test_the_generated_cloud_forms_are_current():
    from airflow_provider_skynomad.hooks.cloud_forms import CLOUD_FIELDS
    from airflow_provider_skynomad.hooks.forms import all_cloud_fields

    assert all_cloud_fields() == CLOUD_FIELDS, "run: python -m airflow_provider_skynomad.hooks.forms"


@pytest.mark.parametrize(("conn_type", "cloud"), [("skynomad_aws", "aws"), ("skynomad_gcp", "gcp")])
def test_each_cloud_form_has_a_described_field_for_every_setting_of_its_cloud(conn_type, cloud):
    from airflow_provider_skynomad.hooks.forms import NOT_FIELDS
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, make_cloud

    fields = {c["connection-type"]: c["conn-fields"] for c in get_provider_info()["connection-types"]}[conn_type]
    from airflow_provider_skynomad.clouds.wrapped import WrappedCloud

    made = make_cloud(SkyNomadConfig(market_url="sqlite://", cloud=cloud))
    while isinstance(made, WrappedCloud):  # the retries make_cloud puts in front of every cloud
        made = made.inner
    cls = type(made)
    settings = {
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.name not in NOT_FIELDS and p.kind is not p.VAR_KEYWORD
    }
    assert set(fields) - {"market_url", "probe_budget_usd_per_day"} == settings
    for name in settings:
        assert len(fields[name]["description"]) > 10, f"{cls.__name__}.{name} has no :param: line"


def _operator_classes():
    from airflow.sdk import BaseOperator

    for entry in get_provider_info()["operators"]:
        for module_name in entry["python-modules"]:
            module = importlib.import_module(module_name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseOperator) and cls.__module__ == module_name:
                    yield cls


def test_extra_links_are_the_operators_links():
    from airflow.sdk import BaseOperatorLink

    listed = get_provider_info()["extra-links"]
    used = {
        f"{type(link).__module__}.{type(link).__qualname__}"
        for cls in _operator_classes()
        for link in cls.operator_extra_links
    }
    assert set(listed) == used and len(listed) == len(set(listed))
    for path in listed:
        assert issubclass(_import_class(path), BaseOperatorLink)


def test_the_listed_plugin_is_the_one_in_the_code():
    plugins = [
        f"{'.'.join(path.relative_to(ROOT).with_suffix('').parts).removesuffix('.__init__')}.{node.name}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and any("AirflowPlugin" in ast.unparse(base) for base in node.bases)
    ]
    assert plugins == ["airflow_provider_skynomad.plugin.SkyNomadPlugin"]
    (listed,) = get_provider_info()["plugins"]
    assert listed["plugin-class"] == plugins[0]
    from airflow.plugins_manager import AirflowPlugin

    cls = _import_class(listed["plugin-class"])
    assert issubclass(cls, AirflowPlugin) and cls.name == listed["name"]
    assert [view["destination"] for view in cls.external_views] == ["task_instance", "nav", "nav"]
    assert [app["url_prefix"] for app in cls.fastapi_apps] == ["/skynomad"]
    # Airflow loads provider plugins only with lazy_discover_providers off: the entry point loads it always.
    assert PROJECT["entry-points"]["airflow.plugins"] == {"skynomad": "airflow_provider_skynomad.plugin:SkyNomadPlugin"}


def test_airflow_discovers_the_provider():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    manager.initialize_providers_list()
    provider = manager.providers["airflow-provider-skynomad"]
    assert provider.version == airflow_provider_skynomad.__version__
    assert set(get_provider_info()["extra-links"]) <= set(manager.extra_links_class_names)
    manager.initialize_providers_plugins()
    assert "airflow_provider_skynomad.plugin.SkyNomadPlugin" in {p.plugin_class for p in manager.plugins}


@pytest.mark.parametrize("module", ["airflow_provider_skynomad", "airflow_provider_skynomad.get_provider_info"])
def test_the_entry_point_modules_stay_light(module):
    # ProvidersManager imports get_provider_info in every Airflow process: no heavy imports there.
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0
    }
    # its own package's literal modules (the version, the generated connection forms) are all it may import
    assert imported <= {"__future__", "airflow_provider_skynomad", "airflow_provider_skynomad.hooks.cloud_forms"}


def test_a_dag_file_naming_the_operator_does_not_import_the_planner():
    """The DAG processor and every worker parse DAG files often; the planner, scikit-learn and scipy
    are the runtime's, loaded when a task runs (seconds per parse on a busy worker otherwise)."""
    heavy = ("sklearn", "scipy", "airflow_provider_skynomad.jobs.worker", "airflow_provider_skynomad.planner.registry")
    code = (
        "import sys\n"
        "from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator\n"
        "from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
