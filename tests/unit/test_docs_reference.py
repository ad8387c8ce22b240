"""The user docs cannot drift from the code, point nowhere, or tell the story of how things were.

- docs/operators.md documents every parameter of SkyNomadOperator and SkyNomadProbeOperator (each
  `:param name:` line and each argument of ``__init__``), with the signature's default, and nothing
  the signature does not take;
- docs/operators.md lists every key of the summary SkyNomadOperator returns (read from the code that
  builds it: `summarize` in jobs/summary.py and what jobs/ adds to its result);
- docs/connections.md names every field the three SkyNomad connection forms show and every option
  the simulated cloud takes;
- every relative link (file, and heading anchor) in the docs, the README and the benchmark results
  points at something that exists;
- no user page (docs/*.md, README.md) carries history: experiment ids, issue numbers, "(fixed)",
  commit hashes, "used to"... That record lives in benchmarks/RESULTS.md and benchmarks/results/.
"""

from __future__ import annotations

import ast
import inspect
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_PAGES = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])
RESULT_PAGES = [ROOT / "benchmarks" / "RESULTS.md", *sorted((ROOT / "benchmarks" / "results").glob("*.md"))]
LINKED_PAGES = [*USER_PAGES, *RESULT_PAGES]


def _operators():
    from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator
    from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

    return [SkyNomadOperator, SkyNomadProbeOperator]


def docstring_params(cls) -> list[str]:
    return re.findall(r"^\s*:param (\w+):", cls.__doc__ or "", flags=re.M)


def signature_params(cls) -> dict[str, inspect.Parameter]:
    params = inspect.signature(cls.__init__).parameters
    return {n: p for n, p in params.items() if n != "self" and p.kind is not p.VAR_KEYWORD}


