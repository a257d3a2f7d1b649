"""Layering, checked by import-linter with the contracts in pyproject.toml (not by reading source text)."""

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
