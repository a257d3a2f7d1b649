"""What an experiment returns: an ``Outcome``, and ``only_true`` for the option a measurement supports.

An experiment is a function with no arguments that runs dpcourse for real (CPU devices work everywhere)
and returns an ``Outcome``:

* ``text``: what to read, numbers included, shown under the question after "Run the experiment";
* ``value``: the measured answer, in the question's terms: a number for ``kind = "number"``, a shape
  for ``"shape"``, and for ``"choice"`` the text of the option the measurement supports. The tests
  check ``value`` against the question's answer, so an experiment cannot drift from its question;
* ``figure``: an optional matplotlib ``Figure`` (the widget shows it as a PNG).

The experiments live in ``dpcourse.quiz.experiments``, one module per lesson, and a question names its
experiment by function name.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

from matplotlib.figure import Figure

Experiment = Callable[[], "Outcome"]


@dataclasses.dataclass
class Outcome:
    """One experiment's result: ``text`` to read, the measured ``value``, and maybe a ``figure``."""

    text: str
    value: Any
    figure: Figure | None = None


def only_true(claims: dict[str, bool]) -> str:
    """The one claim that the measurement made true: the option a choice experiment supports.

    Raises ``RuntimeError`` when none or several hold, so a surprising measurement is never hidden.
    """
    holding = [claim for claim, holds in claims.items() if holds]
    if len(holding) != 1:
        raise RuntimeError(f"Expected exactly one claim to hold, but these hold: {holding or 'none'}.")
    return holding[0]
