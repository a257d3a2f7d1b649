"""The course itself: how long each notebook takes under nbval, and how fast every widget control answers.

The notebooks are timed as CI runs them: one ``pytest`` process from the repository root over all of them,
so the total includes starting pytest and every notebook's kernel. A widget control is timed in this
process, kernel side: from setting its value (or clicking it) to every observer having returned. What the
browser then takes to draw the result is not in the number.
"""

import contextlib
import importlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

from dpcourse import timing

from .rounds import others_cores

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_TIMEOUT_S = 1200  # for the whole course


def notebook_times(folder: Path, run: bool) -> dict:
    """Run every ``*.ipynb`` in ``folder`` under nbval in one pytest process (CI runs them on workers).

    ``total_s`` is that process's wall time (pytest start-up included); each notebook's ``seconds`` is the sum
    of its cells' times from pytest's JUnit report, its first cell including the kernel's start.
    ``run=False`` only lists them.
    """
    found = sorted(folder.glob("*.ipynb"))
    if not found or not run:
        note = f"no notebooks in {folder}" if not found else "listed, not run (--quick)"
        print(f"course: {note}", flush=True)
        return {"notebooks": [{"name": p.name} for p in found], "total_s": None, "note": note}
    print(f"course: nbval on {len(found)} notebooks", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        start = time.perf_counter()
        # -n 0: no pytest-xdist workers (the suite's default), so the times compare with the earlier runs'.
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                               f"--junitxml={report}", *map(str, found)],
                              cwd=ROOT, capture_output=True, text=True, timeout=NOTEBOOK_TIMEOUT_S)
        total = time.perf_counter() - start
        cells = list(ElementTree.parse(report).getroot().iter("testcase")) if report.exists() else []
    notebooks = []
    for path in found:
        mine = [c for c in cells if c.get("classname", "").endswith(path.name)]
        failed = sum(1 for c in mine if c.find("failure") is not None or c.find("error") is not None)
        notebooks.append({"name": path.name, "seconds": sum(float(c.get("time", 0)) for c in mine),
                          "cells": len(mine), "failed": failed})
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return {"notebooks": notebooks, "total_s": total, "passed": done.returncode == 0,
            "note": f"one pytest process for all notebooks: {summary}"}


def explorers() -> dict[str, type] | str:
    """The widget classes ``dpcourse.widgets`` exports, by name, or why there are none."""
    try:
        package = importlib.import_module("dpcourse.widgets")
    except ModuleNotFoundError as missing:
        if missing.name not in ("dpcourse.widgets", "dpcourse"):
            raise
        return "dpcourse.widgets does not exist yet: no widget was timed"
    import ipywidgets as w

    names = getattr(package, "__all__", [n for n in dir(package) if not n.startswith("_")])
    found = {n: getattr(package, n) for n in names}
    found = {n: c for n, c in found.items() if isinstance(c, type) and issubclass(c, w.Widget)}
    return found or "dpcourse.widgets exports no widget class yet"


def controls(explorer: object) -> dict:
    """The explorer's ``controls`` mapping if it has one, else its public buttons and value controls."""
    import ipywidgets as w

    if isinstance(getattr(explorer, "controls", None), dict):
        return explorer.controls
    passive = (w.Label, w.HTML, w.HTMLMath, w.Output, w.Box, w.Image, w.Valid)
    return {name: c for name, c in vars(explorer).items()
            if not name.startswith("_") and isinstance(c, (w.Button, w.ValueWidget)) and not isinstance(c, passive)}


def settings(control: object, count: int) -> list[tuple[str, object]]:
    """``(attribute, value)`` pairs to set, ``count`` of them spread over the control's range; [] for free text."""
    index = getattr(control, "index", None)
    if getattr(control, "options", None) is not None and isinstance(index, int):
        n = len(control.options)
        k = min(count, n)
        return [("index", round(i * (n - 1) / max(1, k - 1))) for i in range(k)]
    value = control.value
    if isinstance(value, bool):
        return [("value", not value), ("value", value)][:count]
    low, high = getattr(control, "min", None), getattr(control, "max", None)
    if low is None or high is None:
        return []
    points = [low + (high - low) * i / max(1, count - 1) for i in range(count)]
    if isinstance(low, int):
        points = [round(p) for p in points]
    if isinstance(value, tuple):
        return [("value", (low, p)) for p in points if p > low]
    return [("value", p) for p in points]


def interactions(explorer: object, count: int) -> dict[str, list[float]]:
    """Operate every control ``count`` times (clicks, or values over its range); seconds per interaction."""
    import ipywidgets as w

    timed: dict[str, list[float]] = {}
    for name, control in controls(explorer).items():
        clicks = isinstance(control, w.Button)
        actions = [("click", None)] * count if clicks else settings(control, count)
        original = None if clicks else control.value
        seconds = []
        for attribute, value in actions:
            with contextlib.redirect_stdout(io.StringIO()):
                start = time.perf_counter()
                if clicks:
                    control.click()
                else:
                    setattr(control, attribute, value)
                seconds.append(time.perf_counter() - start)
        if not clicks:
            control.value = original
        timed[name] = seconds
    return timed


