"""The shape of a package folder: its longest class, its longest function, its widest signature.

Why: the job runtime (`airflow_provider_skynomad/jobs`) must stay small enough for a newcomer to
hold in their head: no class over 300 lines, no function over 50 lines, none taking more than 8
parameters (``self`` and ``cls`` not counted). This prints the three maxima and every offender,
read from the source's syntax tree (nothing is imported), and exits 1 when a limit is passed. It
also counts the public functions with no docstring (each should say why it exists).

    python benchmarks/jobs_shape.py [FOLDER ...]
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_FOLDER = "airflow_provider_skynomad/jobs"
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 50
MAX_PARAMETERS = 8


@dataclass(frozen=True)
class Measure:
    """One class or function: where it is and how big."""

    where: str
    lines: int
    parameters: int = 0
    public_undocumented: bool = False


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Every parameter a caller may pass (positional, keyword-only, *args, **kwargs), not self/cls."""
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names)


def measure(folder: Path) -> tuple[list[Measure], list[Measure]]:
    """(classes, functions) of every module under `folder`, nested ones included."""
    classes, functions = [], []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            lines = node.end_lineno - node.lineno + 1
            where = f"{path}:{node.lineno} {node.name}"
            if isinstance(node, ast.ClassDef):
                classes.append(Measure(where, lines))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                setter = any(isinstance(d, ast.Attribute) and d.attr == "setter" for d in node.decorator_list)
                bare = not node.name.startswith("_") and not setter and ast.get_docstring(node) is None
                functions.append(Measure(where, lines, parameters(node), bare))
    return classes, functions


def report(folder: Path) -> bool:
    """Print the maxima and the offenders of `folder`; True when it keeps every limit."""
    classes, functions = measure(folder)
    checks = [
        ("class lines", classes, lambda m: m.lines, MAX_CLASS_LINES),
        ("function lines", functions, lambda m: m.lines, MAX_FUNCTION_LINES),
        ("function parameters", functions, lambda m: m.parameters, MAX_PARAMETERS),
    ]
    print(f"{folder}: {len(classes)} classes, {len(functions)} functions")
    ok = True
    for label, items, size, limit in checks:
        top = max(items, key=size, default=None)
        print(f"  max {label}: {size(top) if top else 0} ({top.where if top else '-'}), limit {limit}")
        for item in sorted((i for i in items if size(i) > limit), key=size, reverse=True):
            ok = False
            print(f"    over: {size(item)} {item.where}")
    bare = [f.where for f in functions if f.public_undocumented]
    print(f"  public functions without a docstring: {len(bare)}")
    for where in bare:
        print(f"    {where}")
    return ok


def main(argv: list[str] | None = None) -> int:
    """Check every folder named (the job runtime by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", default=[DEFAULT_FOLDER])
    folders = parser.parse_args(argv).folders
    return 0 if all([report(Path(folder)) for folder in folders]) else 1


if __name__ == "__main__":
    sys.exit(main())
