"""The explorers and a quiz, clicked in JupyterLab in Chromium: each click must change what the page shows.

The widgets run in a notebook written here (not a lesson), so these checks do not depend on which lessons
show which explorer. Expected texts come from the package where it defines them (the stage names).
"""

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from browser_setup import ARTIFACTS, TIMINGS
from lab_notebook import LabNotebook
from playwright.sync_api import Locator, expect

from dpcourse.widgets.stages import STAGES

pytestmark = pytest.mark.browser

NOTEBOOK = "browser_explorers.ipynb"
CELLS = [
    "import sys\nprint(sys.prefix)",
    "from dpcourse import quiz\nfrom dpcourse.widgets import ChunkExplorer, GradientSum, StepThrough, TraceExplorer",
    "StepThrough()",
    "ChunkExplorer()",
    "GradientSum()",
    'quiz.ask("02-ten-rows-four-devices")',
    "TraceExplorer(steps=2)",
]
STEP_THROUGH, CHUNKS, GRADIENTS, QUIZ, TIMELINE = 2, 3, 4, 5, 6
ERROR_STYLE = "[style*='C00000']"  # what dpcourse.ui.controls.reports_errors paints a callback's error in
WAIT_MS = 20_000  # a click reaches the kernel, which may draw a figure before answering


@pytest.fixture(scope="module")
def explorers(lab_context, lab, lab_root: Path) -> Iterator[LabNotebook]:
    """The explorers' notebook, run once in its own page; the tests below click it in order."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, lab_root / NOTEBOOK)
    page = lab_context.new_page()
    page.set_default_timeout(WAIT_MS)
    explorers = LabNotebook(page, lab.url, lab.token, NOTEBOOK)
    try:
        explorers.open()
        TIMINGS["explorers notebook (Run All in JupyterLab)"] = explorers.run_all(120)
        problems = explorers.problems()
        assert not problems, f"{NOTEBOOK} in JupyterLab:\n" + "\n\n".join(problems)
        one_view_each = {cell: 1 for cell in (STEP_THROUGH, CHUNKS, GRADIENTS, QUIZ, TIMELINE)}
        mismatches = explorers.wait_for_widget_views(one_view_each)
        assert not mismatches, f"{NOTEBOOK}: widgets did not render:\n" + "\n".join(mismatches)
        yield explorers
    finally:
        explorers.screenshot(ARTIFACTS / "explorers.png")
        lab.shutdown_kernels(NOTEBOOK)
        page.close()


def output(explorers: LabNotebook, cell: int) -> Locator:
    return explorers.cell(cell).locator(".jp-OutputArea-output")


def button(area: Locator, name: str) -> Locator:
    # A button with an icon has the icon's glyph in its accessible name, e.g. "\uf060 Back".
    return area.get_by_role("button", name=re.compile(rf"^\W*{re.escape(name)}$"))


def test_the_kernel_is_this_environments_python(explorers: LabNotebook) -> None:
    expect(output(explorers, 0)).to_have_text(sys.prefix)


def test_step_through_walks_the_nine_stages(explorers: LabNotebook) -> None:
    area = output(explorers, STEP_THROUGH)
    total = len(STAGES)

    def shows_stage(number: int) -> None:
        expect(area).to_contain_text(f"{STAGES[number - 1].name} — stage {number} of {total}")

    shows_stage(1)
    expect(button(area, "Back")).to_be_disabled()
    for number in range(2, total + 1):
        button(area, "Next").click()
        shows_stage(number)
        if number == 2:  # scatter has a figure, the inputs stage has none
            expect(area.locator(".widget-image")).to_be_visible()
    expect(button(area, "Next")).to_be_disabled()
    button(area, "Back").click()
    shows_stage(total - 1)
    button(area, "Reset").click()
    shows_stage(1)
    expect(area.locator(ERROR_STYLE)).to_have_count(0)


def slider_handle(area: Locator, index: int) -> Locator:
    return area.locator(".widget-hslider .noUi-handle").nth(index)


def press(handle: Locator, key: str, times: int) -> None:
    handle.focus()
    for _ in range(times):
        handle.press(key)


def test_chunk_explorer_follows_the_sliders(explorers: LabNotebook) -> None:
    area = output(explorers, CHUNKS)
    expect(area).to_contain_text("chunk sizes 3, 3, 3, 1")
    press(slider_handle(area, 0), "ArrowLeft", 4)  # batch 10 -> 6
    expect(area).to_contain_text("chunk sizes 2, 2, 2,")
    expect(area).to_contain_text("only 3 replicas run; device 3 sits idle")
    press(slider_handle(area, 1), "ArrowLeft", 1)  # devices 4 -> 3
    expect(area).to_contain_text("3 of 3 devices work")
    expect(area).not_to_contain_text("sits idle")
    expect(area.locator(ERROR_STYLE)).to_have_count(0)


def test_gradient_sum_explains_each_reduction(explorers: LabNotebook) -> None:
    area = output(explorers, GRADIENTS)
    figure = area.locator(".widget-image")
    expect(area).to_contain_text("the loss is averaged after the gather")
    mean_figure = figure.get_attribute("src")
    button(area, "per-replica mean, then mean").click()
    # 10 rows on 4 devices: chunks 3, 3, 3, 1, so a mean of the 4 chunk means weighs a sample 1/12 or 1/4.
    expect(area).to_contain_text("per-replica means weigh the 3-row chunks' samples 1/12 and the 1-row chunk's "
                                 "samples 1/4 instead of 1/10")
    assert figure.get_attribute("src") != mean_figure, "the figure should change with the reduction"
    button(area, "sum over the gathered output").click()
    expect(area).to_contain_text("the per-sample losses are summed after the gather")
    expect(area.locator(ERROR_STYLE)).to_have_count(0)


def test_quiz_judges_answers_and_runs_its_experiment(explorers: LabNotebook, progress_file: Path) -> None:
    home_progress = Path.home() / ".dpcourse" / "progress.json"
    home_before = home_progress.stat().st_mtime_ns if home_progress.exists() else None
    area = output(explorers, QUIZ)
    expect(area).to_contain_text("A batch of 10 rows is scattered over 4 devices")
    expect(button(area, "Run the experiment")).to_be_hidden()
    area.get_by_label("3, 3, 2, 2", exact=True).check()
    button(area, "Check my answer").click()
    expect(area).to_contain_text("✘ Not quite. The answer is 3, 3, 3, 1.")
    area.get_by_label("3, 3, 3, 1", exact=True).check()
    button(area, "Check my answer").click()
    expect(area).to_contain_text("✔ Right.")
    expect(area).to_contain_text("Scatter splits with tensor.chunk(len(devices), dim)")
    button(area, "Run the experiment").click()
    expect(area).to_contain_text("replica 3 (cpu): rows [9]")
    # The server gave the kernels DPCOURSE_PROGRESS: both answers went to the temporary file, none to ~/.dpcourse.
    assert progress_file.read_text().count('"answer"') == 2
    assert (home_progress.stat().st_mtime_ns if home_progress.exists() else None) == home_before


def test_timeline_traces_steps_when_run(explorers: LabNotebook) -> None:
    area = output(explorers, TIMELINE)
    expect(area).to_contain_text("2 steps: press Run to measure.")
    button(area, "Run").click()
    expect(area).to_contain_text("2 steps: measured.")
    expect(area).to_contain_text("replicate")
    expect(area.locator(ERROR_STYLE)).to_have_count(0)
