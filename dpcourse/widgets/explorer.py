"""What every explorer shares: the VBox layout, the red message area, PNG figures cached per setting, and
the look-ahead (``look_ahead.py``) that prepares the learner's likely next settings while they look at this one.

An explorer keeps everything a reader (or a test) needs in widget *values*: ``HTML`` text and figures as PNG
bytes in an ``ipywidgets.Image``. Not in ``Output`` widgets: without a kernel they capture nothing, and a
notebook checked with nbval would see their captured text as a mismatch.
"""

import functools
import html
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
from matplotlib.figure import Figure

from dpcourse.ui.controls import ERROR_STYLE, NEEDS_KERNEL, kernel_gone_line, show_png
from dpcourse.ui.look_ahead import LookAhead, likely_values
from dpcourse.ui.png import rendered

TABLE_STYLE = "border-collapse: collapse; font-family: monospace; font-size: 12px"
CELL_STYLE = "padding: 1px 10px 1px 0; text-align: left"
def paragraph(text: str, style: str = "") -> str:
    """``text`` escaped, as an HTML paragraph (empty text gives an empty string)."""
    return f'<p style="{style}">{html.escape(text, quote=False)}</p>' if text else ""


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A small HTML table (monospace, left-aligned); every cell is escaped."""

    def line(cells: Sequence[Any], tag: str) -> str:
        escaped = (html.escape(str(c), quote=False) for c in cells)
        return "<tr>" + "".join(f'<{tag} style="{CELL_STYLE}">{c}</{tag}>' for c in escaped) + "</tr>"

    return f'<table style="{TABLE_STYLE}">' + line(header, "th") + "".join(line(r, "td") for r in rows) + "</table>"


def int_slider(description: str, value: int, low: int, high: int) -> widgets.IntSlider:
    """A slider that reports only when released: dragging would otherwise queue one recomputation per step.

    ``value`` outside ``low..high`` raises ``ValueError``: ``IntSlider`` would silently clamp it, and the
    explorer would show another setting than the one asked for.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{description}={value!r} is out of range: choose a whole number from {low} to {high}.")
    # Wide enough for a step per 7-8 px over 32 values: at ipywidgets' default a 12 px drag skipped 3 values.
    return widgets.IntSlider(value=value, min=low, max=high, description=description, continuous_update=False,
                             layout=widgets.Layout(width="380px"), style={"description_width": "70px"})


def _check_choice(argument: str, value: Any, options: Sequence[Any]) -> None:
    values = [option[1] if isinstance(option, tuple) else option for option in options]
    if value not in values:
        raise ValueError(f"{argument}={value!r} is not one of the choices: pick one of {values}.")


def toggle_buttons(description: str, options: Sequence[Any], value: Any, argument: str = "") -> widgets.ToggleButtons:
    """Buttons for one of ``options``; a ``value`` not among them raises ``ValueError`` naming the constructor's
    ``argument`` (default: the description) and the choices, where ipywidgets would say "value not found"."""
    _check_choice(argument or description, value, options)
    return widgets.ToggleButtons(
        options=list(options), value=value, description=description, style={"button_width": "auto"}
    )


def selection_slider(
    description: str, options: Sequence[Any], value: Any, argument: str = ""
) -> widgets.SelectionSlider:
    """A slider over ``options`` (values or ``(label, value)`` pairs) that reports only when released; a bad
    ``value`` raises as in ``toggle_buttons``."""
    _check_choice(argument or description, value, options)
    return widgets.SelectionSlider(options=list(options), value=value, description=description, continuous_update=False)


