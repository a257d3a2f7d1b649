"""Shared by tests: the placement check of notebooks/kernel/ipython (CPU devices standing in for GPUs), in this process.

    def test_something(stand_in_gpu): ...      # a fixture (tests/conftest.py): checks on for one test

The same file runs at the start of every kernel that builds or tests a lesson; see its docstring.
"""

import runpy
from pathlib import Path

STARTUP = Path(__file__).parent.parent / "notebooks/kernel/ipython/profile_default/startup/00_check_placement.py"
CHECK = runpy.run_path(str(STARTUP))
install = CHECK["install"]
is_placed = CHECK["is_placed"]
