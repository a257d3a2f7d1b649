"""The course's JupyterLab server (``python -m dpcourse.open``): what it writes when a lesson is saved.

A saved notebook shows each widget through an output that names a widget *model* by id. The models a cell made
live in its kernel; JupyterLab keeps the ones the lesson was built with (its saved widget state), not the ones
the learner's kernel made. So once the kernel has stopped (dpcourse.open started again, a kernel restart and a
page reload), an output of a cell the learner ran names a model that exists nowhere, and ipywidgets' renderer
shows "Error displaying widget: model not found" in its place.

Before the server writes a notebook, ``widgets_for_a_later_visit`` gives each such output, in the file only, the
sentence a saved course widget shows before its cell runs (``run_this_cell.py``, the wording the build writes
into the saved state, ``dpcourse.ui.controls.RUN_THIS_CELL``), beside its ``text/plain``. The open tab keeps
its live widgets; the file holds a sentence that is true whenever it is read. Saving the widgets' state instead
(jupyterlab-manager's ``saveState``) was tried: reopened, the widgets showed "Loading widget..." for good, and
every lesson with widgets opened modified.

Jupyter reads this file as configuration (``dpcourse.open`` puts this folder on ``JUPYTER_CONFIG_PATH``). It
imports nothing of ``dpcourse``, whose package imports torch: the server starts as fast as without it.
"""

import runpy
from pathlib import Path

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
RUN_THIS_CELL = runpy.run_path(str(Path(__file__).parent / "run_this_cell.py"))["RUN_THIS_CELL"]


def widgets_for_a_later_visit(model: dict, **_: object) -> None:
    """In the notebook ``model`` about to be saved, replace each widget output whose model is not in the saved
    widget state by ``RUN_THIS_CELL`` (HTML), keeping its plain text; leave every other output as it is.

    jupyter_server calls it as ``ContentsManager.pre_save_hook`` (``model=``, ``path=``, ``contents_manager=``)
    before it writes, and returns to JupyterLab the written file's time and hash: the tab is not told that the
    file changed on disk. An output with an empty model id is a view its widget closed; the renderer hides it.
    """
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    notebook = model["content"]
    saved = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            model_id = data.get(WIDGET_VIEW, {}).get("model_id")
            if model_id and model_id not in saved:
                del data[WIDGET_VIEW]
                data["text/html"] = RUN_THIS_CELL


get_config().ContentsManager.pre_save_hook = widgets_for_a_later_visit  # noqa: F821 (Jupyter defines it here)