def section(text: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"no '## {heading}' section"
    return match.group(1)


def documented_rows(text: str) -> dict[str, list[str]]:
    """Table rows whose first cell is one backticked name: {name: cells}."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`(\w+)`\s*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = [c.strip() for c in match.group(2).split("|")]
    return rows


@pytest.mark.parametrize("cls", _operators(), ids=lambda c: c.__name__)
def test_the_operator_reference_documents_exactly_the_signature(cls):
    rows = documented_rows(section((ROOT / "docs" / "operators.md").read_text(), cls.__name__))
    signature = signature_params(cls)
    documented_by_code = set(docstring_params(cls)) | set(signature)
    assert set(docstring_params(cls)) <= set(signature), "a :param line names no argument of __init__"
    missing = sorted(documented_by_code - set(rows))
    assert not missing, f"docs/operators.md lacks {cls.__name__} parameters {missing}"
    extra = sorted(set(rows) - set(signature))
    assert not extra, f"docs/operators.md documents {cls.__name__} parameters it does not take: {extra}"
    for name, param in signature.items():
        default_cell = rows[name][1]
        if param.default is inspect.Parameter.empty:
            assert default_cell == "required", (name, default_cell)
        elif param.default is None or isinstance(param.default, (bool, int, float)):
            assert f"`{param.default!r}" in default_cell, (name, param.default, default_cell)
        elif isinstance(param.default, str):
            assert f'`"{param.default}"`' in default_cell, (name, param.default, default_cell)


def summary_keys() -> set[str]:
    """Every top-level key of the operator's return value, read from the source: the dict `summarize`
    returns (its literal keys, conditional ones included) and each ``summary["key"] = ...`` in jobs/."""
    jobs = ROOT / "airflow_provider_skynomad" / "jobs"
    keys: set[str] = set()
    tree = ast.parse((jobs / "summary.py").read_text())
    summarize = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "summarize")
    returned = next(n.value for n in ast.walk(summarize) if isinstance(n, ast.Return))
    assert isinstance(returned, ast.Dict), "summarize no longer returns a dict literal: teach this test"
    for node in ast.walk(returned):
        if isinstance(node, ast.Dict) and node is returned or _spread(node, returned):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    for path in sorted(jobs.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if (
                        isinstance(target, ast.Subscript)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "summary"
                        and isinstance(target.slice, ast.Constant)
                    ):
                        keys.add(target.slice.value)
    return keys


def _spread(node, returned: ast.Dict) -> bool:
    """A dict spread into the returned one (``**({"key": ...} if ... else {})``)."""
    spreads = [v for k, v in zip(returned.keys, returned.values, strict=True) if k is None]
    return isinstance(node, ast.Dict) and any(node is d for s in spreads for d in ast.walk(s))


def test_the_operator_reference_lists_every_key_of_the_returned_summary():
    text = section((ROOT / "docs" / "operators.md").read_text(), "SkyNomadOperator")
    returns = text[text.index("**Returns**") :].split("**Extra links**")[0]
    keys = summary_keys()
    assert {"job_id", "deadline_met", "deferrals", "fleet_aware", "probing_usd", "output_dir"} <= keys
    missing = sorted(k for k in keys if f"`{k}`" not in returns)
    assert not missing, f"docs/operators.md's Returns omits summary keys {missing}"


def test_the_connection_reference_names_every_field_of_every_form():
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
    from airflow_provider_skynomad.get_provider_info import get_provider_info
    from airflow_provider_skynomad.hooks.cloud_forms import CLOUD_FIELDS
    from airflow_provider_skynomad.hooks.forms import NOT_FIELDS

    text = (ROOT / "docs" / "connections.md").read_text()
    sections = {"aws": section(text, "AWS: SkyNomad on AWS"), "gcp": section(text, "GCP: SkyNomad on GCP")}
    for cloud, fields in CLOUD_FIELDS.items():
        missing = sorted(set(fields) - set(documented_rows(sections[cloud])))
        assert not missing, f"docs/connections.md: the {cloud} table lacks {missing}"
    forms = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
    assert set(forms) == {"skynomad", "skynomad_aws", "skynomad_gcp"}
    for conn_type, form in forms.items():
        assert f"`{conn_type}`" in text, conn_type
        for name in form["conn-fields"]:
            assert f"`{name}`" in text, f"docs/connections.md does not name {conn_type}'s field {name}"
    simulated = documented_rows(section(text, "Simulated (the default)"))
    options = set(signature_params(SimulatedCloud)) - set(NOT_FIELDS)
    missing = sorted(options - set(simulated))
    assert not missing, f"docs/connections.md: the simulated cloud's options lack {missing}"


def github_anchors(text: str) -> set[str]:
    """Heading anchors as GitHub makes them: lower case, punctuation dropped, spaces to '-', repeats numbered."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*#*$", text, flags=re.M):
        slug = "".join(ch for ch in heading.lower() if ch in " -_" or unicodedata.category(ch)[0] in "LN").replace(
            " ", "-"
        )
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_something_that_exists(page):
    text = page.read_text()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        missing_anchor = anchor and resolved.suffix == ".md" and anchor not in github_anchors(resolved.read_text())
        if not resolved.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


HISTORY = {
    "an experiment id (the record is benchmarks/results/planner-experiments.md)": r"\bE\d{1,3}\b",
    "an issue number": r"\b[Ii]ssue \d+",
    "a fix story": r"\(fixed\)|\b[Aa] bug\b|\bbugs? (?:the|we) |\bnow fixed\b",
    "a commit": r"\bcommit [0-9a-f]{7,40}\b",
    "an earlier version": r"\bused to\b|\bthe (?:old|former|previous) (?:DAG|runtime|release|planner|version|layout)\b"
    r"|\bbefore `jobs/`|^Before,|\. Before,|\bthe runtime before\b|\bthe former\b|\|\s*before:|\bWhat changed:"
    r"|^Before the [\w ]+ (?:let|did|was|had)\b",
}


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_user_page_tells_history(page):
    text = page.read_text()
    found = [
        f"{what}: {line.strip()[:120]!r}"
        for line in text.splitlines()
        for what, pattern in HISTORY.items()
        if re.search(pattern, line)
    ]
    assert not found, f"{page.relative_to(ROOT)} carries history; move it beside its benchmark:\n" + "\n".join(found)
