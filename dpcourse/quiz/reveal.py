"""``quiz.reveal(question)``: the output that gives a quiz's answer away, shown only after an answer.

    quiz.ask("13-reduce-others")
    ...
    with quiz.reveal("13-reduce-others"):
        print(moved["reduce"])
        display(viz.collective(moved["reduce"]))

(A first version: it shows the output at once. The quiz takes the output over in the next commit.)
"""

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def reveal(question: str) -> Iterator[None]:
    """Run the block; what it prints and displays answers the quiz ``question``."""
    yield
