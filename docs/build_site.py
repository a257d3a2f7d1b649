"""Build the course as a static web site that opens offline: one page and one slide deck per lesson.

    npm ci --prefix docs/site          # once: the JavaScript the pages load (docs/site/package.json)
    .venv/bin/python docs/build_site.py            # every notebooks/*.ipynb -> site/
    .venv/bin/python docs/build_site.py --out /tmp/site notebooks/02_scatter.ipynb

What comes out (open ``site/index.html``, or serve the folder: ``python -m http.server -d site``)::

    site/index.html                     the lessons, each with its page and its slides
    site/lessons/NN_name.html           the notebook as a page (nbconvert's "lab" template)
    site/lessons/NN_name.slides.html    the notebook as reveal.js slides (nbconvert's "reveal" template)
    site/_static/                       require.js, jQuery, the widget renderer, reveal.js, MathJax

The notebooks are not executed again: they are committed executed, with their widget state saved
(notebooks/build.py), and the pages show that state. nbconvert embeds it; the widget renderer
(``@jupyter-widgets/html-manager``'s ``embed-amd.js``, the 1.x line that renders ipywidgets 8 state) draws the
quizzes and explorers from it. There is no kernel, so the widgets show their saved state and clicks could
change nothing that needs Python: every widget's controls are disabled and greyed, under a note that says to
open the lesson in JupyterLab (``NO_KERNEL``). That note is the only one: the "▶ Run this cell" line that the saved
state of a quiz or explorer shows in JupyterLab (notebooks/build.py writes it) is left out of the pages, which
have no cell to run (``without_run_this_cell``). What the notebooks keep collapsed stays collapsed
(``COLLAPSED``): an exercise's solution (its cell's ``jupyter.source_hidden``) and an output that gives away
the answer of a quiz above it (``jupyter.outputs_hidden``, from the ``reveals-answer`` tag; notebooks/build.py
sets both) are each inside a closed ``<details>``, one click away, on the pages and in the slides.

Why a script in docs/ and not ``dpcourse/site.py``: it is a tool for whoever publishes the course, not
something a learner imports; it needs nbconvert and the npm folder beside it, neither of which the installed
package has; and it should not ship in the wheel.

Nothing is loaded from a CDN. nbconvert's templates load require.js, jQuery, MathJax 2, mermaid, reveal.js and
the widget renderer from public CDNs by default; every URL is pointed at ``_static/`` instead (MathJax stays
at 2.7: the templates and the widget renderer both call its ``MathJax.Hub`` API), and the slides template has
two blocks replaced (``TEMPLATES``). Mermaid is left on its CDN URL but only loaded when a page has a diagram,
which no lesson has; tests/browser/test_static_site.py opens the result with every non-local request blocked
and fails on any, so a lesson that adds one will say so.
"""

import argparse
import html
import runpy
import shutil
import sys
import time
from pathlib import Path

import nbformat
from jinja2 import DictLoader
from nbconvert import HTMLExporter, SlidesExporter

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "docs" / "site" / "node_modules"
DEFAULT_OUT = ROOT / "site"
# The sentence a saved widget shows in JupyterLab before its cell runs, read by path as the course's server does.
RUN_THIS_CELL = runpy.run_path(str(ROOT / "dpcourse" / "jupyter_config" / "run_this_cell.py"))["RUN_THIS_CELL"]
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

# What each npm package contributes: (source under node_modules, target under _static/).
ASSETS = [
    ("requirejs/require.js", "require.js"),
    ("jquery/dist/jquery.min.js", "jquery.min.js"),
    ("@jupyter-widgets/html-manager/dist/embed-amd.js", "embed-amd.js"),
    ("reveal.js/dist", "reveal.js/dist"),
    ("reveal.js/plugin/notes", "reveal.js/plugin/notes"),
    # MathJax 2, whose API both nbconvert's templates and the widget renderer call (MathJax.Hub): the loader,
    # the config the templates name, what that config loads, and the web fonts of its CommonHTML output.
    ("mathjax/MathJax.js", "mathjax/MathJax.js"),
    ("mathjax/config/TeX-AMS_CHTML-full.js", "mathjax/config/TeX-AMS_CHTML-full.js"),
    ("mathjax/config/Safe.js", "mathjax/config/Safe.js"),
    ("mathjax/extensions", "mathjax/extensions"),
    ("mathjax/jax/element", "mathjax/jax/element"),
    ("mathjax/jax/input/TeX", "mathjax/jax/input/TeX"),
    ("mathjax/jax/output/CommonHTML", "mathjax/jax/output/CommonHTML"),
    ("mathjax/fonts/HTML-CSS/TeX/woff", "mathjax/fonts/HTML-CSS/TeX/woff"),
    ("mathjax/localization/en", "mathjax/localization/en"),
]

