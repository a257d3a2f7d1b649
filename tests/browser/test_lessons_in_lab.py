"""Every lesson, run top to bottom in JupyterLab in Chromium: no errors, and every widget it shows renders.

The number of widget views each cell must show comes from the committed notebook: a code cell whose stored
outputs hold N ``application/vnd.jupyter.widget-view+json`` outputs must render N views after Run All
(cells with none must render none). The run happens on a copy (see conftest.py); nothing is saved.
"""

import os
import time
from pathlib import Path

import pytest
from browser_setup import ARTIFACTS, TIMINGS, lesson_notebooks
from lab_notebook import LabNotebook, stored_widget_views

pytestmark = pytest.mark.browser

RUN_TIMEOUT_S = float(os.environ.get("DPCOURSE_BROWSER_TIMEOUT", 120))


@pytest.mark.parametrize("notebook", lesson_notebooks(), ids=lambda path: path.stem)
def test_lesson_runs_and_renders_its_widgets(notebook: Path, lab, page) -> None:
    lesson = LabNotebook(page, lab.url, lab.token, notebook.name)
    try:
        start = time.monotonic()
        lesson.open()
        TIMINGS[f"{notebook.stem} (open in JupyterLab)"] = time.monotonic() - start
        TIMINGS[f"{notebook.stem} (Run All in JupyterLab)"] = lesson.run_all(RUN_TIMEOUT_S)
        problems = lesson.problems()
        assert not problems, f"{notebook.name} in JupyterLab:\n" + "\n\n".join(problems)
        mismatches = lesson.wait_for_widget_views(stored_widget_views(notebook))
        assert not mismatches, f"{notebook.name}: widgets did not render as stored:\n" + "\n".join(mismatches)
    finally:
        lesson.screenshot(ARTIFACTS / f"{notebook.stem}.png")
        lab.shutdown_kernels(notebook.name)
