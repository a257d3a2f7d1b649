"""Layering, checked by import-linter with the contracts in pyproject.toml (not by reading source text), and
which private names code may reach, checked on its syntax tree: none of torch's from the package, none of
dpcourse's from the tests."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess:
    """Run import-linter on the ``dpcourse`` found in ``package_parent``, with this repository's contracts."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; c()"]
    config = ["--config", str(ROOT / "pyproject.toml"), "--no-cache"]
    return subprocess.run(command + config, cwd=package_parent, env=env, capture_output=True, text=True)


def test_every_layering_contract_is_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_core_module_importing_the_trace_breaks_a_contract(tmp_path):
    shutil.copytree(ROOT / "dpcourse", tmp_path / "dpcourse", ignore=shutil.ignore_patterns("__pycache__"))
    replicate = tmp_path / "dpcourse" / "replicate.py"
    replicate.write_text(replicate.read_text() + "\nfrom .trace import bytes_of  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "dpcourse.replicate -> dpcourse.trace" in result.stdout


def _planted(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess:
    shutil.copytree(ROOT / "dpcourse", tmp_path / "dpcourse", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "dpcourse" / module
    path.write_text(path.read_text() + line)
    return lint_imports(tmp_path)


def test_an_import_inside_a_function_that_closes_a_cycle_breaks_the_contract(tmp_path):
    # The memory <-> ddp cycle once hid this way: measure.py imported dpcourse.ddp.demos.memory inside a function.
    hidden = "\ndef _hidden():\n    from dpcourse.ddp.demos import memory  # noqa\n"
    result = _planted(tmp_path, "memory/measure.py", hidden)
    assert result.returncode != 0
    assert "dpcourse.memory.measure -> dpcourse.ddp.demos.memory" in result.stdout


def test_the_contract_names_every_module_of_the_package():
    import tomllib

    import grimp

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    named = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    modules = {module.split(".")[1] for module in grimp.build_graph("dpcourse").modules if "." in module}
    assert modules == named, f"missing from the layers: {modules - named}; not in the package: {named - modules}"


def test_no_module_of_the_package_goes_through_the_dpcourse_facade():
    # Importing dpcourse's own modules shows each module's real edges; `import dpcourse` hid them.
    graph = __import__("grimp").build_graph("dpcourse")
    through_facade = sorted(m for m in graph.modules if "dpcourse" in graph.find_modules_directly_imported_by(m))
    assert not through_facade, f"import the module, not the facade: {through_facade}"


def test_the_ddp_rooms_import_only_downwards():
    # dpcourse/ddp/: demos (a lesson's measurement) use the implementations (DDP written small), never the other
    # way round; the rank apparatus both use is a layer of its own below (dpcourse/ranks/, pyproject's contract).
    graph = __import__("grimp").build_graph("dpcourse")
    rooms = ["demos", "implementations"]
    wrong = []
    for index, room in enumerate(rooms):
        above = rooms[:index]
        for module in graph.find_descendants(f"dpcourse.ddp.{room}"):
            for imported in graph.find_modules_directly_imported_by(module):
                if any(imported.startswith(f"dpcourse.ddp.{higher}") for higher in above):
                    wrong.append(f"{module} -> {imported}")
    assert not wrong, f"a lower room of dpcourse/ddp/ imports a higher one: {wrong}"


def test_no_test_module_imports_another():
    # Shared helpers live in helper modules (tests/helpers.py, tests/figure_checks.py, ...), so a test module can
    # change or move without breaking another.
    tests = Path(__file__).parent
    wrong = []
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            wrong += [f"{path.relative_to(tests)} imports {name}" for name in names
                      if name.rsplit(".", 1)[-1].startswith("test_")]
    assert not wrong, wrong


def private_torch_uses(source: str) -> list[str]:
    """Every ``torch._x`` (attribute, however deep) and ``from torch._x import`` in ``source``; dunders are public."""
    def private(name: str) -> bool:
        return name.startswith("_") and not name.endswith("__")

    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch"):
            if any(private(part) for part in node.module.split(".")):
                uses.append(f"line {node.lineno}: from {node.module} import ...")
        if isinstance(node, ast.Import):
            uses += [f"line {node.lineno}: import {alias.name}" for alias in node.names
                     if alias.name.startswith("torch") and any(private(p) for p in alias.name.split("."))]
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "torch":
                uses.append(f"line {node.lineno}: torch.{'.'.join(reversed(chain))}")
    return sorted(uses, key=lambda use: int(use.split(":")[0].removeprefix("line ")))


def test_private_torch_uses_finds_an_attribute_an_import_and_a_deep_chain():
    source = ("import torch\nimport torch._dynamo\nfrom torch._utils import _take_tensors\n"
              "torch._amp_update_scale_(1)\ntorch.nn.modules.module._global_module_registration_hooks\n"
              "torch.__version__\ntorch.nn.Module\n")
    assert [use.split(":")[0] for use in private_torch_uses(source)] == ["line 2", "line 3", "line 4", "line 5"]


def test_no_module_of_the_package_reaches_a_private_name_through_torch():
    # Learners read this code next to torch's, so no torch._x chain and no import of a private torch module (comments
    # and docstrings may name them). An AST cannot tell a private attribute of a torch *object*, so that is not
    # checked: replicate.py uses them on purpose, as torch's own replicate does (_replicate_for_data_parallel(),
    # _parameters, _buffers, _modules).
    wrong = {str(path.relative_to(ROOT)): uses for path in sorted((ROOT / "dpcourse").rglob("*.py"))
             if (uses := [use for use in private_torch_uses(path.read_text())
                          if (str(path.relative_to(ROOT)), use.partition(": ")[2]) not in PRIVATE_TORCH_ON_PURPOSE])}
    assert not wrong, wrong


# The private torch names the package reaches on purpose, each because torch offers no public way to what a lesson
# shows: (file, use) -> why.
PRIVATE_TORCH_ON_PURPOSE = {
    ("dpcourse/faults/hang_tools.py", "from torch._C import ..."):
        "the Flight Recorder's dump: torch binds it as torch._C._distributed_c10d._dump_fr_trace only (lesson 22)",
}


def private_name(name: str) -> bool:
    """``_x``, but not a dunder (``__init__``) nor IPython's display protocol (``_repr_html_``): those are public."""
    return name.startswith("_") and not name.endswith("_")


def private_members(package: Path) -> set[str]:
    """The private attribute names ``package`` defines on its objects: methods, class attributes, ``self._x``."""
    names = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                    names |= {target.id for target in targets if isinstance(target, ast.Name)}
                    names |= {item.name} if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else set()
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names |= {node.attr} if isinstance(node.value, ast.Name) and node.value.id == "self" else set()
    return {name for name in names if private_name(name)}


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from: ``a`` for ``a.b.c``."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def private_dpcourse_uses(source: str, members: set[str]) -> list[str]:
    """Every private dpcourse name ``source`` reaches: imported (``from dpcourse.widgets import _base``), through a
    name bound to something from dpcourse (``comm._sum_bucket``), a member dpcourse defines (``explorer._pngs``),
    or named in a string (``setattr(cls, "_step", ...)``, ``"dpcourse.trace._active"``)."""
    tree, bound, uses = ast.parse(source), {"dpcourse"}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpcourse"):
            bound |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Assign) and re.search(r"import_module\(.dpcourse", ast.unparse(node.value)):
            bound |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    for node in ast.walk(tree):
        named = []
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpcourse"):
            named = node.module.split(".") + [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            named = [part for alias in node.names if alias.name.startswith("dpcourse.")
                     for part in alias.name.split(".")]
        elif isinstance(node, ast.Attribute) and (node.attr in members or _root(node.value) in bound):
            named = [node.attr]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("dpcourse."):
            named = node.value.split(".")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in ATTR_CALLS:
            named = [arg.value for arg in node.args[1:2] if isinstance(arg, ast.Constant) and arg.value in members]
        named = [name for name in named if private_name(name) and name not in PRIVATE_BY_DESIGN]
        uses += [f"line {node.lineno}: {name}" for name in named]
    return sorted(set(uses), key=lambda use: int(use.split(":")[0].removeprefix("line ")))


ATTR_CALLS = {"getattr", "setattr", "delattr", "hasattr"}  # monkeypatch.setattr(obj, "_name", ...) too
# The one private dpcourse name tests may use: the module keeps torch's file name (torch/nn/parallel/_functions.py),
# so that a learner can diff the two.
PRIVATE_BY_DESIGN = {"_functions"}


def test_private_dpcourse_uses_finds_imports_module_attributes_members_and_strings():
    source = ("from dpcourse.widgets import _base\nfrom dpcourse import comm, _functions\nimport dpcourse._x\n"
              "comm._sum_bucket\nexplorer._pngs\nmonkeypatch.setattr(TracedTraining, '_step', 1)\n"
              "patch('dpcourse.trace._active')\nmodule._buffers\nexplorer.cached_figures()\nfigure._repr_html_()\n")
    uses = private_dpcourse_uses(source, members={"_pngs", "_step"})
    assert uses == ["line 1: _base", "line 3: _x", "line 4: _sum_bucket", "line 5: _pngs", "line 6: _step",
                    "line 7: _active"]


def test_tests_reach_dpcourse_only_through_public_names():
    # A test that needs a private name shows that the package lacks a public handle: give it one (a documented
    # attribute, a read-only view), or test through a public function. Private names of torch's own
    # (Module._buffers in a planted mistake) are not dpcourse's: a member counts only if dpcourse defines it.
    members = private_members(ROOT / "dpcourse")
    wrong = {str(path.relative_to(ROOT)): uses for path in sorted((ROOT / "tests").rglob("*.py"))
             if (uses := private_dpcourse_uses(path.read_text(), members))}
    assert not wrong, wrong


def test_every_topic_names_its_kinds_of_training_step_from_training_setup():
    # One vocabulary: a table keyed by kind uses training_setup.KINDS' words ("DataParallel", "ZeRO-1"), or the one
    # kind the memory counters add (FSDP2_NO_RESHARD), never a spelling of its own ("dp", "zero1"), so that a
    # learner meets one name for each kind of step.
    from dpcourse import costmodel, memory
    from dpcourse.sharded import memory as sharded_memory
    from dpcourse.sharded import side_by_side, zero2_measure
    from dpcourse.training_setup import FSDP2_NO_RESHARD, KINDS

    tables = {"costmodel.KINDS": costmodel.KINDS, "costmodel.FORMULAS": costmodel.FORMULAS,
              "costmodel.zero.SHARDED": costmodel.zero.SHARDED, "memory.KINDS": memory.KINDS,
              "sharded.memory.KINDS": sharded_memory.KINDS, "sharded.side_by_side.KINDS": side_by_side.KINDS,
              "sharded.side_by_side.LABELS": side_by_side.LABELS,
              "sharded.zero2_measure.PROGRAMS": zero2_measure.PROGRAMS}
    words = {*KINDS, FSDP2_NO_RESHARD}
    wrong = {name: sorted(set(table) - words) for name, table in tables.items() if not set(table) <= words}
    assert not wrong, f"kinds not in training_setup.KINDS {list(KINDS)}: {wrong}"
