"""The install files: requirements.txt is the one list of what the course needs, and the rest read it.

pyproject.toml takes its dependencies from requirements.txt (setuptools' dynamic metadata) and environment.yml's
pip list reads it; the test tools are the package's `test` extra, which README's test command and .ci/run
install. `packaging` parses the specs (pytest depends on it, so it is always there); environment.yml is read
with a small line parser so the tests need no YAML library.
"""

import ast
import re
import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
EDITABLE_INSTALL = "-e ."


def strip_comment(line: str) -> str:
    # pip and YAML both start a comment with a '#' at the line start or after whitespace.
    return re.sub(r"(^|\s)#.*", "", line).strip()


def specs_by_name(lines: Iterable[str]) -> dict[str, SpecifierSet]:
    specs: dict[str, SpecifierSet] = {}
    for line in lines:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name not in specs, f"{name} is listed twice"
        specs[name] = requirement.specifier
    return specs


def requirements_txt_lines() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [entry for entry in map(strip_comment, lines) if entry]


def environment_yml_pip_lines() -> list[str]:
    """The entries under `- pip:` in environment.yml, up to the first line indented no deeper than it."""
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if strip_comment(line) == "- pip:")
    pip_indent = len(lines[start]) - len(lines[start].lstrip())
    entries = []
    for line in lines[start + 1 :]:
        entry = strip_comment(line)
        if not entry:
            continue
        if len(line) - len(line.lstrip()) <= pip_indent:
            break
        entries.append(entry.removeprefix("-").strip())
    return entries


def test_environment_yml_pip_list_reads_requirements_txt_and_adds_the_package() -> None:
    """One list of the learner's packages: conda's pip runs from the file's folder, where requirements.txt is."""
    assert environment_yml_pip_lines() == ["-r requirements.txt", EDITABLE_INSTALL]


def test_environment_yml_python_satisfies_requires_python() -> None:
    text = (ROOT / "environment.yml").read_text()
    python = re.search(r"^\s*-\s*python\s*=\s*([\d.]+)\s*$", text, flags=re.MULTILINE)
    assert python, "environment.yml should pin the Python version as `- python=3.X`"
    requires_python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python.group(1) in SpecifierSet(requires_python)


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_package_dependencies_are_requirements_txt_which_holds_only_requirements() -> None:
    """One list: setuptools reads requirements.txt, which may hold comments but no pip options (-r, --index-url)."""
    project = pyproject()
    assert "dependencies" not in project and "dependencies" in project["dynamic"]
    dynamic = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]
    assert dynamic["dependencies"] == {"file": ["requirements.txt"]}
    for line in requirements_txt_lines():
        assert not line.startswith("-"), f"requirements.txt: setuptools cannot read the pip option {line!r}"
        Requirement(line)


def test_torch_requirement_is_a_range_that_keeps_the_cpu_wheel() -> None:
    # Install instructions put torch==2.13.0 in first; the range must accept it (and its +cpu local build)
    # so the second pip call keeps it rather than fetching another build, and must not pin it, so a GPU
    # user's own CUDA build is kept too.
    torch = specs_by_name(requirements_txt_lines())["torch"]
    assert torch, "torch must have a lower bound, not be bare"
    assert all(spec.operator not in ("==", "===") for spec in torch), f"torch{torch} should be a range"
    assert torch.contains("2.13.0")
    assert torch.contains("2.13.0+cpu")


def test_ci_runs_the_lessons_on_the_torch_floor_that_requirements_declare() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    oldest = re.search(r"OLDEST_TORCH=(\S+)", ci).group(1)
    newest = re.search(r"NEWEST_TORCH=(\S+)", ci).group(1)
    torch = specs_by_name(requirements_txt_lines())["torch"]
    (floor,) = [spec.version for spec in torch if spec.operator == ">="]
    assert oldest.startswith(floor + ".") or oldest == floor, f"CI's oldest torch {oldest}, requirements' floor {floor}"
    readme = (ROOT / "README.md").read_text()
    assert f"torch **{floor} to {newest}**" in readme, "README's Versions section names the range CI runs"
    for check in (oldest, newest):
        assert torch.contains(check)


