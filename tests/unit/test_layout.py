"""The package's architecture, checked: packages in layers, no import cycle, one exception hierarchy.

`LAYERS` is the one place the layer order is written. A package may import its own layer and the
layers below it, never one above; a new package (or top-level module) must be given a layer here.
The graph is read from the source (every ``import``, at the top or inside a function: a lazy import
is still a dependency), so the test costs no imports.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "airflow_provider_skynomad"
PACKAGE = ROOT.name

LAYERS: list[tuple[str, ...]] = [
    ("<root>", "exceptions", "utils"),  # the version, every error class, SQLite/atomic-file/extras helpers
    ("market",),  # market data: the observation format, grids, views, prices; market.store its database
    ("forecasts",),  # lifetime forecasters fitted on market history
    ("planner",),  # pure decisions: job specs, the policies, one job's steps and bill (rollout, costs every policy)
    ("simulation",),  # policies replayed on trace windows (one job, a fleet), the optimum, evaluation reports
    ("workload",),  # the training workload an instance runs
    ("agent",),  # the agent around the workload on the instance: checkpoints, stores, notices
    ("config",),  # SkyNomadConfig: what a `skynomad` connection says, as plain data
    ("clouds",),  # the Cloud interface, its backends (aws/, gcp/, simulated/), wrappers and factory
    ("probing",),  # which markets to probe, the probe round and its bills
    ("hooks",),  # Airflow connections read into a config, a market table and a cloud
    ("jobs",),  # the job runtime the operator and the trigger share
    ("links",),  # extra links in the Airflow UI
    ("triggers",),  # the deferrable operator's trigger
    ("operators", "get_provider_info"),  # the operators, and the provider's metadata
    ("plugin",),  # the UI pages
    ("cli",),  # the `skynomad` command
]


def module_imports() -> dict[str, set[str]]:
    """Module → the package's modules it imports, at the top or inside functions (both can cycle)."""
    return {module: set(targets) for module, targets in _module_imports().items()}


@functools.cache
def _module_imports() -> dict[str, frozenset[str]]:
    """The graph read from the source once per session (every test here asks for it)."""
    files = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                prefix = ".".join([*base, *([node.module] if node.module else [])])
                targets |= {f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in files else prefix for a in node.names}
        graph[name] = frozenset(t for t in targets if t in files and t != name)
    return graph


def package_of(module: str) -> str:
    """`airflow_provider_skynomad.clouds.aws.cloud` → ``clouds``; a top-level module is its own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def package_imports() -> dict[str, dict[str, set[str]]]:
    """Package → package it imports → the module imports that make the edge (for the failure message)."""
    graph: dict[str, dict[str, set[str]]] = {}
    for module, targets in module_imports().items():
        edges = graph.setdefault(package_of(module), {})
        for target in targets:
            if package_of(target) != package_of(module):
                edges.setdefault(package_of(target), set()).add(f"{module} → {target}")
    return graph


def layer_of() -> dict[str, int]:
    return {package: i for i, layer in enumerate(LAYERS) for package in layer}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle's first sighting by depth-first search (enough to name each one)."""
    cycles, done, path = [], set(), []

    def visit(node: str) -> None:
        if node in path:
            cycle = path[path.index(node) :] + [node]
            cycles.append(cycle)
            return
        if node in done:
            return
        path.append(node)
        for target in sorted(graph.get(node, ())):
            visit(target)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    return cycles


def test_every_package_has_exactly_one_layer():
    placed = [package for layer in LAYERS for package in layer]
    assert len(placed) == len(set(placed)), "a package is in two layers"
    found = {package_of(module) for module in module_imports()}
    assert found == set(placed), (
        f"give these a layer: {sorted(found - set(placed))}; gone: {sorted(set(placed) - found)}"
    )


def test_no_import_cycle_between_packages():
    graph = {package: set(targets) for package, targets in package_imports().items()}
    cycles = find_cycles(graph)
    assert cycles == [], "import cycles between packages: " + "; ".join(" → ".join(c) for c in cycles)


