"""Reading an explorer's HTML widgets as a learner reads them: the shared helpers of the widget tests."""

import html
import re

PNG = b"\x89PNG\r\n\x1a\n"  # how every PNG file starts


def text(widget) -> str:
    """An HTML widget's text as shown: tags removed, entities read, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", widget.value)).split())


def table_rows(table) -> dict[str, list[str]]:
    """An HTML table widget's rows by their first cell: ``{"step": ["1.00", ...], ...}``."""
    rows = re.findall(r"<tr>(.*?)</tr>", table.value)
    cells = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in rows]
    return {row[0]: row[1:] for row in cells}