def test_ci_runs_readme_test_command_step_by_step() -> None:
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"^python3 -m venv .*-m pytest$", readme, flags=re.MULTILINE)
    assert command, "README.md should show the command that sets up and runs every test"
    ci = (ROOT / ".ci" / "run").read_text()
    position = 0
    for step in command.group(0).split(" && "):
        found = ci.find(step, position)
        assert found >= 0, f".ci/run should run the README step {step!r} after the ones before it"
        position = found + len(step)


def test_requirements_txt_holds_no_test_tools_they_are_the_test_extra() -> None:
    test_extra = specs_by_name(pyproject()["optional-dependencies"]["test"])
    assert {"pytest", "pytest-xdist", "nbval", "hypothesis", "ruff", "playwright"} <= set(test_extra)
    learner = specs_by_name(requirements_txt_lines())
    assert not set(test_extra) & set(learner), "requirements.txt is the learner's install: no test tools"


def imported_modules(paths: Iterable[Path]) -> set[str]:
    """The top-level names of every absolute import in ``paths``, at any depth (imports inside functions too)."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.partition(".")[0])
    return names


def installed_closure(names: Iterable[str]) -> set[str]:
    """``names`` and every distribution they depend on, as installed here (extras' dependencies left out)."""
    found, todo = set(), [canonicalize_name(name) for name in names]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in map(Requirement, requirements):
            if not (requirement.marker and "extra" in str(requirement.marker)):
                todo.append(canonicalize_name(requirement.name))
    return found


def not_brought_by(requirements: Iterable[str], paths: list[Path]) -> set[str]:
    """The third-party modules ``paths`` import that no distribution ``requirements`` install would provide."""
    local = {path.stem for path in paths} | {"dpcourse", "tests", "notebooks"}
    third_party = imported_modules(paths) - set(sys.stdlib_module_names) - local
    available = installed_closure(specs_by_name(requirements))
    distributions = metadata.packages_distributions()  # module name -> the distributions that install it
    providers = {module: set(map(canonicalize_name, dists)) for module, dists in distributions.items()}
    return {module for module in third_party if not providers.get(module, set()) & available}


def test_every_package_the_course_imports_comes_with_requirements_txt() -> None:
    course = [*(ROOT / "dpcourse").rglob("*.py"), *(ROOT / "notebooks" / "src").glob("*.py")]
    assert {"torch", "matplotlib", "ipywidgets", "filelock"} <= imported_modules(course)
    missing = not_brought_by(requirements_txt_lines(), course)
    assert not missing, f"the course imports {sorted(missing)}, which requirements.txt does not bring"


def test_every_package_the_tests_import_comes_with_the_test_extra() -> None:
    tools = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "notebooks").glob("*.py"), *(ROOT / "docs").glob("*.py")]
    missing = not_brought_by([*requirements_txt_lines(), *pyproject()["optional-dependencies"]["test"]], tools)
    assert not missing, f"the tests import {sorted(missing)}, which neither requirements.txt nor [test] brings"


def test_the_test_extra_brings_the_plugin_that_the_default_pytest_options_use() -> None:
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    test_extra = specs_by_name(pyproject()["optional-dependencies"]["test"])
    assert "--numprocesses" in addopts and "pytest-xdist" in test_extra
    assert "--nbval" in addopts and "nbval" in test_extra


def test_readme_tests_with_the_test_extra_and_opens_the_course_without_it() -> None:
    readme = (ROOT / "README.md").read_text()
    learner = re.search(r"^python3 -m venv .*-m dpcourse\.open$", readme, flags=re.MULTILINE).group(0)
    tests = re.search(r"^python3 -m venv .*-m pytest$", readme, flags=re.MULTILINE).group(0)
    assert ".venv/bin/pip install -r requirements.txt -e . &&" in learner and "[test]" not in learner
    assert '.venv/bin/pip install -r requirements.txt -e ".[test]" &&' in tests
    for command in (learner, tests):  # torch first, in its own call: see test_torch_requirement_is_a_range...
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && ")