def test_no_import_cycle_between_modules():
    cycles = find_cycles(module_imports())
    assert cycles == [], "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def test_a_lower_layer_never_imports_a_higher_one():
    layers = layer_of()
    upward = [
        f"{package} ({LAYERS[layers[package]]}) imports {target} ({LAYERS[layers[target]]}): {sorted(why)[:3]}"
        for package, targets in package_imports().items()
        for target, why in targets.items()
        if layers[target] > layers[package]
    ]
    assert upward == [], "\n".join(upward)


def test_the_layer_test_sees_a_cycle_and_an_upward_import():
    """The checks above are not vacuous: a made-up cycle and a made-up upward edge are caught."""
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    layers = layer_of()
    assert layers["market"] < layers["planner"] < layers["clouds"] < layers["jobs"] < layers["cli"]
    assert "planner" not in package_imports().get("market", {})
    assert "simulation" not in package_imports().get("planner", {})  # policies are costed by planner.rollout


def test_the_job_side_stays_free_of_airflow():
    """The workload, the agent and the exceptions run on instances: they import neither Airflow nor
    anything above them (what their layers allow is checked above; this is the third-party half)."""
    for package in ("workload", "agent"):
        for path in (ROOT / package).rglob("*.py"):
            names = {n.module or "" for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)}
            names |= {
                a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import) for a in n.names
            }
            assert not any(name.split(".")[0] == "airflow" for name in names), path
    tree = ast.parse((ROOT / "exceptions.py").read_text())
    assert [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and n.module != "__future__"] == []


# --------------------------------------------------------------------------- one exception hierarchy

# Every error class, with every module imported. Not errors, so not counted: warning categories
# (simulation.evaluate.OptimumGapWarning) and operators.skynomad.Stop, a SystemExit on purpose (Airflow
# logs it in one line; an `except Exception` must not catch it).


@pytest.fixture(scope="module")
def exception_classes() -> dict[str, bool]:
    """Every exception class defined in the package → whether it is a SkyNomadError. Every module is
    imported here, in the test's interpreter: most already are by the other tests (a fresh interpreter
    importing all of them took 7-10 s); the package's modules have no import-time side effects but
    matplotlib's Agg backend (simulation.plot) and a fork hook (clouds.simulated.store)."""
    import importlib
    import inspect
    import pkgutil

    import airflow_provider_skynomad as package
    from airflow_provider_skynomad.exceptions import SkyNomadError

    found = {}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(info.name)).values():
            if (
                inspect.isclass(value)
                and issubclass(value, Exception)
                and not issubclass(value, Warning)
                and value.__module__.startswith(package.__name__)
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = issubclass(value, SkyNomadError)
    return found


def test_every_exception_class_is_a_skynomad_error(exception_classes):
    assert len(exception_classes) >= 20
    assert [name for name, ok in exception_classes.items() if not ok] == []


def test_exception_classes_are_defined_in_one_module(exception_classes):
    """exceptions.py, but for the two that are Airflow's AirflowFailException too (jobs/errors.py says why)."""
    elsewhere = {name for name in exception_classes if not name.startswith(f"{PACKAGE}.exceptions.")}
    assert elsewhere == {f"{PACKAGE}.jobs.errors.SkyNomadInputError", f"{PACKAGE}.jobs.errors.SkyNomadDeadlineMissed"}


def test_the_old_import_paths_of_errors_still_work():
    from airflow_provider_skynomad.clouds.base import CapacityError
    from airflow_provider_skynomad.exceptions import SkyNomadConfigError, SkyNomadError
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfigError as from_hook
    from airflow_provider_skynomad.market.observations import TraceError
    from airflow_provider_skynomad.operators.probe import SkyNomadProbeError
    from airflow_provider_skynomad.planner.job import JobSpecError

    assert from_hook is SkyNomadConfigError
    for cls in (CapacityError, TraceError, SkyNomadProbeError, JobSpecError):
        assert issubclass(cls, SkyNomadError)
    assert issubclass(JobSpecError, ValueError) and issubclass(CapacityError, RuntimeError)  # old bases kept
