"""docs/airflow.md lists the functions a preemption passes through, from the trigger's loop to the
job page: the list cannot drift from the code.

Read from the source's syntax tree (nothing is imported): every listed function exists; there are
at most 12; each is named (called, or handed to a thread) in the body of one listed above it, so no
unlisted function forwards the event between two listed ones; and the only two that no listed
function names are the first (the trigger's loop) and the job page's HTTP handler (a route).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_provider_skynomad"
MOST = 12
LINE = re.compile(r"^(\d+)\. `([\w/]+\.py):([\w.]+)` — \S", flags=re.M)


def listed() -> list[tuple[int, str, str]]:
    """(number, module path, qualified name) of each line of the section, in order."""
    text = (ROOT / "docs" / "airflow.md").read_text()
    match = re.search(r"^## One event, function by function\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, "docs/airflow.md has no '## One event, function by function' section"
    return [(int(n), path, name) for n, path, name in LINE.findall(match.group(1))]


def definition(path: str, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The function `qualname` (``Class.method`` or ``function``) of the module at `path`."""
    scope: list[ast.stmt] = ast.parse((PACKAGE / path).read_text()).body
    *owners, name = qualname.split(".")
    for owner in owners:
        found = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner]
        assert found, f"{path} has no class {owner}"
        scope = found[0].body
    found = [n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name]
    assert found, f"{path} has no function {qualname}"
    return found[0]


def names_in(node: ast.AST) -> set[str]:
    """Every name and attribute the function's body mentions (``watch.step`` → step)."""
    names = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            names.add(child.id)
        elif isinstance(child, ast.Attribute):
            names.add(child.attr)
    return names


def test_the_preemption_path_is_numbered_and_at_most_12_functions():
    path = listed()
    assert [n for n, _, _ in path] == list(range(1, len(path) + 1))
    assert 2 <= len(path) <= MOST, f"the path lists {len(path)} functions, at most {MOST}"


def test_each_listed_function_exists_and_is_named_by_one_listed_above_it():
    path = listed()
    functions = [definition(module, name) for _, module, name in path]
    starts = []
    for k, ((number, module, qualname), function) in enumerate(zip(path, functions, strict=True)):
        callers = [i for i in range(k) if function.name in names_in(functions[i])]
        if not callers:
            starts.append((number, module, qualname, function))
    assert [s[0] for s in starts][:1] == [1]
    assert starts[0][1].startswith("triggers/"), "the path starts at the trigger's loop"
    assert len(starts) == 2, f"only the trigger's loop and the page's handler start: {[s[:3] for s in starts]}"
    handler = starts[1][3]
    routes = [d for d in handler.decorator_list if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "get"]
    assert routes, f"{starts[1][1]}:{starts[1][2]} is not an HTTP handler"
    assert path[-1][2] == "job_page" and path[-1][1] == "plugin/pages.py", "the path ends at the page's render"
