"""What the CPU and GPU benchmarks both time: the models, one training step, and the cost of tracing it.

Two models pull in opposite directions. The MLP (512 -> 1024 -> 1024 -> 10, batch 256) is almost all
matrix products, which release the GIL: replicas can overlap, and the question is what the copies and
the thread hand-offs cost on top. The 200-layer model does little arithmetic per layer, so its step is
mostly Python running one thread at a time: DataParallel can only add to it.
"""

import dataclasses
from collections.abc import Callable, Sequence

import torch
from torch import nn

import dpcourse
from dpcourse.timing import Sample, interleaved, wall_time, within


@dataclasses.dataclass(frozen=True)
class Workload:
    """A stack of Linear layers with ReLU between, and a batch to train it on.

    ``layers`` are the widths, input first and number of classes last.
    """

    name: str
    layers: tuple[int, ...]
    batch: int

    def model(self) -> nn.Sequential:
        linears = [nn.Linear(a, b) for a, b in zip(self.layers, self.layers[1:], strict=False)]
        return nn.Sequential(*[m for linear in linears for m in (linear, nn.ReLU())][:-1])

    def data(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(self.batch, self.layers[0], generator=generator)
        y = torch.randint(0, self.layers[-1], (self.batch,), generator=generator)
        return x.to(device), y.to(device)

    def describe(self) -> str:
        widths = f"{self.layers[0]}->...->{self.layers[-1]}"
        return f"{self.name}: {len(self.layers) - 1} Linear layers {widths}, batch {self.batch}"


def workloads(quick: bool) -> list[Workload]:
    if quick:
        return [Workload("mlp", (64, 128, 128, 10), 32), Workload("small-layers", (32,) * 21, 32)]
    return [Workload("mlp", (512, 1024, 1024, 10), 256), Workload("small-layers", (32,) * 201, 256)]


def training_step(forward: nn.Module, model: nn.Module, workload: Workload, device: torch.device) -> Callable[[], None]:
    """Forward, cross-entropy, backward, SGD: the same step whether ``forward`` is ``model`` or a wrapper of it."""
    x, y = workload.data(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(forward(x), y).backward()
        optimizer.step()

    return step


def dp_step(workload: Workload, model: nn.Module, devices: Sequence[torch.device]) -> Callable[[], None]:
    """One training step of ``dpcourse.DataParallel(model, devices)``; ``model`` must be on ``devices[0]``."""
    return training_step(dpcourse.DataParallel(model, devices=devices), model, workload, devices[0])


def tracing_cost(
    workload: Workload, devices: Sequence[torch.device], rounds: int, warmup: int,
    timer: Callable[[Callable[[], None]], Sample] = wall_time,
) -> dict:
    """One DP step with tracing off and inside ``dpcourse.trace()``.

    Off, the steps are dpcourse's own functions, untouched (the trace swaps in timed stand-ins only while it
    is open), so "off" costs nothing by construction. Opening and closing the trace are not timed; recording
    every span is.
    """
    model = workload.model().to(devices[0])
    step = timer(dp_step(workload, model, devices))
    variants = {"off": step, "on": within(dpcourse.trace, step)}
    return {"devices": [str(d) for d in devices], **interleaved(variants, rounds, warmup).report("off", "vs_off")}
