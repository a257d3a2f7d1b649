"""The mutation operators: each turns one AST node of a solution into the mistakes a learner could make there.

An operator is a function ``(node) -> [replacement, ...]``, empty where it does not apply; a replacement ``None``
removes a statement (it becomes ``pass``). ``mutants.mutants`` applies them all, one change per mutant.
"""

import ast
import copy
from collections.abc import Callable

FLIPPED = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
           ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
OFF_BY_ONE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
SWAPPED_NAMES = {"chunk": "tensor_split", "tensor_split": "chunk", "sum": "mean", "mean": "sum"}
# Methods whose call a learner may forget: without them the answer is the receiver itself.
DROPPABLE_METHODS = {"clone", "detach", "contiguous", "cpu", "float", "double", "item", "tolist", "flatten", "t",
                     "squeeze", "requires_grad_", "zero_", "sum", "mean"}
# Receivers that are modules: ``torch.cat(xs)`` -> ``torch`` is no mistake a learner makes.
MODULES = {"torch", "dist", "nn", "F", "math", "np", "dpcourse", "exercises", "threading", "examples"}
# What each collective may be mistaken for: (name, which of the call's arguments it takes, a rank to add).
COLLECTIVES = {
    "all_reduce": [("reduce", (0,), 0), ("broadcast", (0,), 0)],
    "reduce": [("all_reduce", (0,), None), ("broadcast", (0, 1), None)],
    "broadcast": [("all_reduce", (0,), None), ("reduce", (0, 1), None)],
    "all_gather": [("reduce_scatter", (1, 0), None)],
    "reduce_scatter": [("all_gather", (1, 0), None)],
    "all_gather_into_tensor": [("reduce_scatter_tensor", (1, 0), None)],
    "reduce_scatter_tensor": [("all_gather_into_tensor", (1, 0), None), ("reduce_scatter", (0,), None)],
}

Mutation = ast.AST | None  # the replacement; None removes a statement


def compare_flip(node: ast.AST) -> list[Mutation]:
    """``a < b`` -> ``a >= b``, ``==`` -> ``!=``, ``is`` -> ``is not``, ``in`` -> ``not in``."""
    return _compare(node, FLIPPED)


def compare_bound(node: ast.AST) -> list[Mutation]:
    """``a < b`` -> ``a <= b`` and back: a bound off by one."""
    return _compare(node, OFF_BY_ONE)


def _compare(node: ast.AST, table: dict) -> list[Mutation]:
    if not isinstance(node, ast.Compare):
        return []
    found = []
    for i, op in enumerate(node.ops):
        if type(op) in table:
            mutant = copy.deepcopy(node)
            mutant.ops[i] = table[type(op)]()
            found.append(mutant)
    return found


def constant_off_by_one(node: ast.AST) -> list[Mutation]:
    """An integer constant ``k`` -> ``k + 1`` and ``k - 1``."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [ast.Constant(node.value + 1), ast.Constant(node.value - 1)]
    return []


def range_bound(node: ast.AST) -> list[Mutation]:
    """``range(n)`` -> ``range(n - 1)``, ``range(n + 1)``; ``range(a, n)`` -> ``range(n)``, ``range(a, n - 1)``."""
    if not (_called(node, "range") and node.args and not node.keywords):
        return []
    stop = 0 if len(node.args) == 1 else 1
    found = []
    for op in (ast.Sub(), ast.Add()):
        mutant = copy.deepcopy(node)
        mutant.args[stop] = ast.BinOp(node.args[stop], op, ast.Constant(1))
        found.append(mutant)
    if len(node.args) == 2:
        found.append(ast.Call(node.func, [node.args[1]], []))
    return found


def division_dropped(node: ast.AST) -> list[Mutation]:
    """``x / n`` -> ``x`` (also ``//``); ``x /= n`` removed."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
        return [node.left]
    if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
        return [None]
    return []


def call_dropped(node: ast.AST) -> list[Mutation]:
    """``f(x)`` -> ``x`` for a call of one argument; ``x.clone()`` -> ``x`` for the methods a learner forgets;
    ``x.method(...)`` -> ``x`` for a method with arguments (``key.removeprefix("module.")``)."""
    if not isinstance(node, ast.Call):
        return []
    found = []
    if len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred):
        found.append(node.args[0])
    method = node.func if isinstance(node.func, ast.Attribute) else None
    if method and not (isinstance(method.value, ast.Name) and method.value.id in MODULES):
        if (node.args or node.keywords) or method.attr in DROPPABLE_METHODS:
            found.append(method.value)
    return found


