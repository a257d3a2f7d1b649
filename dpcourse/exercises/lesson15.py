"""Lesson 15's exercises: an optimizer's state in bytes, and DataParallel's surplus on device 0.

Both are judged against torch itself: the first against a real optimizer's ``state`` after one step, the second
against a real DataParallel step counted by ``dpcourse.memory.measure``.
"""

import torch
from torch import nn

from dpcourse import memory
from dpcourse.memory import Setup, sized_mlp

from .check import Case, Exercise, equals, first_difference


def _optimizer_state_bytes(parameters: list[torch.Tensor], optimizer: str) -> int:
    copies = [p.detach().clone().requires_grad_() for p in parameters]
    for p in copies:
        p.grad = torch.ones_like(p)
    step = memory.make_optimizer(optimizer, copies)
    step.step()
    return memory.storage_bytes(memory.state_tensors(step))


def _parameters(module: nn.Module) -> list[torch.Tensor]:
    return list(module.parameters())


def _shapes_dtypes_and_optimizers() -> list[Case]:
    layers = {"Linear(4, 3)": lambda: nn.Linear(4, 3), "Linear(5, 2) without bias": lambda: nn.Linear(5, 2, bias=False),
              "float64 Linear(2, 2)": lambda: nn.Linear(2, 2).double(), "two Linear layers":
              lambda: nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1)), "BatchNorm1d(3)": lambda: nn.BatchNorm1d(3)}
    return [Case(f"{name}, {optimizer}", (_parameters(make()), optimizer)) for name, make in layers.items()
            for optimizer in memory.OPTIMIZERS]


OPTIMIZER_STATE_BYTES = Exercise(
    name="optimizer_state_bytes",
    task="Write optimizer_state_bytes(parameters, optimizer): the bytes torch's optimizer ('SGD', 'SGD with "
         "momentum' or 'Adam') keeps in optimizer.state for these parameters after its first step.",
    cases=lambda: [
        Case("the lesson's MLP, Adam", (_parameters(sized_mlp().build()), "Adam"),
             "two buffers the size of each parameter (exp_avg, exp_avg_sq), and a 4-byte float32 step per tensor"),
        Case("the lesson's MLP, SGD with momentum", (_parameters(sized_mlp().build()), "SGD with momentum"),
             "one momentum buffer the size of each parameter, no step counter"),
        Case("the lesson's MLP, plain SGD", (_parameters(sized_mlp().build()), "SGD"), "plain SGD keeps no state"),
        Case("a float64 Linear(3, 2), Adam", (_parameters(nn.Linear(3, 2).double()), "Adam"),
             "a buffer has its parameter's dtype: numel() * element_size() bytes; the step counter stays float32"),
    ],
    judge=equals(_optimizer_state_bytes),
    generated=_shapes_dtypes_and_optimizers,
)


def _surplus_case(description: str, hint: str, devices: int, **setup: object) -> Case:
    one_device = memory.measure(Setup(**setup)).devices[0]
    data_parallel = memory.measure(Setup(kind="DataParallel", devices=devices, **setup)).totals
    return Case(description, (dict(one_device),), hint, {"answer": data_parallel[0] - data_parallel[1]})


def _surplus_cases() -> list[Case]:
    small = sized_mlp(width=128, depth=3, classes=100)
    return [
        _surplus_case("Adam, batch 64, 2 devices", "device 1 holds a replica, its gradients and its chunk's "
                      "activations; device 0 holds all that and more", 2, batch=64, optimizer="Adam", model=small),
        _surplus_case("SGD, batch 64, 4 devices", "SGD keeps no state, and the surplus does not depend on the "
                      "number of devices", 4, batch=64, optimizer="SGD", model=small),
        _surplus_case("SGD with momentum, 32000 classes, batch 32, 2 devices", "the outputs are gathered, and the "
                      "loss computed, on device 0 only", 2, batch=32, optimizer="SGD with momentum",
                      model=sized_mlp(width=64, depth=2, classes=32000)),
    ]


DEVICE0_SURPLUS = Exercise(
    name="device0_surplus",
    task="Write device0_surplus(one_device): one_device maps each kind of memory ('parameters', 'gradients', "
         "'optimizer state', 'activations', 'outputs and loss', ...) to the bytes one device holds when it trains "
         "on the whole batch. Return how many more bytes DataParallel's device 0 holds than device 1, for the "
         "same model, batch and optimizer (the batch splits evenly).",
    cases=_surplus_cases,
    judge=lambda case, answer: first_difference(case.context["answer"], answer, "device 0 - device 1"),
)

EXERCISES = (OPTIMIZER_STATE_BYTES, DEVICE0_SURPLUS)