class Explorer(widgets.VBox):
    """Base of every explorer: a ``VBox`` of control rows, the explorer's own widgets, a figure and a message.

    * ``controls``: the public controls by attribute name (a subclass sets the attributes, then passes their
      names), in the order ``latency.measure_interactions`` exercises them;
    * ``image``: the current figure as PNG bytes (hidden and empty when the view has no figure);
    * ``message``: empty, or the last callback's error in red (see ``reports_errors``);
    * ``look_ahead``: after answering a learner's change, prepare the settings they most likely pick next;
      ``cached_figures()`` shows what has been rendered, prepared ahead or not.

    ``repr()`` is the class name and the controls' values, e.g. ``ChunkExplorer(batch=10, devices=4, dim=0)``:
    stable text for a notebook's stored output, where ipywidgets' default repr would list every child's value.
    """

    def __init__(self, controls: Sequence[str], rows: Sequence[widgets.Widget]) -> None:
        super().__init__()
        self.controls: dict[str, widgets.Widget] = {name: getattr(self, name) for name in controls}
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.message = widgets.HTML()
        self.message.add_class(NEEDS_KERNEL)
        self._pngs: dict[Hashable, tuple[bytes, str]] = {}  # per setting: the PNG and its css_width
        self._look_ahead = LookAhead()
        self.children = [*rows, self.image, self.message, kernel_gone_line()]

    def figure_png(self, key: Hashable, make: Callable[[], Figure]) -> tuple[bytes, str]:
        """The PNG and ``css_width`` of the figure ``make()`` draws, rendered once per ``key`` (``png.rendered``:
        the figure is freed young, so no full garbage collection lands in a later interaction)."""
        if key not in self._pngs:
            self._pngs[key] = rendered(make)
        return self._pngs[key]

    def cached_figures(self) -> Mapping[Hashable, tuple[bytes, str]]:
        """Every figure rendered so far, by its key (the setting it shows): its PNG and ``css_width``.

        A read-only view, live: it grows as the explorer renders, so a test (or a curious reader) can see
        what the look-ahead prepared before the learner asks for it.
        """
        return types.MappingProxyType(self._pngs)

    def show_figure(self, key: Hashable, make: Callable[[], Figure] | None) -> None:
        """Show the figure ``make()`` draws, rendered once per ``key``; ``make=None`` hides the image."""
        if make is None:
            self.image.value = b""
            self.image.layout.display = "none"
            return
        show_png(self.image, *self.figure_png(key, make))

    def look_ahead(self, *prepares: Callable[[], object]) -> None:
        """Call each of ``prepares`` in turn once the answer to the learner's current change has gone out:
        they fill this explorer's caches for the settings the learner most likely picks next, most likely
        first (see ``look_ahead.LookAhead``)."""
        self._look_ahead.schedule(*prepares)

    def likely_next(self, change: dict[str, Any]) -> list[dict[str, Any]]:
        """``settings()`` as they most likely are after the learner's next change, most likely first: the
        control that ``change`` moved, moved to each of ``likely_values`` (once more the same way, a slider's
        ends); empty if it has nowhere else to go."""
        name = next(name for name, control in self.controls.items() if control is change["owner"])
        values = likely_values(change["owner"], change["old"], change["new"])
        return [{**self.settings(), name.rpartition("_")[0]: value} for value in values]

    def prepare_next(self, change: dict[str, Any] | None, prepare: Callable[[dict[str, Any]], object]) -> None:
        """After answering the learner's ``change`` (``None``: the explorer's first drawing, nothing to follow),
        ``look_ahead`` to ``prepare(settings)`` for each of the settings ``likely_next`` expects."""
        guesses = [] if change is None else self.likely_next(change)
        self.look_ahead(*[functools.partial(prepare, guess) for guess in guesses])

    def clear_results(self) -> None:
        """Hide what the last good setting showed, so that no stale figure sits beside an error."""
        self.show_figure(None, None)

    def show_error(self, error: Exception) -> None:
        """``reports_errors`` calls this when a callback fails: the error in red, in place of the results."""
        self.clear_results()
        self.message.value = paragraph(f"{type(error).__name__}: {error}", ERROR_STYLE)

    def clear_error(self) -> None:
        """``reports_errors`` calls this when a callback succeeds: the previous error goes."""
        self.message.value = ""

    def settings(self) -> dict[str, Any]:
        """The value controls' current values, by name without the ``_slider`` / ``_toggle`` suffix."""
        return {
            name.rpartition("_")[0]: control.value
            for name, control in self.controls.items()
            if not isinstance(control, widgets.Button)
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.settings().items())})"
