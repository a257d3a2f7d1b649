"""Layering, checked by import-linter with the contracts in pyproject.toml (not by reading source text)."""

import ast
import os
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
    # dpcourse/ddp/: demos (a lesson's measurement) use the implementations (DDP written small) and the rank
    # apparatus (processes); the implementations use the apparatus; the apparatus uses neither.
    graph = __import__("grimp").build_graph("dpcourse")
    rooms = ["demos", "implementations", "processes"]
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


def test_no_module_of_the_package_uses_private_torch_api():
    # Learners read this code next to torch's: only what torch documents (comments and docstrings may name the rest).
    wrong = {str(path.relative_to(ROOT)): uses for path in sorted((ROOT / "dpcourse").rglob("*.py"))
             if (uses := private_torch_uses(path.read_text()))}
    assert not wrong, wrong
