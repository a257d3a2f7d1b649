"""What a learner waits for: from changing an explorer's control in Chromium to the page showing the answer.

    taskset -c 0,1 .venv/bin/python -m tests.benchmarks.browser_latency          # the numbers in docs/benchmarks.md
    .venv/bin/python -m tests.benchmarks.browser_latency --only GradientSum.batch_slider --repeats 1

Every explorer of ``dpcourse.widgets`` is built as the lessons build it (the ``widgets.X(...)`` lines of
notebooks/src/; an explorer no lesson shows gets its defaults) in a notebook run in JupyterLab, once per repeat,
so each repeat starts cold. Then every control is used the way a learner does, with real clicks and keys, in
the order ``explorer.controls`` lists them: a button is clicked up to ``--clicks`` times while enabled, a
toggle goes through its other options and back, and a slider jumps to its end (End), to its start (Home) and
walks back to where it was, one step (one new setting) per key press.

One interaction is timed in the page, with ``performance.now()``, from the click or key-down (``start``) to:

* ``figure``: the new figure decoded and painted (``img.decode()``, then one animation frame), if one came;
* ``kernel``: the kernel's last idle message after the change: the round trip through the kernel;
* ``shown``: the last change anywhere in the explorer, once the kernel is idle and nothing has changed for
  ``QUIET_MS`` (which is not counted): everything the kernel sent back is on the screen.

What the learner waited for is ``figure`` when the interaction brought a new figure, else ``shown``; the targets
apply to it: median <= 300 ms and worst <= 1 s per control, on 2 cores. Nothing is asserted;
``tests/browser/test_browser_latency_plan.py`` only checks that the plan still runs.
"""

import argparse
import ast
import os
import runpy
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import ipywidgets
import nbformat

from dpcourse import widgets
from tests.benchmarks import report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "benchmark_results" / "browser_latency.json"
NOTEBOOK = "browser_latency.ipynb"
TARGET_MEDIAN_MS, TARGET_WORST_MS = 300, 1000
QUIET_MS = 400  # after the kernel's idle, this long without a change in the explorer ends an interaction
INTERACTION_TIMEOUT_S = 60
TAGGING = '''from dpcourse import widgets


def tagged(explorer, tag):
    """The explorer, with CSS classes by which the benchmark finds it, its controls and its figure."""
    explorer.add_class(tag)
    for name, control in explorer.controls.items():
        control.add_class(f"bench-{name}")
    explorer.image.add_class("bench-figure")
    return explorer
'''

# Installs the timers for one interaction on the explorer with CSS class ``tag``.
ARM = """(tag) => {
  const root = document.querySelector('.' + tag);
  const figure = root.querySelector('.bench-figure');
  const panel = [...window.jupyterapp.shell.widgets('main')].find(w => w.node.contains(root));
  const kernel = panel.sessionContext.session.kernel;
  const s = {start: null, working: 0, idle: null, changed: null, figure: null, decoding: 0};
  const observer = new MutationObserver(records => {
    if (s.start === null) return;
    s.changed = performance.now();
    if (figure.src && records.some(r => r.target === figure && r.attributeName === 'src')) {
      s.decoding += 1;
      figure.decode().then(() => true, () => false).then(ok => requestAnimationFrame(() => {
        if (ok) s.figure = performance.now();
        s.decoding -= 1;
      }));
    }
  });
  // A click sends two messages (the new value and the click event), each with its own busy and idle, which
  // may interleave: the kernel is done once every busy has had its idle.
  const onIopub = (_, message) => {
    if (s.start === null || message.header.msg_type !== 'status') return;
    const state = message.content.execution_state;
    if (state === 'busy') s.working += 1;
    else if (state === 'idle' && s.working > 0 && --s.working === 0) s.idle = performance.now();
  };
  const onInput = () => { if (s.start === null) s.start = performance.now(); };
  observer.observe(root, {subtree: true, attributes: true, childList: true, characterData: true});
  kernel.iopubMessage.connect(onIopub);
  root.addEventListener('click', onInput, true);
  root.addEventListener('keydown', onInput, true);
  s.disarm = () => {
    observer.disconnect();
    kernel.iopubMessage.disconnect(onIopub);
    root.removeEventListener('click', onInput, true);
    root.removeEventListener('keydown', onInput, true);
  };
  window.__benchInteraction = s;
}"""
SETTLED = """(quietMs) => {
  const s = window.__benchInteraction;
  if (s.start === null || s.idle === null || s.working > 0 || s.decoding > 0) return false;
  return performance.now() - Math.max(s.idle, s.changed ?? 0, s.figure ?? 0) > quietMs;
}"""
RESULT = """() => {
  const s = window.__benchInteraction;
  s.disarm();
  return {shown_ms: Math.max(s.idle, s.changed ?? 0, s.figure ?? 0) - s.start, kernel_ms: s.idle - s.start,
          figure_ms: s.figure === null ? null : s.figure - s.start};
}"""