STATIC = "../_static"  # where the lesson pages find the assets (they live in site/lessons/)

# Both templates: the widget renderer's AMD modules are named "@jupyter-widgets/..." and it asks for its icon
# fonts next to where require.js would fetch those modules (webpack's publicPath comes from `module.uri`),
# i.e. page-relative by default. Map the names into _static/, where copy_assets puts the fonts.
REQUIRE_JS = """{%- block html_head_js_requirejs -%}
<script src="{{ resources.require_js_url }}"></script>
<script>require.config({paths: {"@jupyter-widgets": "STATIC/@jupyter-widgets"}});</script>
{%- endblock html_head_js_requirejs -%}
""".replace("STATIC", STATIC)

# Both templates: what the notebooks keep collapsed is in a closed <details> (its class names it, for the tests),
# and every widget view gets a note that it needs a kernel (NO_KERNEL disables its controls).
COLLAPSED = """
{% block input_group -%}
{%- if cell.metadata.get("jupyter", {}).get("source_hidden") -%}
<details class="dpcourse-solution"><summary>Solution, collapsed: try the exercise first, then click to show it</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{% endblock input_group %}
{% block output_group -%}
{%- if cell.metadata.get("jupyter", {}).get("outputs_hidden") -%}
<details class="dpcourse-hidden-output"><summary>Output hidden, as it gives away the quiz above: predict your answer
first, then click to show it</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{% endblock output_group %}
{%- block data_widget_view -%}
<div class="dpcourse-needs-kernel">
<p class="dpcourse-needs-kernel-note">Needs a running kernel: open this lesson in JupyterLab to use these controls.</p>
{{ super() }}
</div>
{%- endblock data_widget_view -%}
"""

# Both templates: a widget's controls would look live and do nothing, so they are disabled as the renderer adds
# them (a MutationObserver, since the views render after the page loads) and greyed; sliders are not form
# elements, so CSS takes the pointer away from them. The summaries look clickable.
NO_KERNEL = """
<style>
.dpcourse-needs-kernel { flex-grow: 1; min-width: 0; }
.dpcourse-needs-kernel-note { margin: 0.2em 0 0.4em; font-style: italic; color: #555; }
.dpcourse-needs-kernel :is(button, input, select, textarea, .widget-slider, .widget-radio-box label) {
  pointer-events: none; cursor: not-allowed; opacity: 0.55; filter: grayscale(1);
}
details.dpcourse-solution > summary, details.dpcourse-hidden-output > summary {
  cursor: pointer; margin: 0.3em 0; padding: 0.3em 0.6em; border: 1px dashed #999; border-radius: 4px;
  color: #444; background: #f6f6f6; font-style: italic;
}
</style>
<script>
(function () {
  function disableControls(root) {
    // Only what is not disabled yet: every change below is itself a mutation the observer sees.
    root.querySelectorAll('.dpcourse-needs-kernel :is(button, input, select, textarea):enabled').forEach(
      function (el) { el.disabled = true; });
    root.querySelectorAll('.dpcourse-needs-kernel [tabindex]:not([tabindex="-1"])').forEach(function (el) {
      el.setAttribute('tabindex', '-1');  // slider handles and other focusable parts: out of the tab order
      el.setAttribute('aria-disabled', 'true');
    });
    root.querySelectorAll('.dpcourse-needs-kernel [contenteditable="true"]').forEach(function (el) {
      el.setAttribute('contenteditable', 'false');  // a slider's readout, which could be typed into
    });
  }
  new MutationObserver(function () { disableControls(document); }).observe(document.documentElement, {
    childList: true, subtree: true, attributes: true, attributeFilter: ['disabled', 'tabindex', 'contenteditable']});
  document.addEventListener('DOMContentLoaded', function () { disableControls(document); });
})();
</script>
"""

