"""The mutants of a solution: every operator applied to every node on the solution's lines, one change each.

Each mutant has a stable id, the key of ``equivalent.toml``: the operator, the line in the solution cell and the
change, ``"compare_flip L3: i < n -> i >= n"`` (with `` (2)`` for the same change further along the same line).
"""

import ast
import copy
import dataclasses
from collections.abc import Iterator

from .operators import OPERATORS


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One changed solution: ``id`` (stable: operator, line in the cell, the change), ``diff`` and ``source``."""

    id: str
    operator: str
    line: int
    diff: str
    source: str


def of(source: str, lines: frozenset[int]) -> list[Mutant]:
    """Every single-change mutant of ``source`` whose change lies on ``lines``, by line, ids unique."""
    return sorted(_single_changes(source, lines), key=lambda mutant: mutant.line)


def _single_changes(source: str, lines: frozenset[int]) -> Iterator[Mutant]:
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    seen = set()
    for index, node in enumerate(nodes):
        if getattr(node, "lineno", None) not in lines or _is_text(node):
            continue
        for operator in OPERATORS:
            for replacement in operator(node):
                mutated, changed = _replaced(tree, index, replacement)
                before, after = _one_line(node), _one_line(changed)
                if before == after:
                    continue
                diff = f"{before} -> {after}"
                mutant_id = f"{operator.__name__} L{node.lineno}: {diff}"
                repeat = sum(known == mutant_id or known.startswith(f"{mutant_id} (") for known in seen)
                mutant_id += f" ({repeat + 1})" if repeat else ""  # the same change on the same line, further on
                seen.add(mutant_id)
                yield Mutant(mutant_id, operator.__name__, node.lineno, diff, ast.unparse(mutated))


def _replaced(tree: ast.Module, index: int, replacement: ast.AST | None) -> tuple[ast.Module, ast.AST]:
    """A copy of ``tree`` whose ``index``-th node (``ast.walk`` order) is ``replacement`` (``None``: ``pass``)."""
    mutated = copy.deepcopy(tree)
    target = list(ast.walk(mutated))[index]
    new = copy.deepcopy(replacement) if replacement is not None else ast.Pass()
    for parent in ast.walk(mutated):
        for field, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, field, new)
            elif isinstance(value, list) and any(item is target for item in value):
                value[[id(item) for item in value].index(id(target))] = new
    ast.fix_missing_locations(ast.copy_location(new, target) if not isinstance(new, ast.Pass) else new)
    ast.fix_missing_locations(mutated)
    return mutated, new


def _one_line(node: ast.AST) -> str:
    text = "pass" if isinstance(node, ast.Pass) else ast.unparse(node)
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


def _is_text(node: ast.AST) -> bool:
    """A string constant: a docstring or a message, nothing a check judges."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str)
