"""What every course widget shares with the quiz: a figure shown as a PNG, errors shown in the widget, the
sentence a saved widget shows until its cell runs (with, for a quiz, the place of the learner's last answer), and
the line a running widget shows once its kernel has gone."""

import functools
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets as widgets

ERROR_STYLE = "color: #C00000; white-space: pre-wrap; font-family: monospace"
# The class of the HTML line where a widget's saved state, shown before its cell runs, says that its controls need
# the running kernel (notebooks/build.py writes the sentence into the saved state; a running widget leaves it
# empty until it has something to say).
NEEDS_KERNEL = "dpcourse-run-this-cell"
# That sentence, with the style that hides ipywidgets' broken-link icons beside it and lights it up when a control
# is clicked. Read by path from the Jupyter config folder: the course's server also writes it, on save, where a
# widget's kernel has gone (jupyter_config/jupyter_server_config.py), and that server must not import dpcourse.
_SAVED = runpy.run_path(str(Path(__file__).resolve().parents[1] / "jupyter_config" / "run_this_cell.py"))
RUN_THIS_CELL: str = _SAVED["RUN_THIS_CELL"]
ANSWER_SLOT: str = _SAVED["ANSWER_SLOT"]  # where the server writes a quiz's last answer (quiz.widget.answer_slot)

# The class of the line that says a widget's kernel has gone, and the line. After Kernel → Restart (or a kernel that
# stopped), JupyterLab keeps showing the widgets, but their clicks reach no kernel: ipywidgets marks each such view
# ``jupyter-widgets-disconnected``, and only then does the style show the line, which a click lights up. The
# build blanks it in the saved state (``notebooks/build.py``), where the run-this-cell sentence already speaks.
KERNEL_GONE = "dpcourse-kernel-gone"
KERNEL_GONE_LINE = f"""<style>
.{KERNEL_GONE}:not(.jupyter-widgets-disconnected) {{ display: none; }}
.jp-OutputArea-child:has(.{KERNEL_GONE}.jupyter-widgets-disconnected) .jupyter-widgets-disconnected::before {{
  content: none; }}
.jp-OutputArea-child:has(.jupyter-widgets-disconnected :is(:focus, :active)) .{KERNEL_GONE} p {{
  background: #fff3bf; outline: 2px solid #f08c00; }}
</style>
<p><b>▶ Run this cell again</b>: the kernel has restarted or stopped, and these controls need it running.</p>
"""


def kernel_gone_line() -> widgets.HTML:
    """The line a course widget ends with: hidden while its kernel runs, shown once it has gone."""
    line = widgets.HTML(KERNEL_GONE_LINE)
    line.add_class(KERNEL_GONE)
    return line


def show_png(image: widgets.Image, png: bytes, width: str) -> None:
    """Put ``png`` in ``image`` at ``width`` (``dpcourse.ui.png``), shrunk to fit a narrower cell, and show it."""
    image.value = png
    image.layout.width = width
    image.layout.display = None


def reports_errors(callback: Callable[..., None]) -> Callable[..., None]:
    """Wrap a widget's callback so that an exception is shown in the widget instead of vanishing.

    ipywidgets runs callbacks inside the kernel's comm handler, where an exception only reaches a log the
    learner never sees: the click would seem to do nothing. The widget says where an error goes: its
    ``show_error(error)`` runs on a failure and its ``clear_error()`` on a success. An explorer shows
    ``Type: message`` in its ``message`` area and clears the stale figure; a quiz adds it to its feedback.
    """

    @functools.wraps(callback)
    def guarded(self: Any, *args: Any) -> None:
        try:
            callback(self, *args)
        except Exception as error:
            self.show_error(error)
        else:
            self.clear_error()

    return guarded
