"""What a saved course widget shows before its cell runs: the build writes it into each quiz's feedback line and
each explorer's message line (``dpcourse.ui.controls.RUN_THIS_CELL``, ``notebooks/build.py``), and the course's
server writes it on save in place of a widget whose kernel has gone (``jupyter_server_config.py``).

With the sentence, a style: ipywidgets marks each view that has no kernel behind it with a red broken-link icon
(``.jupyter-widgets-disconnected::before``), which the sentence says in words instead, and a control clicked
before the cell runs lights the sentence up, so that the click is never silent. Both rules hold only in an
output that shows the sentence.

``ANSWER_SLOT`` is the empty paragraph at the end of a quiz's saved HTML (``QuizWidget.later_visit_html``, one
``{}`` for the question's id), where the server writes the learner's last answer once the quiz's kernel has gone.

A module of this Jupyter config folder, which is no package: both read it by path (``runpy``), as the server must
not import ``dpcourse`` (its package imports torch).
"""

RUN_THIS_CELL = """<style>
.jp-OutputArea-child:has(.dpcourse-run-this-cell) .jupyter-widgets-disconnected::before { content: none; }
.jp-OutputArea-child:has(.jupyter-widgets-disconnected :is(:focus, :active)) .dpcourse-run-this-cell p {
  background: #fff3bf; outline: 2px solid #f08c00; }
</style>
<p><b>▶ Run this cell</b> to answer or explore: its buttons and sliders need the running kernel.</p>
"""
ANSWER_SLOT = '<p class="dpcourse-your-answer" data-question="{}"></p>'