# The slides also: widget buttons as wide as their labels; mermaid loaded as the page template does, only when
# a slide has a diagram (the stock deck imports it from a CDN every time); and the deck's Reveal on `window`,
# for the tests.
TEMPLATES = {
    "dpcourse_page.html.j2": "{%- extends 'index.html.j2' -%}\n" + REQUIRE_JS + COLLAPSED
    + "{% block html_head_css %}" + NO_KERNEL + "{% endblock html_head_css %}",
    "dpcourse_slides.html.j2": "{%- extends 'index.html.j2' -%}\n" + REQUIRE_JS + COLLAPSED + """
{% block html_head_css %}""" + NO_KERNEL + """
<style>
/* The slides' larger font would cut the widgets' fixed-width button labels short ("Check my ..."). */
.reveal .widget-button, .reveal .widget-toggle-button { width: max-content; }
/* The notes and the collapsed cells' summaries at the size of the code, not of the slides' headings. */
.reveal .dpcourse-needs-kernel-note, .reveal details > summary { font-size: 19px; line-height: 1.4; }
</style>
{% endblock html_head_css %}
{% from 'mermaidjs.html.j2' import mermaid_js %}
{%- block html_head_js_mermaidjs -%}
{{ mermaid_js(resources.mermaid_js_url, resources.mermaid_layout_elk_js_url) }}
{%- endblock html_head_js_mermaidjs -%}
{% block footer_js %}
<script>
require(["{{ resources.reveal.url_prefix }}/dist/reveal.js", "{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"],
  function (Reveal, RevealNotes) {
    Reveal.initialize({controls: true, progress: true, history: true, slideNumber: "c/t", plugins: [RevealNotes],
                       transition: "{{ resources.reveal.transition | default('slide', true) }}",
                       width: {{ resources.reveal.width | default('960', true) }},
                       height: {{ resources.reveal.height | default('700', true) }}});
    // Re-typeset maths on the slide shown: hidden slides were typeset at no size (as the stock template does).
    Reveal.on('slidechanged', function (event) {
      if (window.MathJax && MathJax.Hub) { MathJax.Hub.Queue(['Rerender', MathJax.Hub, event.currentSlide]); }
    });
    // Long slides scroll instead of being cut off at the bottom (the stock template's reveal_scroll, kept).
    function scrollTallSlides() {
      var limit = $('.reveal').height() * 0.95;
      $('section.present').find('section').filter(function () { return $(this).height() > limit; })
        .css('height', 'calc(95vh)').css('overflow-y', 'scroll').css('margin-top', '20px');
    }
    Reveal.on('ready', scrollTallSlides);
    Reveal.on('slidechanged', scrollTallSlides);
    window.Reveal = Reveal;
  });
</script>
{% endblock footer_js %}""",
}

INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>dpcourse: DataParallel, one step at a time</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 50em; margin: 2em auto; padding: 0 1em; line-height: 1.5; }}
ul.lessons {{ list-style: none; padding-left: 0; }}
li {{ margin: 0.6em 0; }}
.links a {{ margin-right: 0.8em; }}
</style>
</head>
<body>
<h1>dpcourse: <code>torch.nn.DataParallel</code>, one step at a time</h1>
<p>Every forward pass of DataParallel is four steps: scatter → replicate → parallel_apply → gather.
The lessons take them one at a time.</p>
<p>These pages are the notebooks as they were last run, on CPU devices. Quizzes and explorers show their saved
state, with their controls disabled: to answer a quiz or move a slider you need the notebooks in JupyterLab (see
the course README). Exercise solutions, and outputs that would give a quiz's answer away, are collapsed: predict
first, then click to open them.</p>
<ul class="lessons">
{items}
</ul>
<p><small>Built {built} from {count} notebooks.</small></p>
</body>
</html>
"""
ITEM = ('<li id="{stem}"><b>{title}</b><br><span class="links"><a href="lessons/{stem}.html">page</a>'
        '<a href="lessons/{stem}.slides.html">slides</a></span></li>')


def require_assets() -> None:
    """Fail with the command to run when ``npm ci`` has not filled docs/site/node_modules yet."""
    missing = [source for source, _ in ASSETS if not (NODE_MODULES / source).exists()]
    if missing:
        raise SystemExit(
            f"docs/site/node_modules lacks {', '.join(missing)}: run `npm ci --prefix docs/site` "
            "(once, with access to the npm registry); the build itself then runs offline."
        )


def copy_assets(out: Path) -> None:
    """Copy the npm files the pages load into ``out/_static``."""
    static = out / "_static"
    for source, target in ASSETS:
        source_path, target_path = NODE_MODULES / source, static / target
        target_path.parent.mkdir(parents=True, exist_ok=True)
        if source_path.is_dir():
            shutil.copytree(source_path, target_path, dirs_exist_ok=True)
        else:
            shutil.copy2(source_path, target_path)
    # Font Awesome for the widgets' icons, where the renderer looks for it (see REQUIRE_JS). Only woff2: every
    # browser that runs the renderer reads it, so the @font-face fallbacks (woff, ttf, eot, svg) are never asked for.
    for folder in ("@jupyter-widgets", "@jupyter-widgets/html-manager/dist"):
        (static / folder).mkdir(parents=True, exist_ok=True)
        for font in (NODE_MODULES / "@jupyter-widgets/html-manager/dist").glob("*.woff2"):
            shutil.copy2(font, static / folder / font.name)


def without_run_this_cell(notebook: nbformat.NotebookNode, resources: dict) -> tuple[nbformat.NotebookNode, dict]:
    """An nbconvert preprocessor: the saved widget state without the "Run this cell" sentence, each line that holds
    it left empty. A page has no cell to run; ``NO_KERNEL``'s note says what the learner needs instead. The
    exporters run it on their own copy of the notebook."""
    for model in notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {}).values():
        if model.get("state", {}).get("value") == RUN_THIS_CELL:
            model["state"]["value"] = ""
    return notebook, resources


def exporters() -> tuple[HTMLExporter, SlidesExporter]:
    """nbconvert's page and slides exporters, with every script pointed at ``_static/`` and the saved widgets
    saying that they need a kernel once (``without_run_this_cell``)."""
    urls = {
        "require_js_url": f"{STATIC}/require.js",
        "jquery_url": f"{STATIC}/jquery.min.js",
        "widget_renderer_url": f"{STATIC}/embed-amd.js",
        "mathjax_url": f"{STATIC}/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe",
    }
    loaders = [DictLoader(TEMPLATES)]
    page = HTMLExporter(template_name="lab", template_file="dpcourse_page.html.j2", extra_loaders=loaders, **urls)
    slides = SlidesExporter(
        template_file="dpcourse_slides.html.j2",
        extra_loaders=loaders,
        reveal_url_prefix=f"{STATIC}/reveal.js",
        # Wide enough for a 100-character code line at the slides' 19 px code font; reveal.js scales it to fit.
        reveal_width="1500",
        reveal_height="950",
        reveal_theme="white",  # the themes that @import Google Fonts (simple, league, ...) would reach the internet
        **urls,
    )
    for exporter in (page, slides):
        exporter.register_preprocessor(without_run_this_cell, enabled=True)
    return page, slides


def lesson_title(notebook: nbformat.NotebookNode, fallback: str) -> str:
    """The first markdown heading, e.g. ``02 · Scatter: splitting the batch``."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback


def build(notebooks: list[Path], out: Path = DEFAULT_OUT) -> Path:
    """Write the site for ``notebooks`` into ``out`` (emptied first) and return its index.html."""
    require_assets()
    if not notebooks:
        raise SystemExit("no notebooks to build: notebooks/*.ipynb is empty")
    if out.exists():
        shutil.rmtree(out)
    (out / "lessons").mkdir(parents=True)
    copy_assets(out)
    page, slides = exporters()
    items = []
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        resources = {"metadata": {"name": path.stem, "path": str(path.parent)}}
        for exporter, suffix in ((page, ".html"), (slides, ".slides.html")):
            body, _ = exporter.from_notebook_node(notebook, resources=dict(resources))
            (out / "lessons" / f"{path.stem}{suffix}").write_text(body, encoding="utf-8")
        title = html.escape(lesson_title(notebook, path.stem))
        items.append(ITEM.format(stem=path.stem, title=title))
    index = out / "index.html"
    built = time.strftime("%Y-%m-%d %H:%M")
    index.write_text(INDEX.format(items="\n".join(items), built=built, count=len(notebooks)), encoding="utf-8")
    return index


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="default: site/")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    start = time.perf_counter()
    index = build(notebooks, args.out)
    print(f"built {index} ({len(notebooks)} lessons) in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
