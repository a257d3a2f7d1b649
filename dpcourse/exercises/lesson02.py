"""Lesson 02's exercises: the torch.chunk rule, and chunks that are views of the batch."""

import torch

from ..examples import seeded_randn
from ..ui.words import plural
from .check import Case, Exercise


def _chunk_sizes(batch: int, n: int) -> list[int]:
    return [len(chunk) for chunk in torch.arange(batch).chunk(n)]


def _chunk_sizes_judge(case: Case, answer) -> str | None:
    """The rule's invariants first, each with its own hint, then the sizes themselves."""
    batch, n = case.args
    expected = _chunk_sizes(batch, n)
    if not isinstance(answer, (list, tuple)) or not all(isinstance(size, int) for size in answer):
        return f"expected a list of whole numbers like {expected}, got {answer!r}"
    if sum(answer) != batch:
        return (f"expected {expected}, got {list(answer)}: {plural(sum(answer), 'row')} in all, but the batch has "
                f"{batch}. Every row goes to exactly one replica")
    if 0 in answer:
        return (f"expected {expected}, got {list(answer)}: an empty chunk. torch.chunk never makes one: "
                f"a device with nothing left gets no chunk, and fewer replicas run")
    if list(answer) != expected:
        size = -(-batch // n)
        return (f"expected {expected}, got {list(answer)}: torch.chunk gives every chunk ceil({batch} / {n}) = "
                f"{plural(size, 'row')}, the last one what is left")
    return None


def _every_batch_up_to_24_on_up_to_8_devices() -> list[Case]:
    return [Case(f"{plural(batch, 'row')} on {plural(n, 'device')}", (batch, n)) for batch in range(1, 25)
            for n in range(1, 9)]


CHUNK_SIZES = Exercise(
    name="chunk_sizes",
    task="Write chunk_sizes(batch, n): how many rows each replica gets when `batch` rows are scattered over "
         "`n` devices (the torch.chunk rule).",
    cases=lambda: [
        Case("8 rows on 2 devices", (8, 2)),
        Case("10 rows on 4 devices", (10, 4),
             "torch.chunk makes chunks of ceil(10 / 4) = 3 rows, the last one shorter"),
        Case("6 rows on 4 devices", (6, 4), "chunks of ceil(6 / 4) = 2 rows: only 3 chunks, one device idles"),
        Case("3 rows on 4 devices", (3, 4), "a device gets no chunk at all rather than an empty one"),
        Case("7 rows on 3 devices", (7, 3)),
    ],
    judge=_chunk_sizes_judge,
    generated=_every_batch_up_to_24_on_up_to_8_devices,
)


def _views_judge(case: Case, answer) -> str | None:
    x, n = case.args
    expected = x.chunk(n)
    if not isinstance(answer, (list, tuple)) or len(answer) != len(expected):
        found = plural(len(answer), "chunk") if isinstance(answer, (list, tuple)) else type(answer).__name__
        return f"expected {plural(len(expected), 'chunk')} (sizes {[len(c) for c in expected]}), got {found}"
    start = 0
    for i, (want, got) in enumerate(zip(expected, answer, strict=True)):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.equal(got, want):
            shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            rows = f"rows {start} to {start + len(want) - 1} of x (shape {list(want.shape)})"
            return f"chunk {i}: expected {rows}, got {shape}"
        if got.data_ptr() != want.data_ptr():
            return f"chunk {i} is a copy: it should be a view of x's memory, like x[{start}:{start + len(want)}]"
        start += len(want)
    return None


def _every_batch_up_to_12_on_up_to_6_devices() -> list[Case]:
    return [Case(f"{plural(batch, 'row')} on {plural(n, 'device')}", (seeded_randn(batch, 2, seed=batch), n))
            for batch in range(1, 13) for n in range(1, 7)]


SCATTER_ROWS = Exercise(
    name="scatter_rows",
    task="Write scatter_rows(x, n): the chunks torch.chunk would give, as views of x (no copies), "
         "by slicing x's rows.",
    cases=lambda: [
        Case("10 rows on 4 devices", (seeded_randn(10, 3, seed=0), 4),
             "slice x[start:start + size]: a slice is a view"),
        Case("8 rows on 2 devices", (seeded_randn(8, 2, seed=1), 2)),
        Case("6 rows on 4 devices", (seeded_randn(6, 2, seed=2), 4),
             "the torch.chunk rule gives 3 chunks of 2 rows here"),
        Case("1 row on 3 devices", (seeded_randn(1, 4, seed=3), 3)),
    ],
    judge=_views_judge,
    generated=_every_batch_up_to_12_on_up_to_6_devices,
)

EXERCISES = (CHUNK_SIZES, SCATTER_ROWS)
