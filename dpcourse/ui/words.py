"""How the course writes a count: ``plural(1, "row")`` is "1 row", ``plural(2, "row")`` is "2 rows".

Every count a learner reads goes through it (check messages and case names, figure labels, the progress table),
so none reads "1 rows". It imports nothing, so a check that runs on ranks loads no widget or plotting library.
"""


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 row"`` or ``"3 rows"``: ``n`` and ``word``, with an s unless ``n`` is 1.

    A word whose plural is not word + s gives it: ``plural(2, "copy", "copies")`` is ``"2 copies"``.
    """
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"
