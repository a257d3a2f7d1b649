"""Markdown that renders as the lesson means it, in JupyterLab and on the static site (nbconvert's mistune).

A wrapped line that starts with an issue number, ``#31460).``, is a level-1 heading for mistune, although
CommonMark (JupyterLab) wants a space after the ``#``: the static site showed lesson 02's reference as a title.
"""

import re
from pathlib import Path

import pytest
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from dpcourse import course

SOURCES = Path(__file__).parents[1] / "notebooks" / "src"
HASH_FIRST = re.compile(r"^# (#[^#\s].*)$")  # a markdown line (after the percent format's "# ") opening with #x


@pytest.mark.parametrize("lesson", [lesson.name for lesson in course.LESSONS])
def test_no_line_opens_with_an_issue_number(lesson: str) -> None:
    lines = (SOURCES / f"{lesson}.py").read_text().splitlines()
    opening = [f"{number}: {line}" for number, line in enumerate(lines, 1) if HASH_FIRST.match(line)]
    assert not opening, (
        f"notebooks/src/{lesson}.py: these markdown lines start with '#', which the static site renders as a "
        "heading; rewrap so that the '#' is not first:\n" + "\n".join(opening)
    )


def test_the_site_renderer_takes_an_issue_number_at_a_line_start_for_a_heading() -> None:
    """Why the test above exists: mistune turns it into <h1>."""
    assert "<h1" in markdown2html_mistune("see issue\n#31460).")
    assert "<h1" not in markdown2html_mistune("see issue #31460).")