def keyword_dropped(node: ast.AST) -> list[Mutation]:
    """``f(x, reduction="none")`` -> ``f(x)``: one keyword argument left out, its default used instead."""
    if not isinstance(node, ast.Call):
        return []
    return [ast.Call(node.func, node.args, [k for k in node.keywords if k is not dropped])
            for dropped in node.keywords if dropped.arg is not None]


def operand_dropped(node: ast.AST) -> list[Mutation]:
    """``a + b`` -> ``a`` and ``b`` (also ``-``, ``*``): a term or a factor forgotten."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        return [node.left, node.right]
    return []


def statement_removed(node: ast.AST) -> list[Mutation]:
    """A statement that is only a call (``optimizer.step()``, ``dist.all_reduce(t)``) removed."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return [None]
    return []


def accumulation_replaced(node: ast.AST) -> list[Mutation]:
    """``total += x`` -> ``total = x``: an accumulation that overwrites."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        return [ast.Assign([node.target], node.value)]
    return []


def name_swapped(node: ast.AST) -> list[Mutation]:
    """``chunk`` <-> ``tensor_split``, ``sum`` <-> ``mean`` (methods and ``torch.`` functions); the built-in
    ``sum(xs)`` -> ``sum(xs) / len(xs)``."""
    if isinstance(node, ast.Attribute) and node.attr in SWAPPED_NAMES:
        return [ast.Attribute(node.value, SWAPPED_NAMES[node.attr], node.ctx)]
    if _called(node, "sum") and len(node.args) == 1 and not node.keywords:
        length = ast.Call(ast.Name("len", ast.Load()), [node.args[0]], [])
        return [ast.BinOp(node, ast.Div(), length)]
    return []


def collective_swapped(node: ast.AST) -> list[Mutation]:
    """``dist.all_reduce(t)`` -> ``dist.reduce(t, 0)``, ``all_gather`` -> ``reduce_scatter`` and so on."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in COLLECTIVES):
        return []
    found = []
    keywords = [k for k in node.keywords if k.arg in ("group", "async_op")]
    for name, positions, extra in COLLECTIVES[node.func.attr]:
        if max(positions) >= len(node.args):
            continue
        args = [node.args[i] for i in positions] + ([ast.Constant(extra)] if extra is not None else [])
        found.append(ast.Call(ast.Attribute(node.func.value, name, ast.Load()), args, keywords))
    return found


def list_multiplied(node: ast.AST) -> list[Mutation]:
    """``[e for _ in range(k)]`` -> ``[e] * k`` (``range(a, b)``: ``* (b - a)``): one object k times instead of k
    objects, the mistake the audit found passing lesson 03's check."""
    if not (isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs):
        return []
    loop = node.generators[0].iter
    if not (_called(loop, "range") and len(loop.args) in (1, 2)):
        return []
    count = loop.args[0] if len(loop.args) == 1 else ast.BinOp(loop.args[1], ast.Sub(), loop.args[0])
    return [ast.BinOp(ast.List([node.elt], ast.Load()), ast.Mult(), count)]


def detach_toggled(node: ast.AST) -> list[Mutation]:
    """``return x`` -> ``return x.detach()`` (``x.detach()`` -> ``x`` is ``call_dropped``'s)."""
    if isinstance(node, ast.Return) and isinstance(node.value, (ast.Name, ast.Attribute, ast.Subscript)):
        detached = ast.Call(ast.Attribute(node.value, "detach", ast.Load()), [], [])
        return [ast.Return(detached)]
    return []


def _called(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


OPERATORS: tuple[Callable[[ast.AST], list[Mutation]], ...] = (
    compare_flip, compare_bound, constant_off_by_one, range_bound, division_dropped, call_dropped,
    keyword_dropped, operand_dropped, statement_removed, accumulation_replaced, name_swapped,
    collective_swapped, list_multiplied, detach_toggled)
