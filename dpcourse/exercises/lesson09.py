"""Lesson 09's exercises: the bytes one DataParallel training step moves, worked out, and read from a trace: what
reduce-add sums onto devices[0], and what gather copies."""

import torch
from torch import nn

from ..data_parallel import DataParallel
from ..devices import devices
from ..examples import seeded_randn
from ..trace import trace
from ..ui.words import plural
from .check import Case, Exercise, equals


def _bytes_per_step(parameter_bytes: int, n: int) -> dict[str, int]:
    return {"replicate": (n - 1) * parameter_bytes, "reduce-add": (n - 1) * parameter_bytes}


def _sizes_on_up_to_8_devices() -> list[Case]:
    return [Case(f"{plural(p, 'byte')} on {plural(n, 'device')}", (p, n))
            for p in (1, 4, 1000, 3 * 2**20) for n in range(1, 9)]


BYTES_PER_STEP = Exercise(
    name="bytes_per_step",
    task="Write bytes_per_step(parameter_bytes, n): a dict with the bytes one training step copies out to the "
         "replicas ('replicate') and sums back onto devices[0] ('reduce-add'), for a model of parameter_bytes "
         "bytes on n devices.",
    cases=lambda: [
        Case("1 MB of parameters on 1 device", (1_000_000, 1), "one device: nothing is copied or summed"),
        Case("1 MB on 2 devices", (1_000_000, 2), "replica 0 uses the original parameters: it needs no copy"),
        Case("a 4 MiB model on 4 devices", (4 * 2**20, 4),
             "n - 1 replicas each get a copy and send a gradient of the same size back"),
        Case("a 100 MB model on 8 GPUs", (100_000_000, 8)),
    ],
    judge=equals(_bytes_per_step),
    generated=_sizes_on_up_to_8_devices,
)



def _traced_bytes(step: str, model_fn, n: int, *inputs: torch.Tensor) -> int:
    """The bytes the ``step`` span records in one forward (and, for a backward step, backward) on n devices."""
    dp = DataParallel(model_fn().to(devices(n)[0]), devices=devices(n))
    with trace() as recorded:
        output = dp(*inputs)
        if step == "reduce-add":
            output.pow(2).mean().backward()
    return recorded.steps(step)[0].bytes_copied


class _PerSampleLoss(nn.Module):
    """The lesson's ``WithLoss``: the model and its loss in one forward, one loss per sample."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (self.net(x) - target).pow(2).mean(dim=1)


MODELS = {
    "Linear(16, 8)": lambda: nn.Linear(16, 8),
    "Linear(16, 32), ReLU, Linear(32, 16)": lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)),
    "float64 Linear(16, 4) without bias": lambda: nn.Linear(16, 4, bias=False).double(),
}


def _reduce_cases() -> list[Case]:
    return [Case(f"{name} on {plural(n, 'device')}", (make, n))
            for (name, make), n in zip([*MODELS.items(), *MODELS.items()], (4, 2, 3, 8, 5, 6), strict=True)]


def _reduce_bytes(model_fn, n: int) -> int:
    dtype = next(model_fn().parameters()).dtype
    return _traced_bytes("reduce-add", model_fn, n, seeded_randn(8, 16, seed=n).to(dtype).to(devices(n)[0]))


REDUCE_BYTES = Exercise(
    name="reduce_bytes",
    task="Write reduce_bytes(model_fn, n): the bytes reduce-add sums onto devices[0] in one training step of "
         "model_fn() on n devices (8 rows of 16 features, loss output.pow(2).mean()), read from a trace.",
    cases=_reduce_cases,
    judge=equals(_reduce_bytes),
)


def _gather_cases() -> list[Case]:
    first = devices(4)[0]
    x, target = seeded_randn(12, 16, seed=0).to(first), torch.zeros(12, 16, device=first)
    wide = MODELS["Linear(16, 32), ReLU, Linear(32, 16)"]
    return [
        Case("Linear(16, 8), 12 rows on 4 devices", (MODELS["Linear(16, 8)"], 4, x)),
        Case("an MLP, 12 rows on 3 devices", (wide, 3, x), "the gather span of a trace has a bytes_copied field"),
        Case("the MLP with its loss inside, on 4 devices", (lambda: _PerSampleLoss(wide()), 4, x, target),
             "the model is given every input: call model_fn()(*inputs) under DataParallel"),
    ]


GATHERED_BYTES = Exercise(
    name="gathered_bytes",
    task="Write gathered_bytes(model_fn, n, *inputs): the bytes gather copies in one forward of model_fn() on n "
         "devices, read from a trace. Then compare the per-sample WithLoss model with the bare MLP.",
    cases=_gather_cases,
    judge=equals(lambda model_fn, n, *inputs: _traced_bytes("gather", model_fn, n, *inputs)),
)

EXERCISES = (BYTES_PER_STEP, REDUCE_BYTES, GATHERED_BYTES)
