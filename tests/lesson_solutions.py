"""The solutions written in the lesson sources, as functions: what the exercise tests run against the checks.

Each cell tagged ``solution`` with ``### BEGIN SOLUTION`` markers in ``notebooks/src/*.py`` defines one function;
it runs with the lesson's own imports, kept where ``inspect.getsource`` finds it (as IPython keeps a cell's code).
"""

import ast
import functools
import linecache
import re
from collections.abc import Callable
from pathlib import Path

import jupytext

SOURCES = Path(__file__).parent.parent / "notebooks" / "src"
LESSON_IMPORTS = "import torch\nfrom torch import nn\nimport dpcourse\nfrom dpcourse import examples\n"


def _imports(notebook) -> str:
    """The lesson's own top-level import statements (a solution may use `threading`, say)."""
    lines = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                lines.append(ast.unparse(node))
    return "\n".join(lines) + "\n"


@functools.cache
def lesson_solutions() -> tuple[dict[str, Callable], dict[str, str]]:
    """Each marked solution function in the lesson sources, by name, and the source file it is in."""
    solutions, lessons = {}, {}
    for path in sorted(SOURCES.glob("*.py")):
        if path.name.startswith("12"):  # the capstone's pieces: see test_capstone.py
            continue
        notebook = jupytext.read(path)
        imports = _imports(notebook)
        for cell in notebook.cells:
            if "solution" not in cell.metadata.get("tags", []) or "### BEGIN SOLUTION" not in cell.source:
                continue
            name = re.search(r"^def (\w+)\(", cell.source, re.M).group(1)
            namespace: dict = {}
            # Kept where inspect.getsource finds it, as IPython keeps a cell's code: lesson 13's checks send a
            # solution to other processes as its source.
            code, filename = LESSON_IMPORTS + imports + cell.source, f"<{path.stem}: {name}>"
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            exec(compile(code, filename, "exec"), namespace)
            solutions[name], lessons[name] = namespace[name], path.name
    return solutions, lessons


def solution(name: str) -> Callable:
    """The lesson's solution of exercise ``name``."""
    return lesson_solutions()[0][name]
