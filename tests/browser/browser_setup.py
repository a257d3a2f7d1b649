"""What the browser tests share: paths, the Chromium they need, and the timings shown at the end of the session.

A module of its own rather than conftest.py: test modules cannot import a conftest reliably (pytest imports
each conftest.py under the same name, ``conftest``).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
INSTALL_CHROMIUM = "install Debian's chromium: apt-get install chromium chromium-driver"
# Flags for a quiet, self-contained browser. Playwright adds --no-sandbox itself (needed as root).
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

TIMINGS: dict[str, float] = {}  # step -> seconds, printed by conftest.pytest_terminal_summary


def lesson_notebooks() -> list[Path]:
    """Every notebooks/*.ipynb, read at collection time: the suite follows whichever lessons exist."""
    return sorted(NOTEBOOKS.glob("*.ipynb"))