def explorers_as_in_the_lessons() -> dict[str, str]:
    """Explorer name -> the expression that builds it: a lesson's ``widgets.X(...)`` line, else ``widgets.X()``."""
    built = {}
    for source in sorted((ROOT / "notebooks" / "src").glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                function = node.value.func
                if isinstance(function, ast.Attribute) and ast.unparse(function.value) == "widgets":
                    built.setdefault(function.attr, ast.unparse(node.value))
    return {name: built.get(name, f"widgets.{name}()") for name in widgets.__all__}


def control_kinds(expression: str) -> dict[str, str]:
    """Each control of the explorer ``expression`` builds, in order: "button", "toggle", "slider" or "box"."""
    explorer = eval(expression, {"widgets": widgets})  # our own lessons' text, from explorers_as_in_the_lessons
    kinds = {}
    for name, control in explorer.controls.items():
        if isinstance(control, ipywidgets.Button):
            kinds[name] = "button"
        elif isinstance(control, ipywidgets.ToggleButtons):
            kinds[name] = "toggle"
        elif isinstance(control, ipywidgets.IntSlider | ipywidgets.FloatSlider | ipywidgets.SelectionSlider):
            kinds[name] = "slider"
        elif isinstance(control, ipywidgets.Text):  # a Combobox too: typed in, sent on Enter
            kinds[name] = "box"
        else:
            raise TypeError(f"{name} is a {type(control).__name__}: the benchmark does not know how a learner uses it")
    return kinds


def benchmark_notebook(explorers: dict[str, str], repeats: int) -> nbformat.NotebookNode:
    """The tagging helper, then one cell per explorer per repeat: ``tagged(<expression>, "bench-<name>-<r>")``."""
    cells = [TAGGING] + [
        f'tagged({expression}, "bench-{name}-{repeat}")'
        for repeat in range(repeats)
        for name, expression in explorers.items()
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


def timed(page, tag: str, interact) -> dict:
    """Run ``interact()`` (one click or key press inside the explorer ``tag``) and return its times in ms."""
    page.evaluate(ARM, tag)
    interact()
    page.wait_for_function(SETTLED, arg=QUIET_MS, timeout=INTERACTION_TIMEOUT_S * 1000)
    return page.evaluate(RESULT)


def use_control(page, tag: str, name: str, kind: str, clicks: int) -> list[dict]:
    """The learner's plan for one control (see the module docstring), timed interaction by interaction."""
    control = page.locator(f".{tag} .bench-{name}")
    control.scroll_into_view_if_needed()
    times = []
    if kind == "button":
        for _ in range(clicks):
            if control.is_disabled():
                break
            times.append(timed(page, tag, control.click))
    elif kind == "toggle":
        options = control.locator("button")
        classes = [options.nth(i).get_attribute("class") for i in range(options.count())]
        active = next(i for i, names in enumerate(classes) if "mod-active" in names.split())
        for index in [i for i in range(len(classes)) if i != active] + [active]:
            times.append(timed(page, tag, options.nth(index).click))
    elif kind == "box":  # each value the box lists, then the one it started with, typed and sent with Enter
        box = control.locator("input")
        start, listed = box.input_value(), control.locator("datalist option")
        values = [listed.nth(i).get_attribute("value") for i in range(listed.count())]
        for value in [v for v in values if v != start] + [start]:
            times.append(timed(page, tag, lambda value=value: (box.fill(value), box.press("Enter"))))
    else:
        handle = control.locator(".noUi-handle")
        low, now, high = (int(float(handle.get_attribute(f"aria-value{a}"))) for a in ("min", "now", "max"))
        keys = (["End"] if now < high else []) + (["Home"] if high > low else []) + ["ArrowRight"] * (now - low)
        for key in keys:
            times.append(timed(page, tag, lambda key=key: handle.press(key)))
    return times


def measure_in_lab(
    page, lab_url: str, token: str, root_dir: Path, explorers: dict[str, str], repeats: int, clicks: int,
    only: set[str] | None = None,
) -> dict:
    """Write and run the benchmark notebook in the lab at ``lab_url``, then time every control (or ``only``
    those named ``Explorer.control``). Returns ``{explorer: {control: {"samples": [...], summaries}}}``."""
    from tests.browser.lab_notebook import LabNotebook  # Playwright is a test tool: imported when driving it

    nbformat.write(benchmark_notebook(explorers, repeats), root_dir / NOTEBOOK)
    notebook = LabNotebook(page, lab_url, token, NOTEBOOK)
    notebook.open()
    notebook.run_all(timeout_s=300)
    problems = notebook.problems()
    if problems:
        raise RuntimeError("the benchmark notebook failed in JupyterLab:\n" + "\n\n".join(problems))
    samples: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    kinds = {name: control_kinds(expression) for name, expression in explorers.items()}
    for repeat in range(repeats):
        for name in explorers:
            for control, kind in kinds[name].items():
                if only is None or f"{name}.{control}" in only:
                    samples[name][control] += use_control(page, f"bench-{name}-{repeat}", control, kind, clicks)
    return {name: {control: summary(ms) for control, ms in controls.items()} for name, controls in samples.items()}


def waited_ms(interaction: dict) -> float:
    """What the learner waited for: the new figure if the interaction brought one, else the whole answer."""
    return interaction["shown_ms"] if interaction["figure_ms"] is None else interaction["figure_ms"]


def summary(times: list[dict]) -> dict:
    """Median and worst of ``waited_ms``, of the whole answer (``shown``) and of the kernel's round trip."""
    if not times:
        return {"n": 0, "samples": []}
    waited = [waited_ms(t) for t in times]
    shown, kernel = [t["shown_ms"] for t in times], [t["kernel_ms"] for t in times]
    return {
        "n": len(times), "new_figures": sum(t["figure_ms"] is not None for t in times),
        "median_ms": statistics.median(waited), "worst_ms": max(waited),
        "shown_median_ms": statistics.median(shown), "shown_worst_ms": max(shown),
        "kernel_median_ms": statistics.median(kernel), "kernel_worst_ms": max(kernel), "samples": times,
    }


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds used by the whole machine, by this process and its descendants): Linux /proc, else zeros."""
    stat = Path("/proc/stat")
    if not stat.exists():
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    machine = sum(int(v) for i, v in enumerate(stat.read_text().split()[1:9]) if i not in (3, 4)) / tick
    children, own = defaultdict(list), {}
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = path.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # the process ended meanwhile
        children[int(fields[1])].append(int(path.parent.name))
        own[int(path.parent.name)] = int(fields[11]) + int(fields[12])
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += own.get(pid, 0)
        todo += children[pid]
    return machine, total / tick


def reference_figure_ms(repeats: int = 5) -> float:
    """How fast this machine is right now: the median ms to draw and encode one fixed figure
    (``viz.chunk_split(10, 4)`` as an explorer renders it), in this process. The machine is shared, and its
    speed drifts by up to 1.7x over an hour; two runs compare only when their reference times agree."""
    from dpcourse import viz
    from dpcourse.ui.png import png_bytes

    png_bytes(viz.chunk_split(10, 4))  # the first figure of a process pays for fonts and caches
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        png_bytes(viz.chunk_split(10, 4))
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def print_table(results: dict) -> None:
    columns = ("n", "new figures", "median ms", "worst ms", "kernel median", "kernel worst", "all shown, worst")
    keys = ("n", "new_figures", "median_ms", "worst_ms", "kernel_median_ms", "kernel_worst_ms", "shown_worst_ms")
    print("\n" + f"{'control':<38}" + "".join(f"{c:>{len(c) + 2}}" for c in columns) + "  target")
    for name, controls in results.items():
        for control, s in controls.items():
            if not s["n"]:
                continue
            met = s["median_ms"] <= TARGET_MEDIAN_MS and s["worst_ms"] <= TARGET_WORST_MS
            cells = "".join(f"{s[k]:>{len(c) + 2}.0f}" for c, k in zip(columns, keys, strict=True))
            print(f"{name + '.' + control:<38}{cells}  {'met' if met else 'MISSED'}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.browser_latency", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repeats", type=int, default=3, help="fresh explorers per control (default 3)")
    parser.add_argument("--clicks", type=int, default=8, help="clicks per button at most (default 8)")
    parser.add_argument("--only", nargs="+", help="time these controls only, e.g. GradientSum.batch_slider")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"where to write the results (default {RESULTS})")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from tests.browser.browser_setup import CHROMIUM, CHROMIUM_ARGS
    from tests.browser.lab_server import LabServer

    runpy.run_path(str(ROOT / "notebooks" / "conftest.py"))  # the lessons' environment: CPU devices
    explorers = explorers_as_in_the_lessons()
    only = set(args.only) if args.only else None
    reference_before = reference_figure_ms()
    with tempfile.TemporaryDirectory(prefix="dpcourse-browser-latency-") as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        with LabServer(root, Path(scratch), {}).running() as server:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                # CPU time is read while the server, its kernel and Chromium still run: an ended process's is gone.
                started, (machine_before, ours_before) = time.perf_counter(), cpu_seconds()
                results = measure_in_lab(
                    page, server.url, server.token, root, explorers, args.repeats, args.clicks, only
                )
                seconds, (machine_after, ours_after) = time.perf_counter() - started, cpu_seconds()
                browser.close()
    reference = {"before_ms": reference_before, "after_ms": reference_figure_ms()}
    print_table(results)
    ours = (ours_after - ours_before) / seconds
    others = (machine_after - machine_before) / seconds - ours
    print(f"\n{seconds:.0f} s; this benchmark (JupyterLab, kernel, Chromium) used {ours:.2f} cores, other processes "
          f"{others:.2f}; the reference figure took {reference['before_ms']:.0f} ms before, "
          f"{reference['after_ms']:.0f} ms after")
    output = {
        "machine": report.machine(), "cpus": sorted(os.sched_getaffinity(0)), "repeats": args.repeats,
        "clicks": args.clicks, "nice": os.nice(0), "seconds": seconds,
        "ours_cores": ours, "others_cores": others, "reference_figure": reference, "quiet_ms": QUIET_MS,
        "targets": {"median_ms": TARGET_MEDIAN_MS, "worst_ms": TARGET_WORST_MS},
        "explorers": {name: {"built_as": explorers[name], "controls": controls} for name, controls in results.items()},
    }
    report.write_json(args.json, output)
    print(f"wrote {args.json}")
    return output


if __name__ == "__main__":
    main()
