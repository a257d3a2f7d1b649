"""Lesson 05's exercises: concatenating the replicas' tensors, gathering nested outputs, the length of a gathered
output, and a loss-in-forward module whose gathered losses average to the one-device loss."""

import warnings
from collections import namedtuple

import torch

from .. import examples
from ..data_parallel import DataParallel
from ..devices import devices
from ..scatter_gather import gather
from ..ui.words import plural
from .check import Case, Exercise, equals, first_difference

Pair = namedtuple("Pair", ["logits", "features"])


def _gathered(outputs: list):
    with warnings.catch_warnings():  # scalars become a vector with a warning: expected here
        warnings.simplefilter("ignore")
        return gather(outputs, "cpu")


def _values(seed: int, *shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator).to(dtype) for shape in shapes]


def _same_structure(expected, got, where: str = "output") -> str | None:
    """Like ``first_difference``, but the containers' types must match too (a namedtuple stays one)."""
    if expected is None:
        return None if got is None else f"{where}: expected None, got {type(got).__name__}"
    if isinstance(expected, torch.Tensor):
        return first_difference(expected, got, where)
    if type(got) is not type(expected):
        return f"{where}: expected a {type(expected).__name__}, got {type(got).__name__}"
    if isinstance(expected, dict):
        if list(got) != list(expected):
            return f"{where}: expected keys {list(expected)}, got {list(got)}"
        return next((d for k in expected if (d := _same_structure(expected[k], got[k], f"{where}[{k!r}]"))), None)
    if len(got) != len(expected):
        return f"{where}: expected {plural(len(expected), 'item')}, got {len(got)}"
    pairs = enumerate(zip(expected, got, strict=True))
    return next((d for i, (e, g) in pairs if (d := _same_structure(e, g, f"{where}[{i}]"))), None)


def _judge(case: Case, answer) -> str | None:
    (outputs,) = case.args
    return _same_structure(_gathered(outputs), answer)


GATHER_TENSORS = Exercise(
    name="gather_tensors",
    task="Write gather_tensors(outputs): the replicas' output tensors concatenated along dim 0, with 0-d tensors "
         "(one loss per replica) turned into a vector, and the first output's dtype.",
    cases=lambda: [
        Case("chunks of 3, 3, 3, 1 rows", (_values(0, (3, 4), (3, 4), (3, 4), (1, 4)),)),
        Case("one 0-d loss per replica", (_values(1, (), (), ()),),
             "torch.cat refuses 0-d tensors: view each one as a 1-element vector first"),
        Case("float32 then float64", ([*_values(2, (2, 3)), *_values(3, (1, 3), dtype=torch.float64)],),
             "torch.cat promotes to float64; gather keeps the first output's dtype"),
        Case("a single replica", (_values(4, (5, 2)),)),
    ],
    judge=_judge,
)


def _structure_cases() -> list[Case]:
    a, b, c = _values(5, (2, 3), (2, 3), (1, 3))
    la, lb = _values(6, (2,), (1,))
    return [
        Case("a dict per replica", ([{"out": a, "loss": la}, {"out": c, "loss": lb}],),
             "rebuild a dict with the same keys, gathering each key's values"),
        Case("a namedtuple per replica", ([Pair(a, b), Pair(c, c)],),
             "a namedtuple's type takes its fields as separate arguments: type(first)(*items)"),
        Case("a tuple with None", ([(a, None), (b, None)],), "replica 0's None gives None"),
        Case("a list of dicts", ([[{"x": a}], [{"x": b}]],), "recurse: gather each position of the list"),
        Case("a single replica: a tuple of a tensor and a dict", ([(a, {"loss": la})],),
             "one replica gives a list of one output: read the structure from outputs[0], the one every call has"),
    ]


GATHER_STRUCTURE = Exercise(
    name="gather_structure",
    task="Write gather_structure(outputs): combine one output per replica that may be a tensor (concatenate on "
         "dim 0), None, or a dict, tuple, list or namedtuple of these, keeping the first output's structure.",
    cases=_structure_cases,
    judge=_judge,
)



class _ColumnSums(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0)


def _gathered_length(batch: int, n: int) -> int:
    """What DataParallel itself gives, run on a batch of ones."""
    return DataParallel(_ColumnSums(), devices=devices(n))(torch.ones(batch, 5, device=devices(n)[0])).shape[0]


def _every_batch_up_to_12_on_up_to_6_devices() -> list[Case]:
    return [Case(f"{plural(batch, 'row')} on {plural(n, 'device')}", (batch, n))
            for batch in range(1, 13) for n in range(1, 7)]


GATHERED_LENGTH = Exercise(
    name="gathered_length",
    task="Write gathered_length(batch, n): the length of DataParallel's output on n devices for a batch of `batch` "
         "rows of 5 features, when the module returns x.sum(0), of shape (5,).",
    cases=lambda: [
        Case("8 rows on 2 devices", (8, 2), "gather concatenates the replicas' outputs along dimension 0"),
        Case("10 rows on 4 devices", (10, 4)),
        Case("6 rows on 4 devices", (6, 4), "one output per replica that ran: count the chunks, not the devices"),
        Case("3 rows on 4 devices", (3, 4)),
    ],
    judge=equals(_gathered_length),
    generated=_every_batch_up_to_12_on_up_to_6_devices,
)


def _losses_with_and_without(module_class: type, rows: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    module = module_class().to(devices(n)[0])
    x, y = examples.make_batch(rows, seed=rows, device=devices(n)[0])
    return DataParallel(module, devices=devices(n))(x, y), examples.loss_fn(module.model(x), y)


def _per_sample_judge(case: Case, answer) -> str | None:
    rows, n = case.args
    gathered, one_device = answer
    if not isinstance(gathered, torch.Tensor) or gathered.shape != (rows,):
        shape = list(gathered.shape) if isinstance(gathered, torch.Tensor) else type(gathered).__name__
        return (f"the gathered output has shape {shape}, expected [{rows}]: one loss per sample, so that no "
                f"chunk's size is lost in gather")
    return first_difference(one_device, gathered.mean(), "the gathered losses' mean", atol=1e-6)


PER_SAMPLE_LOSS = Exercise(
    name="PerSampleLoss",
    task="Write PerSampleLoss, a WithLoss whose output under DataParallel can be reduced to exactly the one-device "
         "loss, for any chunk sizes.",
    cases=lambda: [
        Case("10 rows on 4 devices: chunks 3, 3, 3, 1", (10, 4),
             "the mean of 4 chunk means weighs the row of the short chunk 3 times too much"),
        Case("7 rows on 3 devices", (7, 3)),
        Case("6 rows on 1 device", (6, 1)),
    ],
    judge=_per_sample_judge,
    call=lambda module_class, case: _losses_with_and_without(module_class, *case.args),
)

EXERCISES = (GATHER_TENSORS, GATHER_STRUCTURE, GATHERED_LENGTH, PER_SAMPLE_LOSS)