def _measured_by_the_widgets(count: int) -> dict | None:
    """``tests.benchmarks.widget_latency.measure_all`` where it exists: the explorers' own definition of a
    session (``dpcourse.widgets.latency`` in older commits)."""
    try:
        latency = importlib.import_module("tests.benchmarks.widget_latency")
    except ModuleNotFoundError:
        return None
    with contextlib.redirect_stdout(io.StringIO()):
        return latency.measure_all(repeats=3, clicks=count)


def _generic(found: dict[str, type], count: int) -> tuple[dict, list[str]]:
    measured, skipped = {}, []
    for name, cls in found.items():
        try:
            explorer = cls()
        except TypeError as error:
            skipped.append(f"{name}: {error}")
            continue
        measured[name] = {control: {"n": len(seconds), "median_ms": statistics.median(seconds) * 1e3 if seconds
                                    else float("nan"), "worst_ms": max(seconds, default=float("nan")) * 1e3}
                          for control, seconds in interactions(explorer, count).items()}
    return measured, skipped


def widget_latency(found: dict[str, type] | None = None, count: int = 5, run: bool = True) -> dict:
    """Median and worst milliseconds of every control of every explorer, and the slowest of each.

    With ``found=None`` the explorers come from ``dpcourse.widgets``, timed by its own ``latency.measure_all``
    when it has one (3 fresh explorers each); otherwise every control is operated ``count`` times here.
    """
    discovered = found is None
    found = explorers() if discovered else found
    if isinstance(found, str) or not run:
        note = found if isinstance(found, str) else f"found {', '.join(found)}; not timed (--quick)"
        print(f"course: {note}", flush=True)
        return {"controls": [], "slowest_median_ms": None, "worst_ms": None, "note": note}
    print(f"course: widgets {', '.join(found)}", flush=True)
    measured = _measured_by_the_widgets(count) if discovered else None
    method, skipped = "tests.benchmarks.widget_latency.measure_all", []
    if measured is None:
        (measured, skipped), method = _generic(found, count), "each control operated in turn"
    rows = [{"explorer": explorer, "control": control, **timed}
            for explorer, by_control in measured.items() for control, timed in by_control.items() if timed["n"]]
    slowest = max(rows, key=lambda r: r["median_ms"], default=None)
    worst = max(rows, key=lambda r: r["worst_ms"], default=None)
    return {"controls": rows, "method": method,
            "slowest_median_ms": slowest and slowest["median_ms"], "worst_ms": worst and worst["worst_ms"],
            "note": "; ".join([f"slowest median: {slowest['explorer']}.{slowest['control']}" if slowest else "",
                               f"worst: {worst['explorer']}.{worst['control']}" if worst else "",
                               *(f"skipped {s}" for s in skipped)]).strip("; ")}


def _with_load(part: Callable[[], dict]) -> dict:
    """``part()``, plus the cores other processes kept busy meanwhile (see ``timing``)."""
    others: list[float] = []
    with others_cores(others):
        result = part()
    return {**result, "others_cores": others[0]}


def experiment_times(run: bool) -> dict:
    """Seconds per quiz experiment: the first run, and the faster of two more (the first may pay a one-time
    warm-up: lesson 10's first DDP experiment starts the process server that imports torch, about 3 s).

    A learner clicks "Run the experiment" and waits for it: the target is 0.3 s each, warm.
    """
    from dpcourse.quiz import EXPERIMENTS

    if not run:
        return {"experiments": sorted(EXPERIMENTS), "slowest_s": None, "note": "listed only (--quick)"}
    first, seconds = {}, {}
    for name, experiment in EXPERIMENTS.items():
        first[name] = timing.wall_time(experiment)()
        seconds[name] = min(timing.wall_time(experiment)() for _ in range(2))
    slowest = max(seconds, key=seconds.get)
    return {"seconds": seconds, "first_run_seconds": first, "slowest": slowest, "slowest_s": seconds[slowest],
            "over_target": sorted(name for name, s in seconds.items() if s > 0.3),
            "note": "seconds: best of runs 2 and 3; first_run_seconds: run 1, in course order in one process"}


def run(quick: bool) -> dict:
    """Notebooks, quiz experiments and widgets; ``quick`` only lists them (a full run takes minutes)."""
    return {"notebooks": _with_load(lambda: notebook_times(ROOT / "notebooks", run=not quick)),
            "experiments": _with_load(lambda: experiment_times(run=not quick)),
            "widgets": _with_load(lambda: widget_latency(run=not quick))}
