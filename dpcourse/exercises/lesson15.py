"""Lesson 15's exercises: an optimizer's state in bytes, DataParallel's surplus on device 0, and three questions
asked of ``memory.predict`` and ``memory.profile_step``.

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



def _batch_for_twice(candidates: tuple[int, ...], n: int) -> int | None:
    for batch in candidates:
        common = {"devices": n, "batch": batch, "optimizer": "SGD", "model": sized_mlp(classes=32000)}
        if memory.predict(Setup(kind="DataParallel", **common)).totals[0] > 2 * memory.predict(
                Setup(kind="DDP", **common)).totals[0]:
            return batch
    return None


BATCH_FOR_TWICE = Exercise(
    name="batch_for_twice",
    task="Write batch_for_twice(candidates, n): with memory.predict, the smallest batch of `candidates` for which "
         "DataParallel's device 0 holds more than twice what each DDP rank holds (the lesson's MLP with 32000 "
         "classes, plain SGD, n devices), or None.",
    cases=lambda: [
        Case("256 to 16384 on 4 devices", ((256, 1024, 4096, 16384), 4),
             "compare .totals[0] of a DataParallel Setup and of a DDP Setup with the same batch"),
        Case("256 to 16384 on 2 devices", ((256, 1024, 4096, 16384), 2)),
        Case("small batches on 8 devices", ((64, 256, 1024), 8)),
        Case("batch 16 alone on 4 devices", ((16,), 4), "none of the candidates may be enough: return None"),
        Case("256 and 1024 on 1 device", ((256, 1024), 1)),
    ],
    judge=equals(_batch_for_twice),
)


def _bucket_view_saving(width: int, depth: int, n: int) -> int:
    per_rank = [memory.predict(Setup(kind="DDP", devices=n, model=sized_mlp(width=width, depth=depth),
                                     bucket_view=view)).totals[0] for view in (False, True)]
    return per_rank[0] - per_rank[1]


BUCKET_VIEW_SAVING = Exercise(
    name="bucket_view_saving",
    task="Write bucket_view_saving(width, depth, n): the bytes gradient_as_bucket_view=True saves on each of n DDP "
         "ranks for an MLP of this width and depth (memory.sized_mlp), by memory.predict.",
    cases=lambda: [
        Case("width 4096, depth 8, 8 ranks", (4096, 8, 8), "Setup(bucket_view=...): predict both and subtract"),
        Case("width 256, depth 3, 2 ranks", (256, 3, 2)),
        Case("width 1024, depth 2, 4 ranks", (1024, 2, 4)),
        Case("width 256, depth 3, 1 rank", (256, 3, 1)),
    ],
    judge=equals(_bucket_view_saving),
)


def _peak_against_kinds(setup: Setup) -> tuple[int, str, int]:
    profiled = memory.profile_step(setup)
    return profiled.peak, profiled.peak_phase, memory.predict(setup).totals[0]


PEAK_AGAINST_KINDS = Exercise(
    name="peak_against_kinds",
    task="Write peak_against_kinds(setup): profile one step of `setup` with memory.profile_step and return "
         "(the allocator's peak in bytes, the phase it happens in, the kinds added up by memory.predict).",
    cases=lambda: [
        Case("width 256, depth 3, 10 classes, batch 1024, SGD",
             (Setup(batch=1024, optimizer="SGD", model=sized_mlp(width=256, depth=3, classes=10)),),
             "memory.predict(setup).totals[0] adds the kinds up for device 0"),
        Case("width 64, depth 2, 100 classes, batch 512, Adam",
             (Setup(batch=512, optimizer="Adam", model=sized_mlp(width=64, depth=2, classes=100)),)),
    ],
    judge=equals(_peak_against_kinds),
)

EXERCISES = (OPTIMIZER_STATE_BYTES, DEVICE0_SURPLUS, BATCH_FOR_TWICE, BUCKET_VIEW_SAVING, PEAK_AGAINST_KINDS)
