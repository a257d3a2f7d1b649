"""docs/build_site.py, loaded as a module for the tests that check what it writes (it is a script, not a package)."""

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

BUILD_SITE = Path(__file__).parents[1] / "docs" / "build_site.py"


@functools.cache
def site_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_site", BUILD_SITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
