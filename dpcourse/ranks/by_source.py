"""Send a function written in a notebook cell to the ranks, as its source text, and rebuild it there.

``launch`` sends a worker to each rank by name (pickle records ``module.function``), so a worker must live
in an importable module. A function defined in a notebook cell has no such name: its module is the kernel's
``__main__``, which a rank cannot import. Its source is known, though: IPython keeps every cell's text
where ``inspect.getsource`` finds it. So ``SourceFunction.of(function)`` records

* the function's source;
* the names it uses from outside: its closure's values and the globals its code mentions. Modules travel
  by name and are imported again in the rank; functions from the same cell or module travel as source
  too; any other value travels pickled, and a value that cannot be pickled stays behind (the rank then
  raises ``NameError`` for it, as Python would). A class defined in the notebook, or an object of one (an
  exception class, a dataclass instance), would travel pickled *by name*, as ``__main__.Config``, which a rank
  cannot import: ``of`` refuses it at once with a ``TypeError`` that names it and says what to do;

and ``rebuild()``, in the rank, runs the source in a fresh namespace holding those names and returns the
function. The learner's code runs unchanged, with ``dist`` and ``torch`` as they wrote them, and on the lines it
had in its cell: a traceback's frame for it says ``line 7`` where the cell says line 7. Its filename,
``<name, sent by source>``, is how ``own_line`` finds the learner's frame in a rank's traceback.
"""

import builtins
import dataclasses
import importlib
import inspect
import io
import linecache
import pickle
import sys
import textwrap
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

SENT = ", sent by source>"  # the end of the filename every rebuilt function's code has


@dataclasses.dataclass
class ModuleName:
    """A module, sent as its name: ``import_module(name)`` in the rank."""

    name: str


@dataclasses.dataclass
class SourceFunction:
    """A function as its ``name``, ``source`` and the outside ``names`` it needs; ``rebuild()`` makes it again.
    ``first_line`` is the line of its ``def`` in the cell or file it came from."""

    name: str
    source: str
    names: dict[str, Any]
    first_line: int = 1

    @classmethod
    def of(cls, function: Callable) -> "SourceFunction":
        """Record ``function``; ``TypeError`` if it is not a ``def`` whose source Python can find."""
        if not isinstance(function, types.FunctionType) or function.__name__ == "<lambda>":
            raise TypeError(f"{function!r} is not a function written with def: write it with def in a cell.")
        try:
            source = textwrap.dedent(inspect.getsource(function))
        except (OSError, TypeError) as error:
            raise TypeError(f"The source of {function.__name__} cannot be found ({error}): define it in a "
                            "notebook cell or a .py file.") from None
        # inspect.getsource starts where co_firstlineno points: at the def, or at its first decorator
        return cls(function.__name__, source, dict(_outside_names(function)), function.__code__.co_firstlineno)

    def rebuild(self) -> Callable:
        """Run the source in a namespace of its own and return the function it defines."""
        namespace: dict[str, Any] = {"__builtins__": builtins, "__name__": "__learner__"}
        for name, value in self.names.items():
            if isinstance(value, ModuleName):
                value = importlib.import_module(value.name)
            elif isinstance(value, SourceFunction):
                value = value.rebuild()
            namespace[name] = value
        filename = f"<{self.name}{SENT}"
        text = "\n" * (self.first_line - 1) + self.source  # the cell's line numbers, in tracebacks too
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        exec(compile(text, filename, "exec"), namespace)
        return namespace[self.name]


def own_line(error: BaseException) -> str:
    """Where the learner's code sent by source raised, as ``line 7 of train: x = model.w``; ``""`` if not in it.

    The last frame of the traceback that belongs to a function ``rebuild`` made (the learner's, or a helper it
    called): lines below it are the library's or torch's, which the learner did not write.
    """
    own = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename.endswith(SENT)]
    if not own or not own[-1].line:
        return ""
    frame = own[-1]
    return f"line {frame.lineno} of {frame.name}: {frame.line.strip()}"


def _names_in(code: types.CodeType) -> Iterator[str]:
    """Every global name ``code`` and the code nested in it (comprehensions, inner functions) mention."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _names_in(constant)


class _NotebookClass(Exception):
    """Raised by ``_NotebookPickler`` on meeting a class that only the notebook's ``__main__`` defines."""


class _NotebookPickler(pickle.Pickler):
    """A pickler that stops at any class of the notebook's ``__main__``, which a rank could not import."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) and obj.__module__ == "__main__" and _main_is_a_notebook():
            raise _NotebookClass(obj.__qualname__)
        return NotImplemented


def _main_is_a_notebook() -> bool:
    """Whether ``__main__`` is a notebook's or an interactive session's (no file a rank could import it from)."""
    return not hasattr(sys.modules.get("__main__"), "__file__")


def _refuse_notebook_classes(function: types.FunctionType, name: str, value: Any) -> None:
    try:
        _NotebookPickler(io.BytesIO()).dump(value)
    except _NotebookClass as found:
        what = "a class defined in this notebook" if isinstance(value, type) else \
            f"a {type(value).__name__} object, and {found} is a class defined in this notebook"
        raise TypeError(
            f"{function.__name__} uses {name!r}, {what}. A rank cannot "
            f"import a notebook, so it cannot rebuild {name!r}. Define {name!r} inside {function.__name__} (its "
            "source travels with it), or use what a module defines: a built-in exception such as ValueError, a "
            "dict or a tuple instead of a dataclass."
        ) from None
    except Exception:  # not picklable at all: it stays behind (see the module's docstring)
        pass


def _outside_names(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    closure = zip(function.__code__.co_freevars, function.__closure__ or (), strict=True)
    values = {name: cell.cell_contents for name, cell in closure}
    values |= {name: function.__globals__[name] for name in _names_in(function.__code__)
               if name in function.__globals__ and name != function.__name__}
    for name, value in values.items():
        if isinstance(value, types.ModuleType):
            yield name, ModuleName(value.__name__)
        elif isinstance(value, types.FunctionType) and value.__module__ in ("__main__", function.__module__):
            yield name, SourceFunction.of(value)
        else:
            _refuse_notebook_classes(function, name, value)
            if _picklable(value):
                yield name, value


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:  # pickle raises many kinds: PicklingError, TypeError, AttributeError...
        return False
    return True
