"""Reading an answer the way a learner would write it: shapes in any spelling, numbers as decimals or fractions.

A shape question accepts every way Python and torch print a shape, so the learner is judged on the shape,
not on the punctuation::

    (4,)   [4]   4   torch.Size([4])        -> (4,)
    (2, 3)   [2, 3]   2, 3   torch.Size([2, 3])   -> (2, 3)
    ()   []   torch.Size([])                -> ()   (a 0-d tensor, a scalar)

A number question accepts ``3``, ``0.25``, ``1e-3`` and fractions such as ``1/4``.
"""

import math
import re

_SIZE_PREFIX = re.compile(r"^torch\.Size\((.*)\)$", re.DOTALL)


def parse_shape(text: str | list | tuple) -> tuple[int, ...]:
    """Normalise a shape written as ``"(4,)"``, ``"[4]"``, ``"4"``, ``"torch.Size([4])"`` or ``[4]`` to ``(4,)``.

    Raises ``ValueError`` with a hint when ``text`` is not a shape (a negative or fractional size, words, or
    an empty string, which would be an unanswered question rather than the shape ``()``).
    """
    if isinstance(text, (list, tuple)):
        sizes = list(text)
    elif not isinstance(text, str):
        raise ValueError(f"{text!r} is not a shape. Write it like (4,) or [2, 3] or torch.Size([4]).")
    else:
        body = text.strip()
        if not body:
            raise ValueError("Type a shape such as (4,) or [2, 3]; write () for a 0-d tensor.")
        match = _SIZE_PREFIX.match(body)
        body = (match.group(1) if match else body).strip()
        for opening, closing in ("()", "[]"):
            if body.startswith(opening) and body.endswith(closing):
                body = body[1:-1]
                break
        sizes = [part.strip() for part in body.split(",") if part.strip()]
    try:
        shape = tuple(_size(part) for part in sizes)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a shape. Write the sizes as whole numbers, e.g. (4,) or [2, 3] or torch.Size([4])."
        ) from None
    return shape


def _size(part: object) -> int:
    if isinstance(part, bool):
        raise ValueError(part)
    if isinstance(part, int):
        size = part
    elif isinstance(part, str) and part.isdigit():
        size = int(part)
    else:
        raise ValueError(part)
    if size < 0:
        raise ValueError(part)
    return size


def parse_number(text: str | int | float) -> float:
    """Read ``"3"``, ``"0.25"``, ``"1e-3"`` or ``"1/4"`` as a float; ``ValueError`` with a hint otherwise.

    Only finite numbers are answers: ``1e999`` (which overflows a float), ``inf`` and ``nan`` are refused.
    A fraction is divided as floats rather than read with ``Fraction``, which would build the exact integer
    10**999999999 for an answer like ``1e999999999``.
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a number.")
    try:
        if isinstance(text, (int, float)):
            value = float(text)
        else:
            numerator, slash, denominator = text.strip().replace(" ", "").partition("/")
            value = float(numerator) / float(denominator) if slash else float(numerator)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise ValueError(f"{text!r} is not a number. Type a number such as 3, 0.25 or 1/4.") from None
    if not math.isfinite(value):
        raise ValueError(
            f"{text!r} is not a finite number (too large, infinite or NaN). Type a number such as 3, 0.25 or 1/4."
        )
    return value


def format_shape(shape: tuple[int, ...]) -> str:
    """``(4,)`` as torch prints it: ``torch.Size([4])``."""
    return f"torch.Size({list(shape)})"
