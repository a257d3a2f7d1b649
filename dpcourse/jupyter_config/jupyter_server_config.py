"""The course's JupyterLab server (``python -m dpcourse.open``): what it writes when a lesson is saved.

A saved notebook shows each widget through an output that names a widget *model* by id. The models a cell made
live in its kernel; JupyterLab keeps the ones the lesson was built with (its saved widget state), not the ones
the learner's kernel made. So once the kernel has stopped (dpcourse.open started again, a kernel restart and a
page reload), an output of a cell the learner ran names a model that exists nowhere, and ipywidgets' renderer
shows "Error displaying widget: model not found" in its place.

Before the server writes a notebook, ``widgets_for_a_later_visit`` gives each such output, in the file only, the
sentence a saved course widget shows before its cell runs (``run_this_cell.py``, the wording the build writes
into the saved state, ``dpcourse.ui.controls.RUN_THIS_CELL``), beside its ``text/plain``. A quiz's output also
holds its question as HTML (``QuizWidget.later_visit_html``): that stays under the sentence, with the learner's
last answer from their progress file (``dpcourse/progress.py``, read by path), so a return visit shows what was
asked and answered. The open tab keeps its live widgets; the file holds what is true whenever it is read.
Saving the widgets' state instead (jupyterlab-manager's ``saveState``) was tried: reopened, the widgets showed
"Loading widget..." for good, and every lesson with widgets opened modified.

The hook is registered by the server's contents manager (``register_pre_save_hook``), not configured as
``ContentsManager.pre_save_hook``: server extensions (notebook_shim, jupytext) make traitlets apply the server's
configuration again while it starts, and jupyter_server warns "Overriding existing pre_save_hook" each time a
configured hook is set while one is, even to itself. A registered hook is set once; and jupytext, which replaces
the contents manager with a class of its own, derives that class from ``CourseContentsManager``.

Jupyter reads this file as configuration (``dpcourse.open`` puts this folder on ``JUPYTER_CONFIG_PATH``). It
imports nothing of ``dpcourse``, whose package imports torch, and reads the two files it needs by path: the server
starts as fast as without it.
"""

import html
import re
import runpy
from pathlib import Path

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
HERE = Path(__file__).resolve().parent
SAVED = runpy.run_path(str(HERE / "run_this_cell.py"))
RUN_THIS_CELL = SAVED["RUN_THIS_CELL"]
# A quiz's empty answer paragraph, its question id captured.
ANSWER_SLOT = re.compile(re.escape(SAVED["ANSWER_SLOT"]).replace(re.escape("{}"), '([^"]*)'))
Progress = runpy.run_path(str(HERE.parent / "progress.py"))["Progress"]  # imports no torch, as this server must not


def with_last_answers(text: str) -> str:
    """``text`` with each quiz's answer slot holding the learner's last answer to it and whether it was right, as
    their progress file has it (``$DPCOURSE_PROGRESS``, which the server's kernels share); a slot of a question
    never answered, or a file that cannot be read, stays empty."""
    if not ANSWER_SLOT.search(text):
        return text
    questions = Progress().read().questions

    def filled(slot: re.Match) -> str:
        attempts = questions.get(html.unescape(slot[1]), {}).get("attempts")
        if not attempts:
            return slot[0]
        verdict = "✔ right" if attempts[-1]["correct"] else "✘ not right"
        return f"<p>Your last answer: <b>{html.escape(attempts[-1]['answer'])}</b> {verdict}</p>"

    return ANSWER_SLOT.sub(filled, text)


def widgets_for_a_later_visit(model: dict, **_: object) -> None:
    """In the notebook ``model`` about to be saved, replace each widget output whose model is not in the saved
    widget state by ``RUN_THIS_CELL`` (HTML), followed by the HTML the widget gave (``with_last_answers``), keeping
    its plain text; leave every other output as it is.

    jupyter_server calls it as a pre-save hook (``model=``, ``path=``, ``contents_manager=``) before it writes,
    and returns to JupyterLab the written file's time and hash: the tab is not told that the file changed on disk.
    An output with an empty model id is a view its widget closed; the renderer hides it.
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
                own = data.get("text/html", "")
                data["text/html"] = RUN_THIS_CELL + with_last_answers("".join(own) if isinstance(own, list) else own)


class CourseContentsManager(AsyncLargeFileManager):
    """jupyter_server's own contents manager (the default ``ServerApp.contents_manager_class``), which runs
    ``widgets_for_a_later_visit`` before each save."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.register_pre_save_hook(widgets_for_a_later_visit)


get_config().ServerApp.contents_manager_class = CourseContentsManager  # noqa: F821 (Jupyter defines it here)
