"""Lesson 02's exercises: the torch.chunk rule, chunks that are views of the batch, which batches keep every
device busy, and scatter on a dict."""

import torch

from ..examples import seeded_randn
from ..ui.words import plural
from .check import Case, Exercise, first_difference


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



def _busy_judge(case: Case, answer) -> str | None:
    batch, n = case.args
    sizes = _chunk_sizes(batch, n)
    if not isinstance(answer, bool):
        return f"expected True or False, got {answer!r}"
    if answer != (len(sizes) == n):
        return f"expected {len(sizes) == n}, got {answer}: scatter gives {plural(len(sizes), 'chunk')} here"
    return None


ALL_DEVICES_BUSY = Exercise(
    name="all_devices_busy",
    task="Write all_devices_busy(batch, n): True when scattering a batch of `batch` rows over n devices gives "
         "every device a chunk, else False.",
    cases=lambda: [
        Case("4 rows on 4 devices", (4, 4)),
        Case("5 rows on 4 devices", (5, 4), "count the chunks scatter makes, not the rows: a device may get none"),
        Case("9 rows on 4 devices", (9, 4), "torch.chunk makes chunks of ceil(9 / 4) rows"),
        Case("7 rows on 4 devices", (7, 4)),
    ],
    judge=_busy_judge,
    generated=_every_batch_up_to_24_on_up_to_8_devices,
)


def _dict_batch(rows: int) -> dict:
    return {"x": seeded_randn(rows, 3, seed=rows).requires_grad_(), "lengths": torch.arange(rows)}


def _entries_judge(case: Case, answer) -> str | None:
    """Each entry a dict with the batch's keys, holding its chunk of every value, made by scatter (its autograd
    node is Scatter's, so the gradient can flow back to the batch)."""
    inputs, n = case.args
    chunks = {key: value.chunk(n) for key, value in inputs.items()}
    count = len(chunks["x"])
    if not isinstance(answer, (list, tuple)) or len(answer) != count:
        found = plural(len(answer), "entry") if isinstance(answer, (list, tuple)) else type(answer).__name__
        return f"expected {plural(count, 'entry')}, one per chunk, got {found}"
    for i, entry in enumerate(answer):
        if not isinstance(entry, dict) or set(entry) != set(inputs):
            found = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            return f"entry {i}: expected a dict with keys {sorted(inputs)}, got {found}"
        difference = next(filter(None, (first_difference(chunks[key][i].detach(), entry[key].detach(),
                                                          f"entry {i}[{key!r}]") for key in inputs)), None)
        if difference:
            return difference
        if "Scatter" not in type(entry["x"].grad_fn).__name__:
            return (f"entry {i}['x'] was not made by dpcourse.scatter (its grad_fn is "
                    f"{type(entry['x'].grad_fn).__name__}): scatter the dict itself")
    return None


SCATTER_DICT = Exercise(
    name="scatter_dict",
    task="Write scatter_dict(inputs, n): scatter the dict `inputs` (a batch `x` and its `lengths`) over "
         "dpcourse.devices(n) with dpcourse.scatter, and return the entries, one per replica.",
    cases=lambda: [
        Case("x and lengths of 10 rows on 3 devices", (_dict_batch(10), 3)),
        Case("6 rows on 4 devices", (_dict_batch(6), 4), "scatter makes as many entries as chunks"),
        Case("5 rows on 2 devices", (_dict_batch(5), 2)),
    ],
    judge=_entries_judge,
)

EXERCISES = (CHUNK_SIZES, SCATTER_ROWS, ALL_DEVICES_BUSY, SCATTER_DICT)
